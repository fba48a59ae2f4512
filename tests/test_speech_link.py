"""SpeechSession over both transports, against the real speech server on a real port."""

from __future__ import annotations

import asyncio

import pytest
from sagemaker_standin import Failure, SidecarBridgeClient

from voicewire.speech_link import (
    AudioChunk,
    SpeechServerError,
    SpeechSession,
    SpeechStreamError,
    SynthesisCompleted,
    SynthesisStarted,
    open_speech_session,
)
from voicewire.speech_link.sagemaker_transport import Boto3CredentialsResolver, SageMakerTransport
from voicewire.speech_link.websocket_transport import WebSocketTransport

LONG_TEXT = (
    "This is a long answer, long enough to be cancelled while it is still being spoken. "
    "It goes on for several sentences. Each one takes a while to synthesize on a CPU. "
    "Nobody should hear the end of it."
)


def websocket_session(server) -> SpeechSession:
    return open_speech_session(server.ws_url)


def sagemaker_session(
    server, failure: Failure | None = None
) -> tuple[SpeechSession, SidecarBridgeClient]:
    client = SidecarBridgeClient(server.ws_url, failure)
    transport = SageMakerTransport("kokoro-82m", region="us-east-1", client=client)
    return SpeechSession(transport), client


@pytest.fixture(params=["websocket", "sagemaker"])
def session_for(request, speech_server):
    def make() -> SpeechSession:
        if request.param == "websocket":
            return websocket_session(speech_server)
        return sagemaker_session(speech_server)[0]

    return make


async def test_pipelined_requests_come_back_in_order_with_their_audio(session_for):
    async with session_for() as session:
        first = await session.send("First one.")
        second = await session.send("Second, a bit longer.", speed=1.2)
        events = {rid: [event async for event in session.events(rid)] for rid in (first, second)}
    for request_id, stream in events.items():
        assert isinstance(stream[0], SynthesisStarted) and stream[0].request_id == request_id
        assert isinstance(stream[-1], SynthesisCompleted) and stream[-1].status == "complete"
        audio = b"".join(event.pcm for event in stream if isinstance(event, AudioChunk))
        assert len(audio) == stream[-1].audio_bytes > 24_000
        assert all(event.request_id == request_id for event in stream)


async def test_cancel_ends_a_request_as_cancelled(session_for):
    async with session_for() as session:
        request_id = await session.send(LONG_TEXT)
        seen_audio = False
        async for event in session.events(request_id):
            if isinstance(event, AudioChunk) and not seen_audio:
                seen_audio = True
                await session.cancel(request_id)
            if isinstance(event, SynthesisCompleted):
                completed = event
        audio, after = await session.synthesize("Still usable.")
    assert seen_audio and completed.status == "cancelled"
    assert after.status == "complete" and audio


async def test_error_frames_raise_with_their_code_and_the_session_goes_on(session_for):
    async with session_for() as session:
        bad = await session.send("Hello.", voice="nobody")
        with pytest.raises(SpeechServerError) as raised:
            async for _ in session.events(bad):
                pass
        audio, completed = await session.synthesize("Fine.")
    assert raised.value.code == "unknown_voice" and raised.value.request_id == bad
    assert completed.status == "complete" and audio


async def test_sagemaker_transport_sends_utf8_payload_parts(speech_server):
    session, client = sagemaker_session(speech_server)
    async with session:
        await session.synthesize("Hi.", request_id="sm-1")
    assert client.invocations[0].endpoint_name == "kokoro-82m"
    parts = [event.value for event in client.sent]
    assert all(part.data_type == "UTF8" for part in parts)
    assert parts[0].bytes_.startswith(b'{"text": "Hi.", "request_id": "sm-1"')
    assert parts[-1].bytes_ == b'{"type": "close"}'  # sent before the input stream closed


@pytest.mark.parametrize(
    ("kind", "code"), [("model", "model_stream_error"), ("internal", "internal_stream_failure")]
)
async def test_a_mid_stream_sagemaker_failure_is_a_typed_error(speech_server, kind, code):
    session, _ = sagemaker_session(speech_server, Failure(after_parts=3, kind=kind))
    async with session:
        request_id = await session.send(LONG_TEXT)
        received = []
        with pytest.raises(SpeechStreamError) as raised:
            async for event in session.events(request_id):
                received.append(event)
        with pytest.raises(SpeechStreamError):
            await session.send("After the failure.")
    assert raised.value.code == code and raised.value.request_id == request_id
    assert isinstance(received[0], SynthesisStarted)
    assert any(isinstance(event, AudioChunk) for event in received)  # it failed mid-stream


async def test_a_server_that_goes_away_fails_pending_requests(onnx_engine, server_factory):
    server = server_factory(lambda: onnx_engine)
    async with open_speech_session(server.ws_url) as session:
        request_id = await session.send(LONG_TEXT)
        stream = session.events(request_id)
        assert isinstance(await anext(stream), SynthesisStarted)
        server.server.should_exit = True
        with pytest.raises(SpeechStreamError) as raised:
            async for _ in stream:
                pass
    assert raised.value.code == "connection_closed"


async def test_connecting_to_nothing_is_a_typed_error():
    from conftest import free_port

    session = SpeechSession(WebSocketTransport(f"ws://127.0.0.1:{free_port()}/x", open_timeout=2))
    with pytest.raises(SpeechStreamError) as raised:
        await session.open()
    assert raised.value.code == "connect_failed"


async def test_close_waits_for_pending_answers(speech_server):
    session = open_speech_session(speech_server.ws_url)
    await session.open()
    request_id = await session.send("Last words.")
    collected = asyncio.create_task(_collect(session, request_id))
    await session.close()
    events = await collected
    assert isinstance(events[-1], SynthesisCompleted) and events[-1].status == "complete"


async def _collect(session, request_id):
    return [event async for event in session.events(request_id)]


async def test_boto3_credentials_reach_the_sdk(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "token")
    identity = await Boto3CredentialsResolver().get_identity(properties={})
    assert (identity.access_key_id, identity.secret_access_key, identity.session_token) == (
        "AKIDEXAMPLE",
        "secret",
        "token",
    )
