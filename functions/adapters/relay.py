"""The frames of one turn to one WebSocket client, over a ``FrameSink``
(``functions.adapters.frame_sink``: API Gateway's ``@connections`` API, or on AgentCore a
WebSocket or a server-sent event stream).

JSON control frames go as text; audio goes as binary frames of at most 32 KB (API Gateway's frame
limit) with the 9-byte header of ``voicewire.client_protocol``, or as base64 JSON text frames for
connections opened with ``?audio=base64``.

Two lanes, each sending one frame at a time, so that audio never waits behind text:

- the *ordered lane* (``control()`` and ``audio()``: turn_start, sentence, audio, error,
  turn_end): frames are sent in call order, one after the other, so they arrive in order.
- the *text lane* (``text()``; ``functions.adapters.text_lane``): text deltas are buffered and
  coalesced, then posted as one ``text_delta`` at most every ``text_interval`` (or, with
  ``text_flush="sentence"``, at each ``flush_text()``), concurrently with the ordered lane.
  ``finish_text()`` posts what is left and waits for the lane: the turn calls it before its
  ``turn_end``, so ``turn_end`` still arrives after everything.

Failures are the sink's: ``ClientGone`` (the client left: the turn stops; the caller marks the
connection gone) and ``RelayError`` (a frame failed for good, with a stable ``code``). A failure
of the text lane surfaces at the next ``text()`` call and at ``finish_text()``. Every sent byte is
counted, for the turn record.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from pydantic import BaseModel

from functions.adapters.frame_sink import FrameSink
from functions.adapters.text_lane import TextFlush, TextLane
from voicewire.client_protocol import (
    MAX_AUDIO_PAYLOAD,
    MAX_BASE64_AUDIO_PAYLOAD,
    AudioDelivery,
    TextDelta,
    dump_control,
    encode_audio_frame,
    encode_base64_audio,
    split_audio,
)

__all__ = ["Relay", "TextFlush"]


@dataclass
class Relay:
    """The frames of one turn to one client. Its coroutines are called from one asyncio loop,
    so the counters need no lock."""

    sink: FrameSink
    turn: int
    delivery: AudioDelivery = "binary"
    text_interval: float = 0.1  # at most one text post per interval (interval mode)
    text_flush: TextFlush = "interval"
    frames: int = 0
    bytes_sent: int = 0
    audio_frames: int = 0
    audio_bytes: int = 0
    text_posts: int = 0
    first_audio_posted_at: float | None = None  # time.monotonic() when the first audio send ended
    # The ordered lane's last send. Each send runs as a task that waits for the one before it,
    # and its caller awaits it shielded: a send whose caller is cancelled still completes (a
    # frame cannot be taken back half-sent), and the next frame of the lane must not overtake it.
    _ordered_tail: asyncio.Future[None] | None = field(default=None, init=False, repr=False)
    _text_lane: TextLane = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._text_lane = TextLane(
            self._send_text, self.text_interval, self.text_flush, name=f"relay-text-{self.turn}"
        )

    @property
    def text_deltas(self) -> int:
        """Text deltas given to ``text()`` (before coalescing)."""
        return self._text_lane.deltas

    # --- the ordered lane ---------------------------------------------------------------------

    async def control(self, frame: BaseModel) -> None:
        """Send a control frame on the ordered lane (after every frame sent before it)."""
        data = dump_control(frame)
        await self._in_order(lambda: self._send(data.decode(), len(data)))

    async def audio(self, pcm: bytes) -> None:
        """Send PCM as one or more audio frames (split at 32 KB, never inside a sample)."""
        limit = MAX_AUDIO_PAYLOAD if self.delivery == "binary" else MAX_BASE64_AUDIO_PAYLOAD
        for payload in split_audio(pcm, limit):
            await self._in_order(lambda payload=payload: self._send_audio_frame(payload))

    async def _in_order(self, send: Callable[[], Awaitable[None]]) -> None:
        previous = self._ordered_tail

        async def after_previous() -> None:
            if previous is not None:
                await asyncio.wait({previous})  # its failure was its own caller's to see
            await send()

        self._ordered_tail = tail = asyncio.ensure_future(after_previous())
        # A caller cancelled while its frame was on the lane (the turn stopping, the process
        # shutting down) no longer awaits it: its failure (the client gone) is then nobody's to
        # see, and must not surface as "Task exception was never retrieved".
        tail.add_done_callback(_seen)
        await asyncio.shield(tail)

    async def _send_audio_frame(self, payload: bytes) -> None:
        # The sequence number is taken when the frame's turn on the lane comes, and counted once
        # it is sent: a send whose caller was cancelled still completes, and the next frame must
        # not reuse its number.
        if self.delivery == "binary":
            data = encode_audio_frame(self.turn, self.audio_frames, payload)
            await self._send(data, len(data))  # a binary frame
        else:
            data = encode_base64_audio(self.turn, self.audio_frames, payload)
            await self._send(data.decode(), len(data))  # JSON: a text frame
        self.audio_frames += 1
        self.audio_bytes += len(payload)
        if self.first_audio_posted_at is None:
            self.first_audio_posted_at = time.monotonic()

    # --- the text lane ------------------------------------------------------------------------

    async def text(self, turn_id: str, text: str) -> None:
        """Buffer a text delta for the text lane; it is posted, joined with its neighbours, at
        the next text post (re-raises the lane's failure, if a text post failed)."""
        self._text_lane.add(turn_id, text)

    def flush_text(self) -> None:
        """Post what is buffered now, without waiting for the interval (``sentence`` mode: the
        only moments text is posted, with ``finish_text()``). Returns at once."""
        self._text_lane.flush()

    async def finish_text(self) -> None:
        """Post what is buffered and wait until the text lane is idle (and stopped); re-raise
        its failure (``ClientGone``, ``RelayError``) if a text post failed."""
        await self._text_lane.finish()

    def discard_text(self) -> None:
        """Drop the buffered text, and any text given later: a cancelled turn posts nothing more
        (a text post already in flight completes)."""
        self._text_lane.discard()

    async def close(self) -> None:
        """Stop the text lane without posting what is buffered; return once no text post is in
        flight."""
        await self._text_lane.close()

    async def _send_text(self, frame: TextDelta) -> None:
        data = dump_control(frame)
        await self._send(data.decode(), len(data))
        self.text_posts += 1

    # --- sending ------------------------------------------------------------------------------

    async def _send(self, frame: bytes | str, size: int) -> None:
        """Send one frame and count it (``size``: its bytes on the wire), once it is sent."""
        await self.sink.send(frame)
        self.frames += 1
        self.bytes_sent += size


def _seen(task: asyncio.Future[None]) -> None:
    """Mark a lane send's failure as retrieved (its caller, if still waiting, gets it too)."""
    if not task.cancelled():
        task.exception()
