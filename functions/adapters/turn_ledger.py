"""The turns of a connection and the claims of their workers. Every state change is a
conditional write, so cancel, barge-in, disconnect, duplicate deliveries and retries of the
worker are race-free:

- a turn's status only moves forward (``starting`` -> ``running`` -> ``complete`` | ``cancelled``
  | ``failed``), and only once;
- a turn runs in at most one worker: the worker *claims* it (``claimed_by``), and keeps its claim
  alive with a heartbeat (``lease_until``); a second delivery of the same job finds the claim and
  is dropped; a retry after the claimant died finds the lease expired and only ends the turn.

Besides the turn items, the ledger keeps the turn fields of the connection item: the turn
counter, the active turn and the rate window (``functions.conversation.rate_window``'s rule).
Callers get ``TurnRecord``s, never the table's items.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, cast

from functions.adapters.session_table import (
    CONNECTION_SORT_KEY,
    PARTITION_KEY,
    SESSION_SECONDS,
    SORT_KEY,
    TTL_ATTRIBUTE,
    TURN_SORT_KEY_PREFIX,
)
from functions.adapters.table_items import (
    TableItems,
    from_item_value,
    optional_float,
    optional_str,
)
from functions.conversation.state import ConversationClosed, DuplicateTurn, StartedTurn
from functions.conversation.turn_transitions import TurnChange, from_condition
from voicewire.client_protocol import ENDED_STATUSES, EndedStatus, Timings, TurnStatus

# What a worker counts of a turn it ran (``functions.worker.run``'s relay counts), each kept in
# an attribute of its name: the only names ``TurnLedger.finish`` writes.
TURN_COUNTS = ("audio_bytes", "audio_frames", "frames", "bytes_sent")


@dataclass(frozen=True)
class TurnRecord:
    """A turn as its record says, at the moment it was read."""

    connection_id: str
    turn_id: str
    mode: str  # bidi | batch | speak
    status: TurnStatus
    accepted_at: float
    expires_at: int  # when DynamoDB's TTL removes it (epoch seconds)
    # Its number on the connection, from 1; None only for a turn refused as it started (its
    # connection was gone), which never got one.
    turn: int | None = None
    claimed_by: str | None = None  # the worker invocation that claimed it, if any did
    claimed_at: float | None = None
    lease_until: float | None = None  # the claim holds until then unless renewed
    heard_ms: float | None = None  # what the client said it heard, written with its cancel
    ended_at: float | None = None  # set when a worker (or the route) recorded its end
    error_code: str | None = None
    stop_reason: str | None = None
    timings: Timings | None = None
    audio_bytes: int = 0
    audio_frames: int = 0
    frames: int = 0
    bytes_sent: int = 0

    @property
    def end_recorded(self) -> bool:
        """A worker (or the route) recorded the turn's end: it told the client, or tried to. A
        turn that ended without one was ended by a cancel, a barge-in or a disconnect alone."""
        return self.ended_at is not None

    @classmethod
    def from_item(cls, connection_id: str, turn_id: str, item: dict[str, Any]) -> TurnRecord:
        timings = item.get("timings")
        return cls(
            connection_id=connection_id,
            turn_id=turn_id,
            mode=str(item.get("mode", "")),
            status=cast(TurnStatus, str(item["status"])),
            accepted_at=float(item.get("accepted_at", 0)),
            expires_at=int(item.get(TTL_ATTRIBUTE, 0)),
            turn=int(item["turn"]) if "turn" in item else None,
            claimed_by=optional_str(item.get("claimed_by")),
            claimed_at=optional_float(item.get("claimed_at")),
            lease_until=optional_float(item.get("lease_until")),
            heard_ms=optional_float(item.get("heard_ms")),
            ended_at=optional_float(item.get("ended_at")),
            error_code=optional_str(item.get("error_code")),
            stop_reason=optional_str(item.get("stop_reason")),
            timings=None if timings is None else Timings.model_validate(from_item_value(timings)),
            **{name: int(item.get(name, 0)) for name in TURN_COUNTS},
        )


class ClaimVerdict(StrEnum):
    """What a worker learns when it tries to claim its turn."""

    CLAIMED = "claimed"  # this worker's turn: to run if running, else to tell it ended
    ABANDONED = "abandoned"  # its worker died (lease expired, or a retry): end it, unspoken
    HELD = "held"  # another worker runs it now (a duplicate delivery): drop the job
    ENDED = "ended"  # the turn already ended (cancelled, failed, complete): drop the job
    UNKNOWN = "unknown"  # no such turn (expired by TTL, or never recorded): drop the job


@dataclass(frozen=True)
class Claim:
    verdict: ClaimVerdict
    status: TurnStatus | None = None  # the turn's status when the claim was tried
    claimed_by: str | None = None  # who held the turn before
    # A worker recorded the turn's end (``TurnRecord.end_recorded``): it told the client, or
    # tried to. A turn that ended without one was ended by a cancel, a barge-in or a disconnect.
    end_recorded: bool = False


class TurnLedger:
    def __init__(self, table: TableItems) -> None:
        self.table = table

    # --- starting a turn --------------------------------------------------------------------

    def admit(self, connection_id: str, limit: int, now: float | None = None) -> bool:
        """Count one more turn in the connection's current clock minute; False when ``limit``
        turns already started in it (or the connection is gone)."""
        return admit_in_window(self.table, connection_id, "rate", limit, now)

    def admit_listen(self, connection_id: str, limit: int, now: float | None = None) -> bool:
        """Count one more ``listen`` (a Transcribe URL minted) in the connection's current
        clock minute; False when ``limit`` were already minted in it."""
        return admit_in_window(self.table, connection_id, "listen", limit, now)

    def start(
        self, connection_id: str, turn_id: str, mode: str, now: float | None = None
    ) -> StartedTurn:
        """Record a new turn and make it the active one; returns it with the turn it replaces
        and the connection's audio delivery.

        Three conditional writes: the turn item, ``starting`` (a reused ``turn_id`` fails
        there: ``DuplicateTurn``); the connection's counter and active turn (the connection must
        be open, else ``ConversationClosed``); the turn ``running``, only if it is still
        ``starting``. A cancel, a barge-in or a disconnect handled between the writes cancels the
        starting turn, and the last write then leaves it cancelled: it comes back with status
        ``cancelled`` and no worker must run it. The replaced turn, if it was still running, is
        cancelled by the caller.
        """
        now = now or time.time()
        key = TURN_SORT_KEY_PREFIX + turn_id
        item = {
            PARTITION_KEY: connection_id,
            SORT_KEY: key,
            "mode": mode,
            "status": "starting",
            "accepted_at": now,
            TTL_ATTRIBUTE: int(now) + SESSION_SECONDS,
        }
        if not self.table.put(item, condition="attribute_not_exists(pk)"):
            raise DuplicateTurn(turn_id)
        old = self.table.update(
            connection_id,
            CONNECTION_SORT_KEY,
            "SET turn_counter = turn_counter + :one, active_turn_id = :turn",
            {":one": 1, ":turn": turn_id, ":open": "open"},
            "attribute_exists(pk) AND #status = :open",
            {"#status": "status"},
            "ALL_OLD",
        )
        if old is None:
            self._set_status(connection_id, turn_id, "failed", TurnChange.FAIL)
            raise ConversationClosed(connection_id)
        number = int(old.get("turn_counter", 0)) + 1
        may_run, from_values = from_condition(TurnChange.RUN)
        running = self.table.update(
            connection_id,
            key,
            "SET turn = :turn, #status = :running",
            {":turn": number, ":running": "running", **from_values},
            may_run,
            {"#status": "status"},
        )
        if running is None:  # cancelled between the writes: it stays cancelled, with its number
            self.table.update(connection_id, key, "SET turn = :turn", {":turn": number})
        status: TurnStatus = "running" if running is not None else "cancelled"
        audio = str(old.get("audio", "binary"))
        return StartedTurn(turn_id, number, status, old.get("active_turn_id"), audio)

    # --- reading turns ----------------------------------------------------------------------

    def get(self, connection_id: str, turn_id: str) -> TurnRecord | None:
        """The turn's record (strongly consistent); None for a turn never recorded, or expired."""
        item = self.table.get(connection_id, TURN_SORT_KEY_PREFIX + turn_id)
        return None if item is None else TurnRecord.from_item(connection_id, turn_id, item)

    def status(self, connection_id: str, turn_id: str) -> TurnStatus | None:
        record = self.get(connection_id, turn_id)
        return None if record is None else record.status

    def of_connection(self, connection_id: str) -> list[TurnRecord]:
        """Every turn recorded on the connection, in the order of their ids."""
        return [
            TurnRecord.from_item(
                connection_id, str(item[SORT_KEY]).removeprefix(TURN_SORT_KEY_PREFIX), item
            )
            for item in self.table.query_prefix(connection_id, TURN_SORT_KEY_PREFIX)
        ]

    # --- cancelling, claiming and ending ----------------------------------------------------

    def cancel(self, connection_id: str, turn_id: str, heard_ms: float | None = None) -> bool:
        """Cancel a turn that is still starting or running; False if it had already ended.
        ``heard_ms``: how much of its audio the client played, written with the cancel for the
        turn's worker, which keeps only that much in the history."""
        if heard_ms is None:
            return self._set_status(connection_id, turn_id, "cancelled", TurnChange.CANCEL)
        may_cancel, from_values = from_condition(TurnChange.CANCEL)
        cancelled = self.table.update(
            connection_id,
            TURN_SORT_KEY_PREFIX + turn_id,
            "SET #status = :status, heard_ms = :heard",
            {":status": "cancelled", ":heard": heard_ms, **from_values},
            may_cancel,
            {"#status": "status"},
        )
        return cancelled is not None

    def claim(
        self,
        connection_id: str,
        turn_id: str,
        claimant: str,
        lease_seconds: float,
        now: float | None = None,
    ) -> Claim:
        """Make ``claimant`` (a worker invocation) the one worker of this turn.

        The first claim wins whatever the turn's status: a turn cancelled before any worker
        took it is ``CLAIMED`` with its status, and its worker only tells the client it ended.
        """
        now = now or time.time()
        claimed = self.table.update(
            connection_id,
            TURN_SORT_KEY_PREFIX + turn_id,
            "SET claimed_by = :me, lease_until = :until, claimed_at = :now",
            {":me": claimant, ":until": now + lease_seconds, ":now": now},
            "attribute_exists(pk) AND attribute_not_exists(claimed_by)",
            returns="ALL_NEW",
        )
        if claimed is not None:
            return Claim(ClaimVerdict.CLAIMED, cast(TurnStatus, str(claimed.get("status"))))
        record = self.get(connection_id, turn_id)
        if record is None:
            return Claim(ClaimVerdict.UNKNOWN)
        status, holder = record.status, record.claimed_by
        if status != "running":
            return Claim(ClaimVerdict.ENDED, status, holder, record.end_recorded)
        if holder == claimant:
            # Lambda retries an event under the same request id, and only once the attempt
            # before has ended: this claimant's earlier attempt died with the turn running.
            return Claim(ClaimVerdict.ABANDONED, status, holder)
        if (record.lease_until or 0.0) >= now:
            return Claim(ClaimVerdict.HELD, status, holder)
        return Claim(ClaimVerdict.ABANDONED, status, holder)

    def renew_claim(
        self, connection_id: str, turn_id: str, claimant: str, lease_seconds: float
    ) -> bool:
        """Extend the claim's lease; False if the turn is no longer running or no longer ours."""
        renewed = self.table.update(
            connection_id,
            TURN_SORT_KEY_PREFIX + turn_id,
            "SET lease_until = :until",
            {":until": time.time() + lease_seconds, ":me": claimant, ":running": "running"},
            "#status = :running AND claimed_by = :me",
            {"#status": "status"},
        )
        return renewed is not None

    def finish(
        self,
        connection_id: str,
        turn_id: str,
        status: EndedStatus,
        timings: Timings,
        counts: dict[str, int],
        stop_reason: str | None = None,
        claimant: str | None = None,
        error_code: str | None = None,
    ) -> EndedStatus:
        """Record how the turn ended. A turn that ended meanwhile (cancelled) keeps its status,
        which is returned, but its figures are still recorded. With ``claimant``, only the
        worker holding the turn's claim can end it. ``counts``: some of ``TURN_COUNTS``."""
        unknown = set(counts) - set(TURN_COUNTS)
        if unknown:  # each name becomes an attribute, and a TurnRecord field
            raise ValueError(f"not a turn count: {sorted(unknown)}")
        may_finish, from_values = from_condition(TurnChange.FINISH)
        values: dict[str, Any] = {
            ":status": status,
            **from_values,
            ":timings": timings.model_dump(),
            ":ended_at": time.time(),
            **{f":{key}": value for key, value in counts.items()},
        }
        sets = ["timings = :timings", "ended_at = :ended_at"]
        sets += [f"{key} = :{key}" for key in counts]
        for name, value in (("stop_reason", stop_reason), ("error_code", error_code)):
            if value:
                values[f":{name}"] = value
                sets.append(f"{name} = :{name}")
        condition = may_finish
        if claimant is not None:
            values[":me"] = claimant
            condition += " AND claimed_by = :me"
        key = TURN_SORT_KEY_PREFIX + turn_id
        names = {"#status": "status"}
        ended = self.table.update(
            connection_id,
            key,
            "SET #status = :status, " + ", ".join(sets),
            values,
            condition,
            names,
        )
        final: EndedStatus = status
        if ended is None:
            del values[":status"]
            for name in from_values:
                del values[name]
            mine = "claimed_by = :me" if claimant is not None else None
            after = self.table.update(
                connection_id, key, "SET " + ", ".join(sets), values, mine, None, "ALL_NEW"
            )
            current = after.get("status") if after else self.status(connection_id, turn_id)
            final = cast(EndedStatus, current) if current in ENDED_STATUSES else "cancelled"
        self._clear_active(connection_id, turn_id)
        return final

    def fail(self, connection_id: str, turn_id: str, error_code: str) -> bool:
        """End a turn that never reached a worker (or whose worker died) as ``failed``; False if
        it had already ended. Clears it as the connection's active turn."""
        may_fail, from_values = from_condition(TurnChange.FAIL)
        failed = self.table.update(
            connection_id,
            TURN_SORT_KEY_PREFIX + turn_id,
            "SET #status = :failed, error_code = :code, ended_at = :now",
            {":failed": "failed", ":code": error_code, ":now": time.time(), **from_values},
            may_fail,
            {"#status": "status"},
        )
        self._clear_active(connection_id, turn_id)
        return failed is not None

    def _clear_active(self, connection_id: str, turn_id: str) -> None:
        self.table.update(
            connection_id,
            CONNECTION_SORT_KEY,
            "REMOVE active_turn_id",
            {":turn": turn_id},
            "active_turn_id = :turn",
        )

    def _set_status(
        self, connection_id: str, turn_id: str, status: str, change: TurnChange
    ) -> bool:
        allowed, from_values = from_condition(change)
        return (
            self.table.update(
                connection_id,
                TURN_SORT_KEY_PREFIX + turn_id,
                "SET #status = :status",
                {":status": status, **from_values},
                allowed,
                {"#status": "status"},
            )
            is not None
        )


def admit_in_window(
    table: TableItems, connection_id: str, name: str, limit: int, now: float | None = None
) -> bool:
    """One more in the connection item's ``{name}_window``/``{name}_count`` for the current
    clock minute (``functions.conversation.rate_window``'s rule); False at ``limit`` or when the
    connection is gone.

    A fixed window: two conditional writes, no read, so concurrent messages cannot both take
    the last place. A burst across a minute's edge may count up to twice ``limit``."""
    window = int((now or time.time()) // 60)
    names = {"#window": f"{name}_window", "#count": f"{name}_count"}
    for _ in range(2):  # a concurrent writer may open the new window between the writes
        if (
            table.update(
                connection_id,
                CONNECTION_SORT_KEY,
                "SET #count = #count + :one",
                {":one": 1, ":window": window, ":limit": limit},
                "#window = :window AND #count < :limit",
                names,
            )
            is not None
        ):
            return True
        if (
            table.update(
                connection_id,
                CONNECTION_SORT_KEY,
                "SET #window = :window, #count = :one",
                {":one": 1, ":window": window},
                "attribute_exists(pk) AND (attribute_not_exists(#window) OR #window <> :window)",
                names,
            )
            is not None
        ):
            return True
    return False
