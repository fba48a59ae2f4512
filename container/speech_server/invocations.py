"""``POST /invocations``: one text in, its audio streamed out as it is synthesized.

Body: ``{"text", "voice"?, "speed"?, "format"?, "fast_start"?}``; ``format`` is ``wav`` (default,
a header of unknown length), ``pcm16``, ``mp3`` or ``opus`` (Ogg). The response is chunked and
each chunk leaves as soon as its audio exists. With ``Accept: text/event-stream`` the same bytes
come base64 in SSE events (the seed's SSE path, kept to measure what it costs)::

    data: {"type": "audio", "seq": 0, "format": "wav", "data": "UklGR..."}
    data: {"type": "synthesis_complete", "request_id": "...", ...}

Bad input is a 4xx JSON body with the same stable codes as the WebSocket route.
"""

from __future__ import annotations

import base64
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any, cast

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from speech_server.audio_encoding import AUDIO_FORMATS, AudioFormat, encoder_for
from speech_server.chunk_schedule import PlaybackClock
from speech_server.engine_share import EngineBusy, begins_answer
from speech_server.synthesis import AudioPiece, SynthesisStats, Synthesizer
from voicewire.speech_protocol import (
    ErrorCode,
    ErrorFrame,
    ProtocolError,
    SynthesisRequest,
    load_json_object,
    validate_synthesis_request,
)
from voicewire.sse import encode_sse_event

logger = logging.getLogger(__name__)

_STATUS_FOR: dict[ErrorCode, int] = {
    ErrorCode.TEXT_TOO_LONG: 413,
    ErrorCode.UNSUPPORTED_FORMAT: 415,
    ErrorCode.SPEECH_BUSY: 503,
}


def error_response(error: ProtocolError, status: int | None = None) -> JSONResponse:
    status = status or _STATUS_FOR.get(error.code, 400)
    return JSONResponse(ErrorFrame.of(error).model_dump(mode="json", exclude_none=True), status)


async def invocations(request: Request, synthesizer: Synthesizer) -> Response:
    try:
        body = load_json_object((await request.body()).decode("utf-8"))
        synthesis = validate_synthesis_request(body, synthesizer.engine.voices)
        audio_format = _audio_format(body.get("format", "wav"))
    except UnicodeDecodeError:
        return error_response(ProtocolError(ErrorCode.INVALID_UTF8, "request body is not UTF-8"))
    except ProtocolError as error:
        return error_response(error)
    clock = synthesizer.playback_clock()  # this request's listener
    if begins_answer(synthesis.fast_start, synthesis.starts_answer):
        try:  # refused before the response starts, while a status can still say so
            synthesizer.admit(clock)
        except EngineBusy as busy:
            return error_response(ProtocolError(ErrorCode.SPEECH_BUSY, str(busy)))

    sse = "text/event-stream" in request.headers.get("accept", "")
    stream = _encoded_audio(synthesizer, synthesis, audio_format, clock)
    if sse:
        return StreamingResponse(
            _as_sse(stream, synthesizer, synthesis, audio_format),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache"},
        )
    encoder_media_type = encoder_for(audio_format).media_type
    return StreamingResponse(_bytes_only(stream), media_type=encoder_media_type)


def _audio_format(value: Any) -> AudioFormat:
    if value not in AUDIO_FORMATS:
        raise ProtocolError(
            ErrorCode.UNSUPPORTED_FORMAT,
            f"format {value!r} is not one of: {', '.join(AUDIO_FORMATS)}",
        )
    return cast(AudioFormat, value)


async def _encoded_audio(
    synthesizer: Synthesizer,
    synthesis: SynthesisRequest,
    audio_format: AudioFormat,
    clock: PlaybackClock,
) -> AsyncIterator[bytes | SynthesisStats]:
    """Encoded bytes as they come, then the request's stats as the last item."""
    encoder = encoder_for(audio_format, synthesizer.engine.sample_rate)
    stats = synthesizer.new_stats()
    # Closed with the response (a client gone mid-body), not when collected: until its end the
    # engine share counts it as speaking.
    frames = synthesizer.pcm_frames(
        synthesis.text,
        synthesis.voice or synthesizer.engine.default_voice,
        synthesis.speed,
        fast_start=synthesis.fast_start,
        stats=stats,
        clock=clock,
        admitted=True,  # weighed in ``invocations``, before the response began
    )
    async with contextlib.aclosing(frames):
        async for piece in frames:
            if not isinstance(piece, AudioPiece):  # word timings: not asked for on this path
                continue
            if encoded := encoder.encode(piece.pcm):
                yield encoded
    if tail := encoder.finish():
        yield tail
    yield stats


async def _bytes_only(stream: AsyncIterator[bytes | SynthesisStats]) -> AsyncIterator[bytes]:
    # An engine failure after the headers went out cannot change the status code: it propagates
    # and aborts the chunked body, so the client sees a broken transfer, not a short clean file.
    async for item in stream:
        if isinstance(item, bytes):
            yield item


async def _as_sse(
    stream: AsyncIterator[bytes | SynthesisStats],
    synthesizer: Synthesizer,
    synthesis: SynthesisRequest,
    audio_format: AudioFormat,
) -> AsyncIterator[bytes]:
    request_id = synthesis.request_id or "invocation"
    seq = 0
    try:
        async for item in stream:
            if isinstance(item, bytes):
                yield encode_sse_event(
                    {
                        "type": "audio",
                        "seq": seq,
                        "format": audio_format,
                        "data": base64.b64encode(item).decode("ascii"),
                    }
                )
                seq += 1
                continue
            complete = item.complete_frame(request_id, synthesizer.engine.sample_rate)
            yield encode_sse_event(complete.model_dump(mode="json", exclude_none=True))
    except Exception:
        logger.exception("SSE synthesis of %s failed", request_id)
        failure = ErrorFrame(
            code=ErrorCode.SYNTHESIS_FAILED,
            message="the speech engine failed on this text",
            request_id=synthesis.request_id,
        )
        yield encode_sse_event(failure.model_dump(mode="json", exclude_none=True))
