"""SpeechSession over both links, against the real speech server on a real port.

The ``sagemaker`` link is the deployed code path end to end: the SDK's production client (CRT
transport, HTTP/2 over TLS, SigV4, signed AWS event-stream messages) talking to the local
SageMaker runtime, whose sidecar relays to the container's WebSocket. Only the endpoint URL and
the trusted CA differ from AWS. AWS does not say whether SageMaker answers a stream at once or
only after its first event, so the link is tested against a front door doing each.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator

import boto3
import pytest
from aws_sdk_sagemaker_runtime_http2.models import (
    InvokeEndpointWithBidirectionalStreamInput,
    RequestPayloadPart,
    RequestStreamEventPayloadPart,
)
from conftest import INITIAL_RESPONSES, refusal, start_runtime_for

from voicewire.speech_link import (
    AudioChunk,
    SpeechServerError,
    SpeechSession,
    SpeechStreamError,
    SynthesisComplete,
    SynthesisStart,
    open_speech_session,
)
from voicewire.speech_link.sagemaker_client import Boto3CredentialsResolver, build_client
from voicewire.speech_link.sagemaker_transport import CLOSE_STEP_SECONDS, SageMakerTransport
from voicewire.speech_link.websocket_transport import WebSocketTransport
from voicewire_tools.local_stack.http2_server import ClientGone, Http2Server, Stream
from voicewire_tools.local_stack.local_tls import LocalTls
from voicewire_tools.local_stack.sagemaker_runtime import HTTP1_ANSWER, StreamFault
from voicewire_tools.local_stack.sigv4_verifier import AccessKey

LONG_TEXT = (
    "This is a long answer, long enough to be cancelled while it is still being spoken. "
    "It goes on for several sentences. Each one takes a while to synthesize on a CPU. "
    "Nobody should hear the end of it."
)


@pytest.fixture(params=["websocket", *(f"sagemaker-{answer}" for answer in INITIAL_RESPONSES)])
def session_for(request, speech_server, sagemaker_runtimes):
    """The direct WebSocket, and SageMaker with each way its front door may answer a stream."""

    def make() -> SpeechSession:
        if request.param == "websocket":
            return open_speech_session(speech_server.ws_url)
        return sagemaker_runtimes[request.param.removeprefix("sagemaker-")].session()

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
    error = await refusal(sagemaker_runtime.session("no-such-endpoint"))
    assert error.code == "connect_failed"
    assert "no-such-endpoint" in error.message and "not found" in error.message


@pytest.mark.parametrize("initial_response", INITIAL_RESPONSES)
async def test_a_container_that_is_not_there_cannot_be_opened(tmp_path, initial_response):
    from conftest import free_port

    local = start_runtime_for(
        f"ws://127.0.0.1:{free_port()}", tmp_path, initial_response=initial_response
    )
    try:
        error = await refusal(local.session())
    finally:
        local.running.stop()
    assert error.code == "connect_failed" and "ModelError" in error.message
    assert local.runtime.counters.streams_refused == 1


# --- opening over SageMaker: sending before the answer ---------------------------------------


async def test_a_front_door_that_answers_only_after_the_first_event_opens(speech_server, tmp_path):
    """Some services answer a duplex stream only once its first event has come (the Smithy
    event-stream design lets a client send first, and AWS's samples for this API do). A
    transport that waited for the answer before sending would never open here: every session
    ``connect_failed`` after its open timeout."""
    local = start_runtime_for(
        speech_server.base_url.replace("http://", "ws://"),
        tmp_path,
        initial_response="after_first_event",
    )
    counters = local.runtime.counters
    try:
        session = SpeechSession(local.transport(open_timeout=1))
        async with session:
            # Open, though the front door has answered nothing yet: it waits for an event. The
            # worker opens its session while the model writes the first sentence, which may
            # take longer than the open timeout: nothing is owed before the first event.
            await asyncio.sleep(1.5)
            assert session.is_open and counters.streams_opened == 0
            audio, completed = await session.synthesize("Sent before the answer.")
            assert counters.streams_opened == 1
    finally:
        local.running.stop()
    assert completed.status == "complete" and len(audio) == completed.audio_bytes > 0


async def test_the_front_door_answers_at_once_or_with_the_first_event(sagemaker_runtime):
    """Through the SDK's client: a front door holding its answer sends none (not even its
    200) before the first event; one answering at once does; either way the first event, sent
    before or after the answer, reaches the container and its pong comes back."""
    client = await build_client(
        "us-east-1",
        endpoint_uri=sagemaker_runtime.running.endpoint_url,
        trusted_ca_file=sagemaker_runtime.tls.ca_file,
        credentials=Boto3CredentialsResolver(
            boto3.Session(**sagemaker_runtime.credentials.boto3_kwargs())
        ),
    )
    try:
        stream = await client.invoke_endpoint_with_bidirectional_stream(
            InvokeEndpointWithBidirectionalStreamInput(endpoint_name="kokoro-82m")
        )
        answer = asyncio.create_task(stream.await_output())
        await asyncio.wait({answer}, timeout=1)
        answered_before_the_event = answer.done()
        ping = b'{"type": "ping", "request_id": "p1"}'
        await stream.input_stream.send(
            RequestStreamEventPayloadPart(value=RequestPayloadPart(bytes_=ping, data_type="UTF8"))
        )
        pong = b""
        async with asyncio.timeout(10):
            _, output = await answer
            while True:  # the front door may cut the frame into PARTIAL parts
                part = (await output.receive()).value
                pong += part.bytes_
                if part.completion_state != "PARTIAL":
                    break
        await stream.input_stream.close()
        await output.close()
    finally:
        await client.close()
    held = sagemaker_runtime.runtime.initial_response == "after_first_event"
    assert answered_before_the_event is not held
    assert json.loads(pong) == {"type": "pong", "request_id": "p1"}


async def test_a_refusal_known_to_the_transport_refuses_the_next_message(sagemaker_runtime):
    """Once SageMaker's refusal is in, sending says so (``connect_failed``), not a failed
    write; a second ``close`` does nothing."""
    transport = sagemaker_runtime.transport("no-such-endpoint")
    await transport.connect()
    try:
        await transport.send_message(b'{"type": "ping", "request_id": "p1"}')
        with pytest.raises(SpeechStreamError) as received:
            await transport.receive()
        with pytest.raises(SpeechStreamError) as sent:
            await transport.send_message(b'{"type": "ping", "request_id": "p2"}')
    finally:
        await transport.close()
        await transport.close()
    assert received.value.code == sent.value.code == "connect_failed"
    assert sent.value.message == received.value.message
    assert "Endpoint no-such-endpoint of account 000000000000 not found." in sent.value.message


async def test_a_ping_waiting_for_a_refused_stream_is_told(sagemaker_runtime):
    async with sagemaker_runtime.session("no-such-endpoint") as session:
        with pytest.raises(SpeechStreamError) as raised:
            await session.ping(within=10)
    assert raised.value.code == "connect_failed" and "not found" in raised.value.message


async def silent_front_door(stream: Stream) -> None:
    """A front door that reads the request and never answers it."""
    with contextlib.suppress(ClientGone):
        while await stream.receive() is not None:
            pass
    await asyncio.Event().wait()


@contextlib.asynccontextmanager
async def never_answering(tmp_path) -> AsyncIterator[tuple[str, LocalTls]]:
    """An HTTP/2 front door (TLS, the local CA) that never answers a stream, on this loop."""
    from speech_server.server import bind_socket

    tls = LocalTls.create(tmp_path)
    sock = bind_socket("127.0.0.1", 0)
    server = Http2Server(silent_front_door, sock, tls.server_file, HTTP1_ANSWER)
    await server.start()
    try:
        yield f"https://localhost:{sock.getsockname()[1]}", tls
    finally:
        await server.stop()


def unanswered_transport(url: str, tls: LocalTls, open_timeout: float) -> SageMakerTransport:
    key = AccessKey.issue()
    return SageMakerTransport(
        "kokoro-82m",
        region="us-east-1",
        endpoint_uri=url,
        trusted_ca_file=tls.ca_file,
        boto3_session=boto3.Session(region_name="us-east-1", **key.boto3_kwargs()),
        open_timeout=open_timeout,
    )


async def test_no_answer_within_the_open_timeout_fails_the_session(tmp_path):
    """The open timeout runs from the first event sent, not from ``connect`` (a session opened
    early waits for its first text): then the reader is told ``connect_failed`` (timed out) as
    ``connect`` told it before, and so is the text waiting for its answer."""
    async with never_answering(tmp_path) as (url, tls):
        session = SpeechSession(unanswered_transport(url, tls, open_timeout=1))
        await session.open()
        try:
            await asyncio.sleep(1.5)  # longer than the timeout, nothing sent: nothing owed
            assert session.is_open
            started = time.monotonic()
            request_id = await session.send("Anyone?")
            with pytest.raises(SpeechStreamError) as raised:
                async for _ in session.events(request_id):
                    pass
            waited = time.monotonic() - started
        finally:
            await session.abort()
    assert raised.value.code == "connect_failed"
    assert raised.value.message == "cannot open SageMaker endpoint 'kokoro-82m': timed out"
    assert 0.9 <= waited < 5


@pytest.mark.parametrize("graceful", [True, False])
async def test_closing_before_any_answer_is_bounded(tmp_path, graceful):
    """``close`` with SageMaker's answer still awaited, a message sent and the reader waiting:
    it returns in bounded time, the reader gets the end, and a second ``close`` does nothing."""
    async with never_answering(tmp_path) as (url, tls):
        transport = unanswered_transport(url, tls, open_timeout=60)
        await transport.connect()
        await transport.send_message(b'{"type": "ping", "request_id": "p1"}')
        reading = asyncio.create_task(transport.receive())
        await asyncio.sleep(0.2)  # the message is on its way, the reader waits for the answer
        started = time.monotonic()
        await transport.close(graceful=graceful)
        closed_in = time.monotonic() - started
        async with asyncio.timeout(1):
            assert await reading is None
        await transport.close(graceful=graceful)
    assert closed_in < 3 * CLOSE_STEP_SECONDS
    with pytest.raises(SpeechStreamError) as raised:
        await transport.send_message(b"{}")
    assert raised.value.code == "not_connected"


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
