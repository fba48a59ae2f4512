"""One speech-link contract: the session client and the server speak ``speech_protocol``'s models.

The client's messages are parsed here by the server's own parser, and the server's frames are
read by the client into the models the server builds them with. A scripted server on a real
port (``websockets``) answers with frames a real server would not send: a missing field, an
unknown type, a code newer than this client.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.asyncio.server import ServerConnection, serve

from voicewire.error_codes import ErrorCode, ProtocolError
from voicewire.speech_link import (
    AudioChunk,
    SpeechRequestError,
    SpeechServerError,
    SpeechStreamError,
    SynthesisComplete,
    SynthesisStart,
    open_speech_session,
)
from voicewire.speech_protocol import (
    CancelMessage,
    ErrorFrame,
    PingMessage,
    SynthesisRequest,
    dump_frame,
    parse_client_message,
)


@asynccontextmanager
async def scripted_server(answer) -> AsyncIterator[tuple[str, list]]:
    """A WebSocket server that parses each message with the speech server's parser and lets
    ``answer(ws, message)`` reply; yields its URL and the messages it received."""
    received: list = []

    async def handler(ws: ServerConnection) -> None:
        async for raw in ws:
            message = parse_client_message(raw)
            received.append(message)
            await answer(ws, message)

    async with serve(handler, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        yield f"ws://127.0.0.1:{port}/invocations-bidirectional-stream", received


def start_frame(request_id: str) -> str:
    return dump_frame(SynthesisStart(request_id=request_id))


def complete_frame(request_id: str, audio: bytes) -> str:
    frame = SynthesisComplete(
        request_id=request_id,
        audio_seconds=len(audio) / 48_000,
        audio_bytes=len(audio),
        chunks=1,
        first_audio_ms=12.5,
        elapsed_ms=20.0,
    )
    return dump_frame(frame)


async def speak(ws: ServerConnection, message) -> None:
    """What the speech server answers, built with the same models: start, audio, complete."""
    if isinstance(message, SynthesisRequest):
        audio = b"\x01\x02" * 480
        await ws.send(start_frame(message.request_id))
        await ws.send(audio)
        await ws.send(complete_frame(message.request_id, audio))
    elif isinstance(message, PingMessage):
        await ws.send(json.dumps({"type": "pong", "request_id": message.request_id}))
    elif isinstance(message, CancelMessage):
        pass


async def test_what_the_client_sends_is_what_the_server_parses():
    async with scripted_server(speak) as (url, received), open_speech_session(url) as session:
        request_id = await session.send(
            "Bonjour\u200b tout le monde.", voice="ff_siwis", speed=1.25, fast_start=False
        )
        events = [event async for event in session.events(request_id)]
        await session.ping()
        await session.cancel(request_id)
        await session.cancel()
        await session.ping()  # answers come in order: the cancels have been read
    request, ping, cancel_one, cancel_all, _ = received
    assert request == SynthesisRequest(
        text="Bonjour tout le monde.",
        voice="ff_siwis",
        speed=1.25,
        request_id=request_id,
        fast_start=False,
    )  # (the zero-width space is not said: the same rule on both sides)
    assert isinstance(ping, PingMessage) and ping.request_id
    assert cancel_one == CancelMessage(type="cancel", request_id=request_id)
    assert cancel_all == CancelMessage(type="cancel")
    start, chunk, complete = events
    assert start == SynthesisStart(request_id=request_id)  # the server's model, as it built it
    assert isinstance(chunk, AudioChunk) and chunk.request_id == request_id
    assert isinstance(complete, SynthesisComplete) and complete.chunks == 1
    assert complete.first_audio_ms == 12.5 and complete.audio_bytes == len(chunk.pcm)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    text=st.text(min_size=1, max_size=60),
    speed=st.floats(min_value=0.5, max_value=2.0),
    voice=st.none() | st.sampled_from(["af_heart", "jf_alpha"]),
)
def test_every_request_the_client_accepts_the_server_parses_back_the_same(text, speed, voice):
    async def once() -> tuple[list, str | None, Exception | None]:
        async with scripted_server(speak) as (url, received), open_speech_session(url) as session:
            try:
                request_id = await session.send(text, speed=speed, voice=voice)
            except SpeechRequestError as refused:
                return received, None, refused
            async for _ in session.events(request_id):
                pass
        return received, request_id, None

    received, request_id, refused = asyncio.run(once())
    if refused is not None:  # refused here: exactly what the server refuses
        assert received == []
        with pytest.raises(ProtocolError) as server_says:
            parse_client_message(json.dumps({"text": text, "speed": speed}))
        assert server_says.value.code == refused.code
        return
    (request,) = received
    assert (request.request_id, request.speed, request.voice) == (request_id, speed, voice)


@pytest.mark.parametrize(
    ("text", "options", "code"),
    [
        ("   \u200b ", {}, ErrorCode.MISSING_TEXT),
        ("x" * 4_001, {}, ErrorCode.TEXT_TOO_LONG),
        ("Hello.", {"speed": 3.0}, ErrorCode.SPEED_OUT_OF_RANGE),
    ],
)
async def test_a_request_the_server_would_refuse_is_refused_before_it_is_sent(text, options, code):
    async with scripted_server(speak) as (url, received), open_speech_session(url) as session:
        with pytest.raises(SpeechRequestError) as raised:
            await session.send(text, **options)
        assert session.idle and session.is_open  # nothing queued, the session goes on
        audio, complete = await session.synthesize("Still usable.")
    assert raised.value.code == code and raised.value.message
    assert [message.text for message in received] == ["Still usable."]
    assert complete.status == "complete" and audio


def frames_then_speak(*frames: str | bytes):
    """A server that first sends ``frames`` (in place of the request's start), then speaks."""

    async def answer(ws: ServerConnection, message) -> None:
        if isinstance(message, SynthesisRequest):
            for frame in frames:
                await ws.send(frame.replace("{id}", message.request_id))
        await speak(ws, message)

    return answer


async def test_a_frame_of_an_unknown_type_is_skipped():
    future = json.dumps({"type": "word_timings", "request_id": "{id}", "words": []})
    async with (
        scripted_server(frames_then_speak(future)) as (url, _),
        open_speech_session(url) as session,
    ):
        audio, complete = await session.synthesize("Hello.")
    assert complete.status == "complete" and audio


async def test_a_field_the_client_does_not_know_is_ignored_and_a_new_code_kept_as_text():
    async def answer(ws: ServerConnection, message) -> None:
        if isinstance(message, SynthesisRequest) and message.text == "Refuse me.":
            frame = {
                "type": "error",
                "code": "voice_retired",
                "message": "gone",
                "request_id": message.request_id,
                "since": "v9",
            }
            await ws.send(json.dumps(frame))
            return
        await speak(ws, message)

    async with scripted_server(answer) as (url, _), open_speech_session(url) as session:
        refused = await session.send("Refuse me.")
        with pytest.raises(SpeechServerError) as raised:
            async for _ in session.events(refused):
                pass
        audio, complete = await session.synthesize("And then this.")
    assert (raised.value.code, raised.value.message) == ("voice_retired", "gone")
    assert raised.value.request_id == refused
    assert complete.status == "complete" and audio


async def test_an_error_frame_is_read_with_the_server_s_model():
    async def answer(ws: ServerConnection, message) -> None:
        frame = ErrorFrame(
            code=ErrorCode.UNKNOWN_VOICE, message="no voice 'x'", request_id=message.request_id
        )
        await ws.send(dump_frame(frame))

    async with scripted_server(answer) as (url, _), open_speech_session(url) as session:
        request_id = await session.send("Hello.", voice="x")
        with pytest.raises(SpeechServerError) as raised:
            async for _ in session.events(request_id):
                pass
    assert raised.value.code == "unknown_voice" and raised.value.request_id == request_id


@pytest.mark.parametrize(
    ("frame", "says"),
    [
        ('{"type": "synthesis_start"}', "request_id: Field required"),
        (
            '{"type": "synthesis_complete", "request_id": "{id}", "audio_seconds": "long",'
            ' "audio_bytes": 2, "chunks": 1, "elapsed_ms": 1}',
            "audio_seconds: Input should be",
        ),
        (
            '{"type": "synthesis_complete", "request_id": "{id}", "status": "done",'
            ' "audio_seconds": 0, "audio_bytes": 0, "chunks": 0, "elapsed_ms": 1}',
            "status: ",
        ),
    ],
)
async def test_a_frame_that_breaks_the_protocol_fails_the_session_with_a_typed_error(frame, says):
    async with (
        scripted_server(frames_then_speak(frame)) as (url, _),
        open_speech_session(url) as session,
    ):
        request_id = await session.send("Hello.")
        with pytest.raises(SpeechStreamError) as raised:
            async for _ in session.events(request_id):
                pass
        assert not session.is_open  # what it would hear next cannot be trusted
    assert raised.value.code == "invalid_frame" and says in raised.value.message
    assert "does not follow the speech protocol" in raised.value.message
