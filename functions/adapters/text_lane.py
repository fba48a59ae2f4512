"""The relay's text lane: a turn's text deltas, coalesced, posted by a task of their own.

Text deltas come fast (a token at a time) and matter less than audio, so they are buffered and
joined, then posted as one ``text_delta`` at most every ``interval`` (or, with
``flush="sentence"``, at each ``flush()``), concurrently with the relay's ordered lane: a slow
text post never holds up an audio frame. Text deltas arrive in order among themselves (``seq``
0, 1, 2, ...) but may arrive before or after the sentence and audio frames posted around them.
``finish()`` posts what is left and waits for the lane: the turn calls it before its
``turn_end``, so ``turn_end`` still arrives after everything.

A failure of a text post surfaces at the next ``add()`` call and at ``finish()``.

Every method is called from one asyncio loop (the relay's).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Literal

from voicewire.client_protocol import TextDelta

TextFlush = Literal["interval", "sentence"]


class TextLane:
    """Coalesced text deltas of one turn, handed one post at a time to ``post`` (which sends
    the frame; its exception is the lane's failure)."""

    def __init__(
        self,
        post: Callable[[TextDelta], Awaitable[None]],
        interval: float = 0.1,
        flush: TextFlush = "interval",
        name: str = "relay-text",
    ) -> None:
        if flush not in ("interval", "sentence"):
            raise ValueError(f"text_flush must be 'interval' or 'sentence', not {flush!r}")
        self._post = post
        self._interval = interval  # at most one post per interval (interval mode)
        self._flush = flush
        self._name = name
        self.deltas = 0  # text deltas given (and not discarded)
        self._turn_id: str | None = None
        # Text buffered, not yet handed to a post; how many of its leading chars flush() made due.
        self._pending = ""
        self._flush_chars = 0
        self._finishing = False
        self._discarded = False
        self._seq = 0
        self._next_post_at = 0.0  # monotonic; 0: at once
        self._failure: Exception | None = None
        self._wakeup: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        # The post being sent. The lane awaits it shielded: cancelling the lane (close) must
        # not cut a frame off mid-send, and close waits for it instead.
        self._in_flight: asyncio.Future[None] | None = None

    @property
    def posting(self) -> bool:
        """Whether a text post is in flight."""
        return self._in_flight is not None and not self._in_flight.done()

    def add(self, turn_id: str, text: str) -> None:
        """Buffer a text delta; it is posted, joined with its neighbours, at the next text post
        (re-raises the lane's failure, if a text post failed)."""
        self.raise_failure()
        if self._discarded:
            return  # a cancelled turn posts nothing more
        if self._turn_id is None:
            self._turn_id = turn_id
        elif turn_id != self._turn_id:
            raise ValueError(f"a relay carries one turn ({self._turn_id}), not {turn_id}")
        self.deltas += 1
        self._pending += text
        self._wake()

    def flush(self) -> None:
        """Post what is buffered now, without waiting for the interval (``sentence`` mode: the
        only moments text is posted, with ``finish()``). Returns at once."""
        self.raise_failure()
        if self._pending:
            self._flush_chars = len(self._pending)
            self._wake()

    async def finish(self) -> None:
        """Post what is buffered and wait until the lane is idle (and stopped); re-raise its
        failure if a text post failed."""
        task = self._task
        if task is not None and not task.done():
            assert self._wakeup is not None
            self._finishing = True
            self._wakeup.set()
            # Waits without cancelling the lane if our caller is cancelled: the last text post
            # then still completes, and the lane stops by itself.
            await asyncio.wait({task})
        self.raise_failure()

    def discard(self) -> None:
        """Drop the buffered text, and any text given later: a cancelled turn posts nothing more
        (a text post already in flight completes)."""
        self._discarded = True
        self._pending = ""
        self._flush_chars = 0

    async def close(self) -> None:
        """Stop the lane without posting what is buffered; return once no text post is in
        flight, so that nothing is left half-sent (a Lambda frozen after its handler returns
        would land it, or not, at the next thaw)."""
        self.discard()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._in_flight is not None and not self._in_flight.done():
            await asyncio.wait({self._in_flight})

    def raise_failure(self) -> None:
        if self._failure is not None:
            raise self._failure

    def _wake(self) -> None:
        if self._wakeup is None:
            self._wakeup = asyncio.Event()
        self._wakeup.set()
        if self._task is None or self._task.done():
            self._finishing = False
            self._task = asyncio.create_task(self._run(), name=self._name)

    async def _run(self) -> None:
        """Post coalesced text deltas, one at a time, until finishing with nothing left."""
        try:
            while (text := await self._next_post()) is not None:
                assert self._turn_id is not None
                frame = TextDelta(turn_id=self._turn_id, seq=self._seq, text=text)
                self._seq += 1
                self._next_post_at = time.monotonic() + self._interval
                self._in_flight = asyncio.ensure_future(self._post(frame))
                await asyncio.shield(self._in_flight)
        except Exception as failure:  # kept for add() and finish() to raise
            self._failure = failure

    async def _next_post(self) -> str | None:
        """Wait until buffered text is due; take it. ``None``: finishing, nothing left."""
        assert self._wakeup is not None
        while True:
            self._wakeup.clear()  # anything that changes the state below sets it again
            pending = self._pending
            if not pending and self._finishing:
                return None
            take = 0
            timeout: float | None = None  # wait for a wake-up only
            if pending and (self._finishing or self._flush == "interval"):
                take = len(pending)
                if not self._finishing and not self._flush_chars:
                    timeout = self._next_post_at - time.monotonic()
                    take = take if timeout <= 0 else 0
            elif pending and self._flush_chars:
                take = self._flush_chars  # sentence mode: up to the flush
            if take:
                self._pending = pending[take:]
                self._flush_chars = max(0, self._flush_chars - take)
                return pending[:take]
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), timeout)
