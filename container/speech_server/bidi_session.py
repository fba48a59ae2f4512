"""``WS /invocations-bidirectional-stream``: one persistent session, many messages.

Two tasks share a session. The *reader* receives every frame as soon as it arrives, so a
``cancel`` acts at once even while audio is flowing, and queues everything that needs an answer.
The *answerer* takes that queue in order: for a text, ``synthesis_start``, the PCM frames, then
``synthesis_complete``; for bad input, an ``error`` frame; for a ``ping`` message, a ``pong``;
for ``close``, close code 1000 once every earlier message is answered. Only the answerer sends,
so frames never interleave.

SageMaker hands the container each request part as a text frame (``DataType`` UTF8) or a binary
frame (BINARY, its default), so frames are read with ``receive()`` and bytes decoded as UTF-8;
``receive_text()`` would fail on binary parts (the seed's first lesson). WebSocket pings are
answered by the WebSocket protocol layer (uvicorn).

While the server drains (``speech_server.drain``), a session keeps answering, new messages
included, until it has had nothing in flight for the drain's idle grace; then the answerer closes
it with 1001. At the drain's deadline it is cut: whatever is in flight stops, and it closes
with 1001.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from dataclasses import dataclass, field
from typing import Literal

from starlette.websockets import WebSocket, WebSocketDisconnect

from speech_server.drain import GOING_AWAY, GOING_AWAY_REASON, Drain, Ending
from speech_server.engine_share import EngineBusy
from speech_server.synthesis import AudioPiece, Synthesizer, WordsAhead
from voicewire.speech_protocol import (
    MAX_PENDING_REQUESTS,
    CancelMessage,
    CloseMessage,
    CompletionStatus,
    ErrorCode,
    ErrorFrame,
    PingMessage,
    Pong,
    ProtocolError,
    SynthesisRequest,
    SynthesisStart,
    TimedWord,
    WordsFrame,
    dump_frame,
    parse_client_message,
)

logger = logging.getLogger(__name__)

_session_numbers = itertools.count(1)


@dataclass
class PendingRequest:
    request_id: str
    request: SynthesisRequest
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)


class DrainStarted:
    """Wakes an idle answerer when the drain begins, so it waits only the idle grace."""


Answer = PendingRequest | ErrorFrame | Pong | CloseMessage | DrainStarted


# A session with no message for this long is closed (1000). The worker keeps a finished session
# for its next turn up to 55 s (functions/settings.py), so none it would use is closed; one held
# by a Lambda environment that is frozen or gone is, so the open-sessions figure the endpoint
# scales on (speech_server.load_metrics) counts conversations, not leftovers.
IDLE_SESSION_SECONDS = 60.0


class BidiSession:
    def __init__(
        self,
        websocket: WebSocket,
        synthesizer: Synthesizer,
        idle_seconds: float = IDLE_SESSION_SECONDS,
    ) -> None:
        self.websocket = websocket
        self.synthesizer = synthesizer
        self.idle_seconds = idle_seconds
        self.engine = synthesizer.engine
        self.number = next(_session_numbers)
        self._answers: asyncio.Queue[Answer] = asyncio.Queue()
        self._pending: dict[str, PendingRequest] = {}
        self._request_numbers = itertools.count(1)
        self.drain = Drain.of(websocket.app)
        # The listener's queue across this session's requests: a pipeline's next sentence is made
        # in time for the end of the one before (speech_server.chunk_schedule).
        self.clock = synthesizer.playback_clock()
        self.ending: Ending | None = None  # decided by the drain's idle close or cut
        self._cut = asyncio.Event()

    async def run(self) -> None:
        await self.websocket.accept()
        logger.info("session %d opened", self.number)
        if self.drain is not None:
            self.drain.opened(self)
        reader = asyncio.create_task(self._read())
        answerer = asyncio.create_task(self._answer())
        cut = asyncio.create_task(self._cut.wait())
        try:
            await asyncio.wait({reader, answerer, cut}, return_when=asyncio.FIRST_COMPLETED)
            if reader.done() and not reader.cancelled() and reader.result() == "close":
                # A close is answered after every message before it: let the answerer finish.
                await asyncio.wait({answerer, cut}, return_when=asyncio.FIRST_COMPLETED)
            if cut.done() and not answerer.done():
                answerer.cancel()  # it stops between frames: a send is whole or not begun
                await asyncio.wait({answerer})
                with contextlib.suppress(WebSocketDisconnect):
                    await self.websocket.close(code=GOING_AWAY, reason=GOING_AWAY_REASON)
        finally:
            for pending in self._pending.values():
                pending.cancelled.set()
            # Its listener is gone: what it had queued plays for no one, so the engine share
            # stops counting this session at once, not when the clock is collected.
            self.clock.stop()
            for task in (reader, answerer, cut):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, WebSocketDisconnect):
                    await task
            if self.drain is not None:
                self.drain.ended(self, self.ending or "client")
            logger.info("session %d ended", self.number)

    # --- drain (speech_server.drain) -------------------------------------------------------

    def drain_started(self) -> None:
        self._answers.put_nowait(DrainStarted())

    def cut(self) -> None:
        self.ending = self.ending or "cut"
        self._cut.set()

    # --- reader ----------------------------------------------------------------------------

    async def _read(self) -> Literal["close", "disconnect"]:
        while True:
            frame = await self.websocket.receive()
            if frame["type"] == "websocket.disconnect":
                return "disconnect"
            raw = frame.get("text")
            if raw is None:
                raw = frame.get("bytes") or b""
            try:
                message = parse_client_message(raw, self.engine.voices)
            except ProtocolError as error:
                logger.info("session %d: %s: %s", self.number, error.code, error.message)
                self._answers.put_nowait(ErrorFrame.of(error))
                continue
            match message:
                case SynthesisRequest():
                    self._accept(message)
                case CancelMessage():
                    self._cancel(message)
                case PingMessage():
                    self._answers.put_nowait(Pong(request_id=message.request_id))
                case CloseMessage():
                    self._answers.put_nowait(message)
                    return "close"  # nothing after a close is read

    def _accept(self, request: SynthesisRequest) -> None:
        request_id = request.request_id or f"s{self.number}-r{next(self._request_numbers)}"
        if request_id in self._pending:
            self._answers.put_nowait(
                ErrorFrame(
                    code=ErrorCode.DUPLICATE_REQUEST_ID,
                    message=f"request_id {request_id!r} is already queued or running",
                    request_id=request_id,
                )
            )
            return
        if len(self._pending) >= MAX_PENDING_REQUESTS:
            self._answers.put_nowait(
                ErrorFrame(
                    code=ErrorCode.TOO_MANY_PENDING,
                    message=f"{MAX_PENDING_REQUESTS} requests are already queued or running; "
                    "wait for a synthesis_complete before sending more",
                    request_id=request.request_id,
                )
            )
            return
        pending = PendingRequest(request_id, request)
        self._pending[request_id] = pending
        self._answers.put_nowait(pending)

    def _cancel(self, message: CancelMessage) -> None:
        if message.request_id is None:
            for pending in self._pending.values():
                pending.cancelled.set()
            return
        pending = self._pending.get(message.request_id)
        if pending is None:
            self._answers.put_nowait(
                ErrorFrame(
                    code=ErrorCode.UNKNOWN_REQUEST_ID,
                    message=f"no queued or running request has request_id {message.request_id!r}",
                    request_id=message.request_id,
                )
            )
            return
        pending.cancelled.set()

    # --- answerer --------------------------------------------------------------------------

    async def _answer(self) -> None:
        while True:
            answer = await self._next_answer()
            match answer:
                case None if self.drain is not None and self.drain.draining:
                    self.ending = "idle"
                    await self.websocket.close(code=GOING_AWAY, reason=GOING_AWAY_REASON)
                    return
                case None:
                    logger.info("session %d idle for %g s: closed", self.number, self.idle_seconds)
                    await self.websocket.close(
                        code=1000, reason=f"idle for {self.idle_seconds:g} s"
                    )
                    return
                case DrainStarted():
                    continue
                case ErrorFrame() | Pong():
                    await self.websocket.send_text(dump_frame(answer))
                case CloseMessage():
                    await self.websocket.close(code=1000)
                    return
                case PendingRequest():
                    try:
                        await self._synthesize(answer)
                    finally:
                        self._pending.pop(answer.request_id, None)

    async def _next_answer(self) -> Answer | None:
        """The next thing to answer; ``None`` when nothing came for as long as a session may
        sit idle: the drain's idle grace while the server drains, else ``idle_seconds`` (the
        session has nothing in flight: the answerer is the one waiting)."""
        draining = self.drain is not None and self.drain.draining
        idle = self.drain.idle_grace if draining else self.idle_seconds  # type: ignore[union-attr]
        try:
            return await asyncio.wait_for(self._answers.get(), idle)
        except TimeoutError:
            return None

    async def _synthesize(self, pending: PendingRequest) -> None:
        request = pending.request
        stats = self.synthesizer.new_stats()
        await self.websocket.send_text(dump_frame(SynthesisStart(request_id=pending.request_id)))
        status: CompletionStatus = "complete"
        frames = self.synthesizer.pcm_frames(
            request.text,
            request.voice or self.engine.default_voice,
            request.speed,
            fast_start=request.fast_start,
            starts_answer=request.starts_answer,
            cancelled=pending.cancelled,
            stats=stats,
            clock=self.clock,
            word_timings=request.word_timings,
        )
        try:
            while True:
                # Only the engine's failures are caught here; a failed send (the client left)
                # propagates and ends the session.
                try:
                    frame = await anext(frames)
                except StopAsyncIteration:
                    break
                except EngineBusy as busy:  # a new answer, refused before any of it was made
                    logger.info("session %d: %s refused: %s", self.number, pending.request_id, busy)
                    status = "failed"
                    await self.websocket.send_text(
                        dump_frame(
                            ErrorFrame(
                                code=ErrorCode.SPEECH_BUSY,
                                message=str(busy),
                                request_id=pending.request_id,
                            )
                        )
                    )
                    break
                except Exception:
                    # The detail goes to the log, never to the client: it would leak internals
                    # and read like a protocol error (the seed's KeyError('text') lesson).
                    logger.exception(
                        "session %d: synthesis of %s failed", self.number, pending.request_id
                    )
                    status = "failed"
                    await self.websocket.send_text(
                        dump_frame(
                            ErrorFrame(
                                code=ErrorCode.SYNTHESIS_FAILED,
                                message="the speech engine failed on this text; "
                                "the session is still open",
                                request_id=pending.request_id,
                            )
                        )
                    )
                    break
                match frame:
                    case WordsAhead(words=ahead):  # the words of the audio that follows
                        words = [TimedWord(text=w.text, start=w.start, end=w.end) for w in ahead]
                        message = WordsFrame(request_id=pending.request_id, words=words)
                        await self.websocket.send_text(dump_frame(message))
                    case AudioPiece(pcm=pcm):
                        await self.websocket.send_bytes(pcm)
        finally:
            await frames.aclose()
        if pending.cancelled.is_set() and status == "complete":
            status = "cancelled"
        complete = stats.complete_frame(pending.request_id, self.engine.sample_rate, status)
        await self.websocket.send_text(dump_frame(complete))
