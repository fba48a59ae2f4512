"""SpeechSession over both links, against the real speech server on a real port.

The ``sagemaker`` link is the deployed code path end to end: the SDK's production client (CRT
transport, HTTP/2 over TLS, SigV4, signed AWS event-stream messages) talking to the local
SageMaker runtime, whose sidecar relays to the container's WebSocket. Only the endpoint URL and
the trusted CA differ from AWS.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from conftest import start_runtime_for

from voicewire.speech_link import (
    AudioChunk,
    SpeechServerError,
    SpeechSession,
    SpeechStreamError,
    SynthesisComplete,
    SynthesisStart,
    open_speech_session,
)
from voicewire.speech_link.sagemaker_client import Boto3CredentialsResolver
from voicewire.speech_link.websocket_transport import WebSocketTransport
from voicewire_tools.local_stack.sagemaker_runtime import StreamFault

LONG_TEXT = (
    "This is a long answer, long enough to be cancelled while it is still being spoken. "
    "It goes on for several sentences. Each one takes a while to synthesize on a CPU. "
    "Nobody should hear the end of it."
)


@pytest.fixture(params=["websocket", "sagemaker"])
def session_for(request, speech_server, sagemaker_runtime):
    def make() -> SpeechSession:
        if request.param == "websocket":
            return open_speech_session(speech_server.ws_url)
        return sagemaker_runtime.session()

    return make


async def _collect(session, request_id):
    return [event async for event in session.events(request_id)]


async def test_pipelined_requests_come_back_in_order_with_their_audio(session_for):
    async with session_for() as session:
        first = await session.send("First one.")
        second = await session.send("Second, a bit longer.", speed=1.2)
        events = {rid: await _collect(session, rid) for rid in (first, second)}
    for request_id, stream in events.items():
        assert isinstance(stream[0], SynthesisStart) and stream[0].request_id == request_id
        assert isinstance(stream[-1], SynthesisComplete) and stream[-1].status == "complete"
        audio = b"".join(event.pcm for event in stream if isinstance(event, AudioChunk))
        assert len(audio) == stream[-1].audio_bytes > 24_000
        assert all(event.request_id == request_id for event in stream)


async def test_two_messages_one_after_the_other_on_one_session(session_for):
    async with session_for() as session:
        first_audio, first = await session.synthesize("One message.")
        second_audio, second = await session.synthesize("And then another.")
        assert session.idle and session.is_open
    assert first.status == second.status == "complete"
    assert len(first_audio) == first.audio_bytes and len(second_audio) == second.audio_bytes


async def test_cancel_ends_a_request_as_cancelled(session_for):
    async with session_for() as session:
        request_id = await session.send(LONG_TEXT)
        seen_audio = False
        async for event in session.events(request_id):
            if isinstance(event, AudioChunk) and not seen_audio:
                seen_audio = True
                await session.cancel(request_id)
            if isinstance(event, SynthesisComplete):
                completed = event
        audio, after = await session.synthesize("Still usable.")
    assert seen_audio and completed.status == "cancelled"
    assert after.status == "complete" and audio


async def test_error_frames_raise_with_their_code_and_the_session_goes_on(session_for):
    async with session_for() as session:
        bad = await session.send("Hello.", voice="nobody")
        with pytest.raises(SpeechServerError) as raised:
            await _collect(session, bad)
        audio, completed = await session.synthesize("Fine.")
    assert raised.value.code == "unknown_voice" and raised.value.request_id == bad
    assert completed.status == "complete" and audio


async def test_a_ping_is_answered_through_the_whole_path(session_for):
    async with session_for() as session:
        started = time.perf_counter()
        round_trips = [await session.ping() for _ in range(3)]  # raises if no pong comes
        elapsed_ms = (time.perf_counter() - started) * 1000
        audio, completed = await session.synthesize("Still answering after the pings.")
    # Each is a measured part of the time the three took (rounded to 0.1 ms)...
    assert sum(round_trips) <= elapsed_ms + 0.15
    # ... and a pong needs no engine: quicker than the server's own time for one sentence.
    assert max(round_trips) < completed.elapsed_ms
    assert completed.status == "complete" and audio


async def test_first_audio_arrives_before_the_last_sentence_is_sent(session_for):
    """Duplex for real: the first sentence's audio comes back while the input stream is open
    and the second sentence has not been written yet. A transport that sent its input only
    when closed (or read its output only after) would time out here."""
    async with session_for() as session:
        first = await session.send("The first sentence.")
        stream = session.events(first)
        async with asyncio.timeout(60):
            while not isinstance(await anext(stream), AudioChunk):
                pass
        second = await session.send("The last sentence, sent only now.")
        rest = [event async for event in stream]
        last = await _collect(session, second)
    assert isinstance(rest[-1], SynthesisComplete) and rest[-1].status == "complete"
    assert isinstance(last[-1], SynthesisComplete) and last[-1].status == "complete"


async def test_close_waits_for_pending_answers(session_for):
    session = session_for()
    await session.open()
    request_id = await session.send("Last words.")
    collected = asyncio.create_task(_collect(session, request_id))
    await session.close()
    events = await collected
    assert isinstance(events[-1], SynthesisComplete) and events[-1].status == "complete"
    assert not session.is_open


# --- the SageMaker path only -----------------------------------------------------------------


async def test_the_sagemaker_path_carries_signed_event_stream_parts(sagemaker_runtime):
    counters = sagemaker_runtime.runtime.counters
    before = (counters.streams_opened, counters.request_parts, counters.response_parts)
    async with sagemaker_runtime.session() as session:
        audio, completed = await session.synthesize("Hi.", request_id="sm-1")
    assert completed.status == "complete" and len(audio) == completed.audio_bytes
    assert counters.streams_opened == before[0] + 1
    assert counters.request_parts == before[1] + 1  # the message; no close message is sent
    # synthesis_start, the PCM frames, synthesis_complete: each frame one response part.
    assert counters.response_parts - before[2] >= 3


@pytest.mark.parametrize(
    ("kind", "code"), [("model", "model_stream_error"), ("internal", "internal_stream_failure")]
)
async def test_a_mid_stream_failure_is_a_typed_error(sagemaker_runtime, kind, code):
    sagemaker_runtime.runtime.fail_next_stream(StreamFault(after_parts=3, kind=kind))
    async with sagemaker_runtime.session() as session:
        request_id = await session.send(LONG_TEXT)
        received = []
        with pytest.raises(SpeechStreamError) as raised:
            async for event in session.events(request_id):
                received.append(event)
        assert not session.is_open
        with pytest.raises(SpeechStreamError):
            await session.send("After the failure.")
    assert raised.value.code == code and raised.value.request_id == request_id
    assert isinstance(received[0], SynthesisStart)
    assert any(isinstance(event, AudioChunk) for event in received)  # it failed mid-stream


async def test_a_container_that_dies_mid_stream_is_a_model_stream_error(
    onnx_engine, server_factory, tmp_path
):
    server = server_factory(lambda: onnx_engine)
    local = start_runtime_for(server.base_url.replace("http://", "ws://"), tmp_path)
    try:
        async with local.session() as session:
            request_id = await session.send(LONG_TEXT)
            stream = session.events(request_id)
            assert isinstance(await anext(stream), SynthesisStart)
            server.server.should_exit = True  # the container goes away mid-answer
            with pytest.raises(SpeechStreamError) as raised:
                async for _ in stream:
                    pass
    finally:
        local.running.stop()
    assert raised.value.code == "model_stream_error"
    assert "closed the stream" in raised.value.message


async def test_the_container_closing_the_session_ends_the_stream(sagemaker_runtime):
    """The server ends the session (here: asked to, with its protocol's ``close``); the
    runtime ends the response stream cleanly and the session says so."""
    session = sagemaker_runtime.session()
    await session.open()
    try:
        answered = await session.synthesize("Before the close.")
        await session._transport.send_message(b'{"type": "close"}')
        async with asyncio.timeout(10):
            await session.wait_ended()
        with pytest.raises(SpeechStreamError) as raised:
            await session.send("After the close.")
    finally:
        await session.close()
    assert answered[1].status == "complete"
    assert raised.value.code == "connection_closed"


async def test_fragmented_response_parts_are_joined(speech_server, tmp_path):
    """SageMaker may cut a frame into PARTIAL parts and does not join them for its caller."""
    local = start_runtime_for(
        speech_server.base_url.replace("http://", "ws://"), tmp_path, fragment_bytes=1000
    )
    try:
        async with local.session() as session:
            audio, completed = await session.synthesize("Cut into pieces, put back together.")
    finally:
        local.running.stop()
    assert completed.status == "complete" and len(audio) == completed.audio_bytes > 24_000
    assert local.runtime.counters.response_parts >= 3


async def test_an_unknown_endpoint_cannot_be_opened(sagemaker_runtime):
    session = sagemaker_runtime.session("no-such-endpoint")
    with pytest.raises(SpeechStreamError) as raised:
        await session.open()
    assert raised.value.code == "connect_failed"
    assert "no-such-endpoint" in raised.value.message and "not found" in raised.value.message


async def test_a_container_that_is_not_there_cannot_be_opened(tmp_path):
    from conftest import free_port

    local = start_runtime_for(f"ws://127.0.0.1:{free_port()}", tmp_path)
    try:
        with pytest.raises(SpeechStreamError) as raised:
            await local.session().open()
    finally:
        local.running.stop()
    assert raised.value.code == "connect_failed" and "ModelError" in raised.value.message


async def test_connecting_to_nothing_is_a_typed_error():
    from conftest import free_port

    session = SpeechSession(WebSocketTransport(f"ws://127.0.0.1:{free_port()}/x", open_timeout=2))
    with pytest.raises(SpeechStreamError) as raised:
        await session.open()
    assert raised.value.code == "connect_failed"


async def test_a_server_that_goes_away_fails_pending_requests(onnx_engine, server_factory):
    server = server_factory(lambda: onnx_engine)
    async with open_speech_session(server.ws_url) as session:
        request_id = await session.send(LONG_TEXT)
        stream = session.events(request_id)
        assert isinstance(await anext(stream), SynthesisStart)
        server.server.should_exit = True
        with pytest.raises(SpeechStreamError) as raised:
            async for _ in stream:
                pass
    assert raised.value.code == "connection_closed"


async def test_boto3_credentials_reach_the_sdk(monkeypatch):
    import boto3

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "token")
    identity = await Boto3CredentialsResolver(boto3.Session()).get_identity(properties={})
    assert (identity.access_key_id, identity.secret_access_key, identity.session_token) == (
        "AKIDEXAMPLE",
        "secret",
        "token",
    )
