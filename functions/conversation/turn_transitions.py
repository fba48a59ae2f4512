"""How a turn's status may change, once: the table both conversation states obey.

A turn is ``starting`` while its message route records it (the WebSocket API's three writes; an
AgentCore session starts it ``running`` at once), ``running`` while a worker or a task speaks
it, then ended (``EndedStatus``: ``complete``, ``cancelled`` or ``failed``) for good. Each change
below names the statuses it may come from: ``MemoryConversation`` checks them in memory, and the
turn ledger (``functions.adapters.turn_ledger``) writes them as the condition of its DynamoDB
update (``from_condition``), so that a cancel racing a turn's end is decided the same way in both.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from voicewire.client_protocol import TurnStatus


class TurnChange(StrEnum):
    RUN = "run"  # its record written: a worker or a task may speak it
    CANCEL = "cancel"  # a cancel, a barge-in, a disconnect
    FINISH = "finish"  # its worker or task ended it (complete, cancelled or failed)
    FAIL = "fail"  # nothing could run it, or its worker died


# The statuses each change may come from; an ended turn changes no more.
CHANGES_FROM: dict[TurnChange, tuple[TurnStatus, ...]] = {
    TurnChange.RUN: ("starting",),
    TurnChange.CANCEL: ("starting", "running"),
    TurnChange.FINISH: ("running",),
    TurnChange.FAIL: ("starting", "running"),
}


def may(change: TurnChange, status: TurnStatus) -> bool:
    """Whether a turn in ``status`` may undergo ``change``."""
    return status in CHANGES_FROM[change]


def from_condition(change: TurnChange) -> tuple[str, dict[str, Any]]:
    """``change``'s table row as a DynamoDB condition on ``#status``, with its values."""
    values = {f":from_{status}": status for status in CHANGES_FROM[change]}
    return f"#status IN ({', '.join(values)})", values
