"""``SpeechSession``: many requests in flight on one speech-server session, each read in order.

The server answers requests strictly in the order they were sent (``docs/protocol.md``), so a
single reader task can route every frame: ``synthesis_start`` names the request that the next
audio frames belong to, ``synthesis_complete`` ends it, and an ``error`` frame names its request
(or, without a ``request_id``, answers the oldest request not yet started).

Messages and frames are ``voicewire.speech_protocol``'s models, the ones the server validates and
builds: a request the server would refuse is refused here, before it is sent
(``SpeechRequestError``), and a frame that does not follow the protocol fails the session
(``invalid_frame``) rather than being guessed at.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

from pydantic import BaseModel, ValidationError

from voicewire.control_frame import decode_control_frame
from voicewire.error_codes import ProtocolError
from voicewire.speech_link.errors import (
    SpeechRequestError,
    SpeechServerError,
    SpeechSessionError,
    SpeechStreamError,
)
from voicewire.speech_link.transport import SpeechTransport
from voicewire.speech_protocol import (
    CancelMessage,
    ErrorFrame,
    PingMessage,
    Pong,
    SynthesisComplete,
    SynthesisStart,
    WordsFrame,
    dump_frame,
    read_server_frame,
    validate_synthesis_request,
)

logger = logging.getLogger(__name__)

END_GRACE_SECONDS = 2.0  # once the input has ended, how long the server may take to end the stream


@dataclass(frozen=True)
class AudioChunk:
    """A binary frame of a request's audio (PCM, as its ``SynthesisStart`` says)."""

    request_id: str
    pcm: bytes


# ``WordsFrame`` only for a request sent with ``word_timings=True``, before the audio it times.
SpeechEvent = SynthesisStart | WordsFrame | AudioChunk | SynthesisComplete
_Item = SpeechEvent | SpeechSessionError


class SpeechSession:
    def __init__(self, transport: SpeechTransport, close_timeout: float = 30) -> None:
        self._transport = transport
        self._close_timeout = close_timeout
        self._queues: dict[str, asyncio.Queue[_Item]] = {}
        self._unstarted: deque[str] = deque()  # sent, not yet answered: answers come in order
        self._current: str | None = None  # the request the next audio frames belong to
        self._reader: asyncio.Task[None] | None = None
        self._failure: SpeechSessionError | None = None
        self._closing = False
        self._prefix = uuid.uuid4().hex[:8]
        self._numbers = itertools.count(1)
        self._outstanding: set[str] = set()  # texts sent and not yet completed or refused
        self._answered = asyncio.Event()  # set while nothing is outstanding
        self._answered.set()
        self._pings: dict[str, asyncio.Future[None]] = {}
        # How long ``open`` took: the session's set-up cost, as far as ``open`` waits for it
        # (over SageMaker the stream goes on opening with the first message: see
        # ``sagemaker_transport``).
        self.open_ms: float | None = None

    @property
    def target(self) -> str:
        return self._transport.target

    @property
    def is_open(self) -> bool:
        """Opened, not closing, and its stream has not ended or failed (as far as it knows)."""
        return self._reading and not self._closing

    @property
    def idle(self) -> bool:
        """No text is waiting for its answer: the session can be handed to someone else."""
        return not self._outstanding

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def open(self) -> None:
        """Open the transport and start reading. Over SageMaker this returns before SageMaker
        has answered: a refusal then fails the session's requests (and pings) with
        ``connect_failed``, as a failure later in the stream fails them with its own code."""
        started = time.perf_counter()
        await self._transport.connect()
        self.open_ms = round((time.perf_counter() - started) * 1000, 1)
        self._reader = asyncio.create_task(self._read(), name="speech-session-reader")

    async def send(
        self,
        text: str,
        *,
        request_id: str | None = None,
        voice: str | None = None,
        speed: float | None = None,
        fast_start: bool | None = None,
        word_timings: bool | None = None,
        starts_answer: bool | None = None,
    ) -> str:
        """Queue a text for synthesis without waiting; returns its request id. With
        ``word_timings``, its events include ``WordsFrame``s, each before the audio it times.

        Raises ``SpeechRequestError`` (nothing sent) for a request the server would refuse."""
        if self._failure is not None:
            raise self._failure
        request_id = request_id or f"{self._prefix}-{next(self._numbers)}"
        options = {
            "voice": voice,
            "speed": speed,
            "fast_start": fast_start,
            "word_timings": word_timings,
            "starts_answer": starts_answer,
        }
        body = {"text": text, "request_id": request_id}
        body |= {name: value for name, value in options.items() if value is not None}
        try:
            request = validate_synthesis_request(body)  # no voices: the server checks the voice
        except ProtocolError as refused:
            raise SpeechRequestError(refused.code, refused.message, request_id) from None
        self._queues[request_id] = asyncio.Queue()
        self._unstarted.append(request_id)
        self._outstanding.add(request_id)
        self._answered.clear()
        await self._send(request)
        return request_id

    async def events(
        self, request_id: str, *, idle_timeout: float | None = None
    ) -> AsyncIterator[SpeechEvent]:
        """This request's events in order, ending with ``SynthesisComplete``.

        Raises ``SpeechServerError`` if the server answered with an error frame and
        ``SpeechStreamError`` if the stream failed before the request completed, or
        (``response_timeout``) if ``idle_timeout`` seconds passed waiting for the request's next
        event: its ``synthesis_start``, its first audio, the next audio or its completion. Only
        the wait counts, not the time the caller spends between two events. The request stays
        outstanding: a session that timed out is for ``abort``, not for another turn.
        """
        queue = self._queues.get(request_id)
        if queue is None:
            raise KeyError(f"no request {request_id!r} was sent on this session")
        try:
            while True:
                try:
                    async with asyncio.timeout(idle_timeout):
                        item = await queue.get()
                except TimeoutError:
                    raise SpeechStreamError(
                        "response_timeout",
                        f"{self.target} sent nothing for request {request_id} in "
                        f"{idle_timeout:g} s",
                        request_id,
                    ) from None
                if isinstance(item, SpeechSessionError):
                    raise item
                yield item
                if isinstance(item, SynthesisComplete):
                    return
        finally:
            self._queues.pop(request_id, None)

    async def synthesize(self, text: str, **options: Any) -> tuple[bytes, SynthesisComplete]:
        """Send one text and collect its whole audio (a convenience for tools and tests)."""
        request_id = await self.send(text, **options)
        audio = bytearray()
        async for event in self.events(request_id):
            if isinstance(event, AudioChunk):
                audio += event.pcm
            elif isinstance(event, SynthesisComplete):
                return bytes(audio), event
        raise AssertionError("unreachable: events() ends with SynthesisComplete")

    async def cancel(self, request_id: str | None = None) -> None:
        """Cancel one request, or every pending one; each still ends with SynthesisComplete."""
        await self._send(CancelMessage(type="cancel", request_id=request_id))

    async def ping(self, within: float = 2.0) -> float:
        """Send a ``ping`` and wait for its ``pong``; returns the round trip in milliseconds.

        Answers come in order, so on a busy session the pong waits for the answers before it.
        Raises ``SpeechStreamError("ping_timeout")`` when none comes in time, or the stream's
        own error when it has failed.
        """
        if self._failure is not None:
            raise self._failure
        ping_id = f"{self._prefix}-ping-{next(self._numbers)}"
        answered = asyncio.get_running_loop().create_future()
        self._pings[ping_id] = answered
        started = time.perf_counter()
        try:
            await self._send(PingMessage(type="ping", request_id=ping_id))
            async with asyncio.timeout(within):
                await answered
        except TimeoutError:
            raise SpeechStreamError(
                "ping_timeout", f"no pong from {self.target} within {within:g} s"
            ) from None
        finally:
            self._pings.pop(ping_id, None)
        return round((time.perf_counter() - started) * 1000, 1)

    async def wait_ended(self) -> None:
        """Wait until the stream has ended: the server closed it, or it failed."""
        if self._reader is not None:
            await asyncio.shield(self._reader)

    async def close(self) -> None:
        """Let the server answer every text sent, then end the stream.

        The session does not send ``close`` and wait for the server to end the stream: over
        SageMaker, the CRT client cannot end its input once the response has ended (its writer
        fails), and ending the input while answers are on their way drops them. So the input
        is ended only once nothing is outstanding; SageMaker then closes the container's side.
        """
        if self._closing:
            return
        self._closing = True
        try:
            if self._reading:
                await asyncio.wait_for(self._answered.wait(), self._close_timeout)
        except TimeoutError:
            logger.warning(
                "speech session closed with answers pending after %.0f s", self._close_timeout
            )
        finally:
            await self._transport.close()
            await self._stop_reader(wait=END_GRACE_SECONDS)

    async def abort(self) -> None:
        """End the session now, without waiting for answers (pending requests fail).

        The transport is closed first and the reader left to see the end: cancelling a read
        under way would leave the SDK's HTTP client resolving a cancelled future."""
        self._closing = True
        await self._transport.close(graceful=False)
        await self._stop_reader(wait=END_GRACE_SECONDS)

    async def _send(self, message: BaseModel) -> None:
        await self._transport.send_message(dump_frame(message).encode())

    @property
    def _reading(self) -> bool:
        return self._reader is not None and not self._reader.done() and self._failure is None

    async def _stop_reader(self, wait: float) -> None:
        if self._reader is None or self._reader.done():
            return
        if wait:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._reader), wait)
        self._reader.cancel()
        await asyncio.gather(self._reader, return_exceptions=True)

    # --- the reader --------------------------------------------------------------------------

    async def _read(self) -> None:
        try:
            while (frame := await self._transport.receive()) is not None:
                self._route(frame)
            failure = SpeechStreamError("connection_closed", "the speech server ended the session")
        except SpeechSessionError as error:
            failure = error
        except asyncio.CancelledError:
            failure = SpeechStreamError("connection_closed", "the session was closed")
            self._fail_waiting(failure)
            raise
        if not (self._closing and failure.code == "connection_closed"):
            self._failure = failure  # nothing more can be sent on this session
        self._fail_waiting(failure)

    def _fail_waiting(self, failure: SpeechSessionError) -> None:
        self._outstanding.clear()
        self._answered.set()
        for request_id in list(self._queues):
            self._queues[request_id].put_nowait(_copy_of(failure, request_id))
        for answered in self._pings.values():
            if not answered.done():
                answered.set_exception(_copy_of(failure, None))

    def _route(self, frame: str | bytes) -> None:
        if isinstance(frame, str):
            control = _json_object(frame)
        else:
            control = decode_control_frame(frame)
            if control is None:
                self._deliver(self._current, AudioChunk(self._current or "", frame))
                return
        if control is None:
            logger.warning("ignoring a text frame that is not a JSON object")
            return
        try:
            frame = read_server_frame(control)
        except ValidationError as error:
            problem = error.errors(include_url=False)[0]
            where = ".".join(str(part) for part in problem["loc"][1:]) or "the frame"
            raise SpeechStreamError(
                "invalid_frame",
                f"{self.target} sent a {control.get('type')} frame that does not follow the "
                f"speech protocol ({where}: {problem['msg']})",
            ) from None
        match frame:
            case SynthesisStart(request_id=request_id):
                self._current = request_id
                _discard(self._unstarted, request_id)
                self._deliver(request_id, frame)
            case WordsFrame(request_id=request_id):
                self._deliver(request_id, frame)
            case SynthesisComplete(request_id=request_id):
                self._current = None
                self._answer(request_id)
                self._deliver(request_id, frame)
            case ErrorFrame(request_id=request_id):
                if request_id is None and self._unstarted:
                    request_id = self._unstarted[0]
                if request_id is not None:
                    _discard(self._unstarted, request_id)
                    self._answer(request_id)
                error = SpeechServerError(str(frame.code), frame.message, request_id)
                self._deliver(request_id, error)
            case Pong(request_id=ping_id):
                answered = self._pings.get(str(ping_id))
                if answered is not None and not answered.done():
                    answered.set_result(None)
            case None:
                logger.warning("ignoring an unknown control frame type %r", control.get("type"))

    def _answer(self, request_id: str) -> None:
        self._outstanding.discard(request_id)
        if not self._outstanding:
            self._answered.set()

    def _deliver(self, request_id: str | None, item: _Item) -> None:
        queue = self._queues.get(request_id) if request_id is not None else None
        if queue is not None:
            queue.put_nowait(item)


def _copy_of(failure: SpeechSessionError, request_id: str | None) -> SpeechStreamError:
    """The session's failure, told to one waiter, with its cause: what the transport saw
    (SageMaker's refusal of the stream, its error event), which a person needs to act on it."""
    copy = SpeechStreamError(failure.code, failure.message, request_id)
    copy.__cause__ = failure.__cause__
    return copy


def _json_object(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):  # not UTF-8, not JSON, a huge number, too deep
        return None
    return value if isinstance(value, dict) else None


def _discard(pending: deque[str], request_id: str) -> None:
    with contextlib.suppress(ValueError):
        pending.remove(request_id)


def open_speech_session(
    target: str,
    *,
    region: str | None = None,
    endpoint_uri: str | None = None,
    trusted_ca_file: Path | None = None,
    boto3_session: Any = None,
) -> SpeechSession:
    """A session (not yet open; use ``async with``) for a ``ws://`` URL or a SageMaker endpoint
    name (``sagemaker:NAME`` or a bare name). ``endpoint_uri`` and ``trusted_ca_file`` send the
    SageMaker client to the local SageMaker runtime instead of AWS; ``boto3_session`` (a
    ``boto3.Session``) gives its credentials (default: boto3's standard chain)."""
    if target.startswith(("ws://", "wss://")):
        from voicewire.speech_link.websocket_transport import WebSocketTransport

        return SpeechSession(WebSocketTransport(target))
    from voicewire.speech_link.sagemaker_transport import SageMakerTransport

    transport = SageMakerTransport(
        target.removeprefix("sagemaker:"),
        region=region,
        endpoint_uri=endpoint_uri,
        trusted_ca_file=trusted_ca_file,
        boto3_session=boto3_session,
    )
    return SpeechSession(transport)
