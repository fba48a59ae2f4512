"""Amazon Transcribe's streaming WebSocket API, on this machine.

On AWS the browser opens ``wss://transcribestreaming.{region}.amazonaws.com:8443/
stream-transcription-websocket?...`` with a URL voicewire presigned
(``voicewire.speech_in.transcribe_url``), streams ``AudioEvent`` messages and reads
``TranscriptEvent`` messages (``voicewire.speech_in.transcribe_events``). This is that endpoint,
for the local stack and the tests, as strict as AWS where AWS's behaviour is known, and saying
which choice is ours where it is not:

**The upgrade.** ``GET /stream-transcription-websocket`` with a presigned query, checked before
the upgrade by ``presigned_query`` with the keys the local stack issued, for this region and the
``transcribe`` service, ``X-Amz-Expires`` at most 300: a URL that fails (unknown key, another
region or service, expired, not yet valid, a signature that does not match what arrived) is
refused with HTTP 403 (``x-amzn-ErrorType``, ``{"message": ...}``) and never upgraded. That
Transcribe refuses a bad signature at the handshake is what this project's facts say
(../shared/SPEECH-IN-FACTS.md); the earlier developer guide lists ``UnrecognizedClientException``
("The WebSocket upgrade request was signed with an incorrect access key or secret key") among
the exception *frames*, so AWS may upgrade first and send that frame: unverified without an
account, recorded in docs/decisions.md. Upgraded, the response carries ``x-amzn-RequestId`` and
``x-amzn-SessionId`` (the guide's "Handling the WebSocket upgrade response").

**The request's parameters.** Checked after the signature, as AWS checks authentication first.
A parameter Transcribe rejects is answered as the guide says errors are ("If an exception occurs
while processing your request, Amazon Transcribe responds with a terminal WebSocket frame
containing an event-stream-encoded response ... After sending the exception response, Amazon
Transcribe sends a close frame"): the upgrade completes, one ``BadRequestException`` message,
then a close. The message has AWS's validation wording (awslabs/amazon-transcribe-streaming-sdk#40:
"1 validation error detected: Value 'ar-SA' at 'languageCode' failed to satisfy constraint:
Member must satisfy enum value set: [...]"), for ``languageCode`` (the enum: the languages the
recognizer behind this endpoint transcribes), ``mediaEncoding`` (pcm|ogg-opus|flac),
``mediaSampleRateHertz`` (8000-48000), ``sessionId`` (a UUID). A missing parameter is "Value
null at '...' failed to satisfy constraint: Member must not be null" (Coral's wording; what
Transcribe says for it was not found). What AWS accepts but this endpoint does not do (ogg-opus
and flac, language identification, vocabularies, speaker labels, channels, redaction) is a
``BadRequestException`` naming it: an honest refusal rather than a silent difference.

**The audio.** Each WebSocket frame must be one binary event-stream ``AudioEvent`` (CRCs
checked). A text frame, a frame that is not one well-formed message, or a message that is not
an ``AudioEvent`` is a ``BadRequestException`` "Unexpected WebSocket frame received." (AWS's
message for such a frame, captured in awsdocs/amazon-transcribe-developer-guide#14) followed by
what exactly is wrong, then a close. For ``pcm`` (signed 16-bit little-endian mono, "which does
not include WAV"), a chunk must hold whole samples, no WAV header (one that starts ``RIFF....WAVE``
is refused, naming its sample rate when it differs from the URL's), and at most 1 second of
audio at the URL's sample rate (``AudioEvent.AudioChunk``: "with a maximum duration of 1
second", the AWS SDKs' reference): the messages are ours.

**The end.** An empty ``AudioEvent`` ends the stream: the recognizer's final results are sent,
then a close (1000). No audio for ``idle_timeout`` seconds (15 by default) ends it with a
``BadRequestException`` "Your request timed out because no new audio was received for 15
seconds." (Transcribe's message, quoted in amazon-connect/amazon-connect-realtime-transcription#43
with "Status Code: 400", and in awslabs/amazon-transcribe-streaming-sdk#118). Every close is
1000 "Streaming completed successfully", the reason a Transcribe client reported even for a
stream it had sent bad audio to (amazon-archives/amazon-transcribe-websocket-static#2).

**The pace.** Transcribe wants audio at the pace it is spoken ("the audio chunks should be rate
limited to match the appropriate realtime bitrate", awslabs/amazon-transcribe-streaming-sdk#9);
a client that sends seconds of queued audio at once is refused with a ``BadRequestException``
"Your stream is too big. Reduce the frame size and try your request again." (the words users
report: aws-samples/amazon-transcribe-live-call-analytics#41, aws/aws-sdk-java-v2#2550). Where
AWS draws the line is not published: here a stream may run ``BURST_SECONDS`` of audio ahead of
``MAX_PACE`` times the time since it opened (voicewire's clients send at most twice real time,
``voicewire.speech_in.transcribe_client.MAX_PACE``; this is stricter than nothing and looser
than them, so the suite sees a burst again).

**Concurrency.** The account's quota of concurrent WebSocket streams (25 by default on AWS,
"Guidelines and quotas" in the developer guide; ``max_streams`` here): a stream beyond it is
upgraded and answered with a ``LimitExceededException`` ("You have reached your limit of
concurrent streams...": the class's description in the SDKs' reference: "typically the
concurrent stream service quota"), then a close. Whether AWS refuses it at the handshake instead
is unverified without an account (docs/decisions.md).

**Results.** The recognizer (``speech_recognizer.Recognizer``) is fed in a worker thread, one
call at a time, while frames keep being read (the idle clock counts from the last audio
*received*, not processed); its hypotheses become ``TranscriptEvent`` messages, one result each,
through ``speech_recognizer.TranscriptResults``. A recognizer that fails ends the stream with an
``InternalFailureException`` ("A problem occurred while processing the audio. Amazon Transcribe
terminated processing.", the API reference's description).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import re
import struct
import uuid
from asyncio import FIRST_COMPLETED
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import Any, TypeVar
from urllib.parse import parse_qsl

from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from voicewire.speech_in.transcribe_events import (
    EventStreamFrameError,
    ExceptionType,
    exception_event,
    read_audio_event,
    transcript_event,
)
from voicewire.speech_in.transcribe_url import (
    MAX_EXPIRES,
    MAX_SAMPLE_RATE,
    MEDIA_ENCODINGS,
    MIN_SAMPLE_RATE,
    PATH,
    SERVICE,
    SESSION_ID,
    STABILITIES,
)
from voicewire_tools.local_stack.presigned_query import PresignedQueryVerifier
from voicewire_tools.local_stack.sigv4_verifier import AccessKey, SignatureRejected, SigV4Verifier
from voicewire_tools.local_stack.speech_recognizer import (
    Recognizer,
    RecognizerSession,
    TranscriptResults,
)
from voicewire_tools.local_stack.threaded_server import RunningServer, serve_in_thread

logger = logging.getLogger(__name__)
_T = TypeVar("_T")

REGION = "us-east-1"  # where this endpoint is, unless told otherwise
IDLE_TIMEOUT = 15.0  # seconds without audio before Transcribe ends a stream
MAX_CHUNK_SECONDS = 1.0  # the longest audio one AudioEvent may carry
MAX_PACE = 3.0  # audio seconds per second a stream may be sent at, beyond its burst
BURST_SECONDS = 2.0  # audio a stream may run ahead of MAX_PACE (jitter, a first queued chunk)
MAX_STREAMS = 25  # Transcribe's default quota of concurrent WebSocket streams per account
TOO_BIG = "Your stream is too big. Reduce the frame size and try your request again."
OVER_QUOTA = (
    "You have reached your limit of concurrent streams. Reduce the number of concurrent "
    "streams and try your request again."
)
SAMPLE_WIDTH = 2  # pcm: signed 16-bit
CLOSE_REASON = "Streaming completed successfully"
UNEXPECTED_FRAME = "Unexpected WebSocket frame received."
INTERNAL_FAILURE = (
    "A problem occurred while processing the audio. Amazon Transcribe terminated processing."
)
# Valid on AWS, not done here: refused by name rather than ignored.
NOT_IMPLEMENTED = (
    "identify-language",
    "identify-multiple-languages",
    "language-options",
    "preferred-language",
    "vocabulary-name",
    "vocabulary-names",
    "vocabulary-filter-name",
    "vocabulary-filter-names",
    "vocabulary-filter-method",
    "language-model-name",
    "show-speaker-label",
    "enable-channel-identification",
    "number-of-channels",
    "content-identification-type",
    "content-redaction-type",
    "pii-entity-types",
)
_TRUE_FALSE = ("true", "false")


class StreamFailure(Exception):
    """Ends a stream with Transcribe's terminal exception message."""

    def __init__(self, exception_type: ExceptionType, message: str) -> None:
        super().__init__(f"{exception_type}: {message}")
        self.exception_type, self.message = exception_type, message


@dataclass(frozen=True)
class StreamRequest:
    """The parameters of one ``StartStreamTranscription`` over the WebSocket."""

    language_code: str
    media_encoding: str
    sample_rate: int
    session_id: str
    stabilize: bool = False
    stability: str | None = None


def parse_request(parameters: Mapping[str, str], languages: Iterable[str]) -> StreamRequest:
    """The request in a presigned URL's query, or the ``StreamFailure`` Transcribe answers it
    with (AWS's validation wording; see the module's docstring)."""
    errors: list[str] = []
    languages = sorted(languages)
    language_code = parameters.get("language-code")
    if language_code is None:
        errors.append(_null("languageCode"))
    elif language_code not in languages:
        errors.append(_not_in_enum(language_code, "languageCode", languages))
    media_encoding = parameters.get("media-encoding")
    if media_encoding is None:
        errors.append(_null("mediaEncoding"))
    elif media_encoding not in MEDIA_ENCODINGS:
        errors.append(_not_in_enum(media_encoding, "mediaEncoding", MEDIA_ENCODINGS))
    sample_rate = _sample_rate(parameters.get("sample-rate"), errors)
    session_id = parameters.get("session-id")
    if session_id is not None and not SESSION_ID.fullmatch(session_id):
        errors.append(
            f"Value '{session_id}' at 'sessionId' failed to satisfy constraint: Member must "
            f"satisfy regular expression pattern: {SESSION_ID.pattern}"
        )
    stabilize = parameters.get("enable-partial-results-stabilization", "false")
    if stabilize not in _TRUE_FALSE:
        errors.append(_not_in_enum(stabilize, "enablePartialResultsStabilization", _TRUE_FALSE))
    stability = parameters.get("partial-results-stability")
    if stability is not None and stability not in STABILITIES:
        errors.append(_not_in_enum(stability, "partialResultsStability", STABILITIES))
    if errors:
        count = f"{len(errors)} validation error{'s' if len(errors) > 1 else ''} detected"
        raise StreamFailure("BadRequestException", f"{count}: {'; '.join(errors)}")
    if media_encoding != "pcm":
        raise StreamFailure(
            "BadRequestException",
            f"media-encoding {media_encoding} is valid on Amazon Transcribe, but the local "
            "endpoint decodes pcm only (signed 16-bit little-endian mono samples)",
        )
    for name in NOT_IMPLEMENTED:
        if name in parameters and parameters[name] != "false":
            raise StreamFailure(
                "BadRequestException",
                f"'{name}' is valid on Amazon Transcribe, but the local endpoint does not "
                "implement it",
            )
    assert language_code is not None and sample_rate is not None  # checked above
    return StreamRequest(
        language_code=language_code,
        media_encoding=media_encoding,
        sample_rate=sample_rate,
        session_id=session_id or str(uuid.uuid4()),
        stabilize=stabilize == "true",
        stability=(stability or "high") if stabilize == "true" else None,
    )


def _sample_rate(value: str | None, errors: list[str]) -> int | None:
    if value is None:
        errors.append(_null("mediaSampleRateHertz"))
        return None
    if not re.fullmatch(r"\d{1,9}", value):  # our words: AWS's for a non-number not found
        errors.append(
            f"Value '{value}' at 'mediaSampleRateHertz' failed to satisfy constraint: Member "
            "must be an integer"
        )
        return None
    rate = int(value)
    if rate < MIN_SAMPLE_RATE:
        errors.append(
            f"Value '{rate}' at 'mediaSampleRateHertz' failed to satisfy constraint: Member "
            f"must have value greater than or equal to {MIN_SAMPLE_RATE}"
        )
    elif rate > MAX_SAMPLE_RATE:
        errors.append(
            f"Value '{rate}' at 'mediaSampleRateHertz' failed to satisfy constraint: Member "
            f"must have value less than or equal to {MAX_SAMPLE_RATE}"
        )
    return rate


def _null(member: str) -> str:
    return f"Value null at '{member}' failed to satisfy constraint: Member must not be null"


def _not_in_enum(value: str, member: str, allowed: Iterable[str]) -> str:
    return (
        f"Value '{value}' at '{member}' failed to satisfy constraint: Member must satisfy enum "
        f"value set: [{', '.join(allowed)}]"
    )


def check_pcm_chunk(pcm: bytes, sample_rate: int) -> None:
    """Raise the ``StreamFailure`` for a ``pcm`` chunk that is not what the URL announced."""
    if pcm[:4] == b"RIFF" and pcm[8:12] == b"WAVE":
        found = _wav_rate(pcm)
        rate = (
            f" at {found} Hz, but the stream's sample-rate is {sample_rate}"
            if found is not None and found != sample_rate
            else ""
        )
        raise StreamFailure(
            "BadRequestException",
            f"this AudioEvent starts with a WAV header{rate}: media-encoding pcm is raw signed "
            "16-bit little-endian samples, without a header",
        )
    if len(pcm) % SAMPLE_WIDTH:
        raise StreamFailure(
            "BadRequestException",
            f"this AudioEvent carries {len(pcm)} bytes, not whole 16-bit samples: "
            "media-encoding pcm is signed 16-bit little-endian mono",
        )
    limit = int(sample_rate * MAX_CHUNK_SECONDS) * SAMPLE_WIDTH
    if len(pcm) > limit:
        raise StreamFailure(
            "BadRequestException",
            f"this AudioEvent carries {len(pcm) / SAMPLE_WIDTH / sample_rate:.2f} s of audio at "
            f"{sample_rate} Hz ({len(pcm)} bytes); an AudioEvent carries at most "
            f"{MAX_CHUNK_SECONDS:g} s ({limit} bytes): send chunks of 50-200 ms, or check the "
            "sample-rate",
        )


def _wav_rate(data: bytes) -> int | None:
    """The sample rate in a WAV header's ``fmt `` chunk, if the chunk is there."""
    position = 12
    while position + 8 <= len(data):
        chunk_id, size = (
            data[position : position + 4],
            struct.unpack_from("<I", data, position + 4)[0],
        )
        if chunk_id == b"fmt " and position + 16 <= len(data):
            return struct.unpack_from("<I", data, position + 12)[0]
        position += 8 + size + (size & 1)
    return None


@dataclass
class EndpointCounters:
    streams_opened: int = 0  # upgraded
    streams_refused: int = 0  # answered 403 at the handshake
    streams_failed: int = 0  # ended by an exception message
    streams_over_quota: int = 0  # refused with LimitExceededException
    live: int = 0  # streams open now
    audio_events: int = 0
    transcript_events: int = 0


@dataclass
class LocalTranscribeStreaming:
    """The endpoint: ``app()`` is its Starlette app (serve it with uvicorn)."""

    recognizer: Recognizer
    verifier: PresignedQueryVerifier
    idle_timeout: float = IDLE_TIMEOUT
    counters: EndpointCounters = field(default_factory=EndpointCounters)
    max_streams: int = MAX_STREAMS  # the account's concurrent streams

    @classmethod
    def accepting(
        cls,
        recognizer: Recognizer,
        keys: Iterable[AccessKey],
        region: str = REGION,
        *,
        idle_timeout: float = IDLE_TIMEOUT,
        clock: Callable[[], datetime] | None = None,
    ) -> LocalTranscribeStreaming:
        """An endpoint in ``region`` that accepts URLs signed with ``keys``; ``clock`` (UTC,
        for tests) is the time URLs are checked against."""
        verifier = SigV4Verifier(
            {key.access_key_id: key.secret_access_key for key in keys}, region, service=SERVICE
        )
        if clock is not None:
            verifier.clock = clock
        return cls(
            recognizer, PresignedQueryVerifier(verifier, max_expires=MAX_EXPIRES), idle_timeout
        )

    def app(self) -> Starlette:
        return Starlette(routes=[WebSocketRoute(PATH, self.stream)])

    async def stream(self, websocket: WebSocket) -> None:
        """One ``StartStreamTranscription`` over a WebSocket, from the upgrade to the close."""
        request_id = str(uuid.uuid4())
        query = websocket.scope.get("query_string", b"").decode("latin-1")
        headers = {name.lower(): value for name, value in websocket.headers.items()}
        try:
            self.verifier.verify("GET", PATH, query, headers)
        except SignatureRejected as refused:
            self.counters.streams_refused += 1
            logger.info("transcribe stream refused: %s", refused)
            await websocket.send_denial_response(
                JSONResponse(
                    {"message": refused.message},
                    status_code=refused.status,
                    headers={
                        "x-amzn-ErrorType": refused.error_type,
                        "x-amzn-RequestId": request_id,
                    },
                )
            )
            return
        parameters = dict(parse_qsl(query, keep_blank_values=True))
        try:
            request = parse_request(parameters, self.recognizer.languages)
        except StreamFailure as failure:
            await websocket.accept(
                headers=_answer_headers(request_id, parameters.get("session-id"))
            )
            self.counters.streams_failed += 1
            await _fail(websocket, failure)
            return
        await websocket.accept(headers=_answer_headers(request_id, request.session_id))
        if self.counters.live >= self.max_streams:
            self.counters.streams_over_quota += 1
            await _fail(websocket, StreamFailure("LimitExceededException", OVER_QUOTA))
            return
        self.counters.streams_opened += 1
        self.counters.live += 1
        try:
            await _Stream(self, websocket, request).run()
        finally:
            self.counters.live -= 1


def _answer_headers(request_id: str, session_id: str | None) -> list[tuple[bytes, bytes]]:
    headers = [(b"x-amzn-requestid", request_id.encode())]
    if session_id and SESSION_ID.fullmatch(session_id):
        headers.append((b"x-amzn-sessionid", session_id.encode()))
    return headers


async def _fail(websocket: WebSocket, failure: StreamFailure) -> None:
    logger.info("transcribe stream ended: %s", failure)
    with contextlib.suppress(WebSocketDisconnect, RuntimeError):
        await websocket.send_bytes(exception_event(failure.exception_type, failure.message))
    await _close(websocket)


async def _close(websocket: WebSocket) -> None:
    with contextlib.suppress(WebSocketDisconnect, RuntimeError):
        await websocket.close(1000, CLOSE_REASON)


_END = None  # what the reader queues for the end of the audio


class _Gone(enum.Enum):
    GONE = "the client went away"  # nobody to answer: the stream just stops


_GONE = _Gone.GONE
_Ending = StreamFailure | _Gone | None  # None: the audio ended and every result was sent


class _Stream:
    """An upgraded stream: a reader of frames, and the recognizer fed in the order they came.

    Every call into the recognizer session runs on the stream's own one-thread executor: the
    loop stays free to read frames (and to keep the idle clock honest) while it works, and a
    session is never called from two threads at once, not even ``close`` after a stream whose
    last ``feed`` was still running when it failed."""

    def __init__(
        self, endpoint: LocalTranscribeStreaming, websocket: WebSocket, request: StreamRequest
    ) -> None:
        self.endpoint, self.websocket, self.request = endpoint, websocket, request
        self.audio: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.results = TranscriptResults(stabilize=request.stabilize)
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="recognizer")

    async def _call(self, function: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, partial(function, *args, **kwargs))

    async def run(self) -> None:
        try:
            session = await self._call(
                self.endpoint.recognizer.open,
                language_code=self.request.language_code,
                sample_rate=self.request.sample_rate,
            )
        except Exception:
            logger.exception("the recognizer could not open a session")
            self.executor.shutdown(wait=False)
            self.endpoint.counters.streams_failed += 1
            await _fail(self.websocket, StreamFailure("InternalFailureException", INTERNAL_FAILURE))
            return
        reader = asyncio.create_task(self._read())
        recognizing = asyncio.create_task(self._recognize(session))
        try:
            done, _ = await asyncio.wait({reader, recognizing}, return_when=FIRST_COMPLETED)
            # The recognizer ends on its own only by failing (or finding the client gone):
            # the end of the audio reaches it through the reader.
            ending: _Ending = reader.result() if reader in done else recognizing.result()
            if reader in done and ending is None:
                ending = await recognizing  # the final results
            else:  # a failure, or the client gone: nothing more is sent before the ending
                await _stop(reader, recognizing)
            if isinstance(ending, StreamFailure):
                self.endpoint.counters.streams_failed += 1
                await _fail(self.websocket, ending)
            elif ending is None:
                await _close(self.websocket)
        finally:
            await _stop(reader, recognizing)
            await self._call(session.close)  # queued after any feed still running
            self.executor.shutdown(wait=False)

    async def _read(self) -> _Ending:
        """Frames until the end of the audio (None), a bad frame or the idle timeout (the
        failure), or the client gone."""
        loop = asyncio.get_running_loop()
        timeout = self.endpoint.idle_timeout
        opened = last_audio = loop.time()
        audio_s = 0.0  # received so far
        while True:
            try:
                async with asyncio.timeout_at(last_audio + timeout):
                    message = await self.websocket.receive()
            except TimeoutError:
                return StreamFailure(
                    "BadRequestException",
                    "Your request timed out because no new audio was received for "
                    f"{timeout:g} seconds.",
                )
            if message["type"] == "websocket.disconnect":
                return _GONE
            frame = message.get("bytes")
            if frame is None:
                return StreamFailure(
                    "BadRequestException",
                    f"{UNEXPECTED_FRAME} (a text frame: audio goes in binary frames, one "
                    "event-stream AudioEvent each)",
                )
            try:
                pcm = read_audio_event(frame)
                if pcm:
                    check_pcm_chunk(pcm, self.request.sample_rate)
            except EventStreamFrameError as bad:
                return StreamFailure("BadRequestException", f"{UNEXPECTED_FRAME} ({bad})")
            except StreamFailure as failure:
                return failure
            self.endpoint.counters.audio_events += 1
            last_audio = loop.time()
            audio_s += len(pcm) / SAMPLE_WIDTH / self.request.sample_rate
            if audio_s > BURST_SECONDS + MAX_PACE * (last_audio - opened):
                return StreamFailure("BadRequestException", TOO_BIG)
            await self.audio.put(pcm or _END)
            if not pcm:
                return None

    async def _recognize(self, session: RecognizerSession) -> _Ending:
        """Feed the audio in order and send each hypothesis's result as it comes; at the end
        of the audio, the final results."""
        try:
            while True:
                pcm = await self.audio.get()
                if pcm is _END:
                    hypotheses = await self._call(session.finish)
                else:
                    hypotheses = await self._call(session.feed, pcm)
                for hypothesis in hypotheses:
                    result = self.results.result(hypothesis)
                    if result is not None:
                        await self.websocket.send_bytes(transcript_event([result]))
                        self.endpoint.counters.transcript_events += 1
                if pcm is _END:
                    return None
        except WebSocketDisconnect:
            return _GONE
        except Exception:
            logger.exception("the recognizer failed")
            return StreamFailure("InternalFailureException", INTERNAL_FAILURE)


async def _stop(*tasks: asyncio.Task[Any]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


@dataclass
class RunningTranscribeStreaming:
    endpoint: LocalTranscribeStreaming
    server: RunningServer
    host: str
    port: int

    @property
    def endpoint_url(self) -> str:
        """What ``presigned_transcribe_url(..., endpoint=...)`` takes."""
        return f"ws://{self.host}:{self.port}"

    def stop(self) -> None:
        self.server.stop()


def start_transcribe_streaming(
    endpoint: LocalTranscribeStreaming,
    host: str = "127.0.0.1",
    port: int = 0,
    **uvicorn_config: Any,
) -> RunningTranscribeStreaming:
    """Serve ``endpoint`` with uvicorn in a thread, as the local stack serves its other
    stand-ins (port 0: any free port)."""
    from speech_server.server import bind_socket

    sock = bind_socket(host, port)
    bound_port = sock.getsockname()[1]
    server = serve_in_thread(endpoint.app(), sock, "transcribe-streaming", **uvicorn_config)
    return RunningTranscribeStreaming(endpoint, server, host, bound_port)
