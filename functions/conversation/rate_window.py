"""How many turns a conversation may start: at most ``limit`` in each clock minute.

A fixed window (the clock minute a turn starts in), not a sliding one: DynamoDB can keep it with
two conditional writes and no read, so concurrent messages cannot both take the last place
(``functions.adapters.turn_ledger``'s ``TurnLedger.admit`` writes exactly this rule); the AgentCore
app keeps it in memory with ``admitted``. A burst across a minute's edge may start up to twice
``limit``: a limit against runaway clients, not a billing meter.
"""

from __future__ import annotations

from dataclasses import dataclass

WINDOW_SECONDS = 60


@dataclass(frozen=True)
class RateWindow:
    window: int  # the clock minute: int(epoch seconds // 60)
    count: int  # turns started in it


def window_of(now: float) -> int:
    return int(now // WINDOW_SECONDS)


def admitted(current: RateWindow | None, now: float, limit: int) -> RateWindow | None:
    """The window after one more turn at ``now``; None when ``limit`` turns already started in
    this minute (the turn is refused and nothing changes)."""
    window = window_of(now)
    if current is None or current.window != window:
        return RateWindow(window, 1)
    if current.count < limit:
        return RateWindow(window, current.count + 1)
    return None
