"""What an answer has said in its current round of tool calls, and when a slow tool's silence
gets a short filler ("One moment.", in the voice's language: ``functions.turn.filler_phrases``).

The rule, once per round: a tool still running ``delay`` seconds after it started gets the
filler at once if nothing was spoken in its round (no preamble); after a preamble, once the
preamble has played out and ``QUIET_BEFORE_FILLER`` of silence has passed. A round ends when its
last running call ends: the answer to the results starts a new one.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

# How long a pause after the preamble's audio may last while a tool still runs before the filler
# fills it: a breath between sentences is ~0.25-0.5 s; longer reads as a dead line.
QUIET_BEFORE_FILLER = 0.5


@dataclass
class ToolRound:
    """What an answer has spoken: sentences in all (their index), sentences since its last round
    of tool calls ended (none: the listener is waiting), and the calls still running."""

    index: int = 0
    in_round: int = 0
    running: set[str] = field(default_factory=set)
    filled: bool = False  # this round's filler was spoken
    round: int = 0  # the answer's rounds: one model message each (its tool calls end a round)

    def spoke(self) -> None:
        """A sentence was sent to the speech server."""
        self.index += 1
        self.in_round += 1

    def tool_started(self, tool_use_id: str) -> None:
        self.running.add(tool_use_id)

    def tool_ended(self, tool_use_id: str) -> None:
        self.running.discard(tool_use_id)
        if not self.running:
            self.in_round = 0  # the answer to the results starts a new round
            self.filled = False
            self.round += 1


@dataclass
class ToolFillers:
    """Schedules the round's filler over ``said``. ``say_filler`` speaks it; ``heard_until``
    is when the audio posted so far will have played out (monotonic seconds)."""

    said: ToolRound
    say_filler: Callable[[], Awaitable[None]]
    heard_until: Callable[[], float]
    delay: float | None  # None or 0: no fillers
    _after_preamble: asyncio.Task[None] | None = None

    def tool_started(self) -> None:
        """A call started: after a preamble, the filler waits for the preamble's end."""
        if self.delay and self.said.in_round and self._after_preamble is None:
            self._after_preamble = asyncio.create_task(self._fill_after_preamble(self.delay))

    def tool_ended(self) -> None:
        """A call ended: the round's last one calls off a filler still waiting."""
        if not self.said.running:
            self.close()

    async def still_running(self) -> None:
        """The agent says its tools are still running ``delay`` in: with nothing spoken in the
        round, the filler now."""
        if self.said.in_round == 0 and not self.said.filled:
            await self._fill()

    def close(self) -> None:
        if self._after_preamble is not None:
            self._after_preamble.cancel()
            self._after_preamble = None

    async def _fill(self) -> None:
        self.said.filled = True
        await self.say_filler()

    async def _fill_after_preamble(self, delay: float) -> None:
        # The preamble was short and the tool is slow: once the preamble has played out (and at
        # least ``delay`` into the call), the silence gets the filler too.
        await asyncio.sleep(delay)

        def quiet_in() -> float:
            return self.heard_until() + QUIET_BEFORE_FILLER - time.monotonic()

        # A deadline that moves as the preamble's audio is posted: no event marks it.
        while (left := quiet_in()) > 0:  # noqa: ASYNC110
            await asyncio.sleep(left)
        if self.said.running and not self.said.filled:
            await self._fill()
