"""One connection's conversation in the session table: the ``ConversationState`` the rules
(``functions.conversation.rules``) use on the WebSocket API's path, shared by the message route
and the worker. The rules decide; this module only reads and writes, each step atomic: the turns
through the ledger (``turn_ledger``), the history here, appended with optimistic locking
(``history_version``) so two writers never lose each other's entries.
"""

from __future__ import annotations

from functions.adapters.connections import Connections
from functions.adapters.session_table import CONNECTION_SORT_KEY
from functions.adapters.table_items import to_item_value
from functions.adapters.turn_ledger import TurnLedger
from functions.conversation.history import bounded_history
from functions.conversation.state import ConversationView, HistoryChange, StartedTurn

HISTORY_WRITE_ATTEMPTS = 8  # optimistic-locking retries before giving up on one change


class HistoryConflict(Exception):
    """Concurrent writers kept changing the history; the change was not made."""


class TableConversation:
    def __init__(self, connections: Connections, turns: TurnLedger, connection_id: str) -> None:
        """``connections`` and ``turns``: over the same table (``functions.wiring`` builds them
        from one ``TableItems``)."""
        self.connections, self.turns, self.connection_id = connections, turns, connection_id

    def read(self) -> ConversationView | None:
        record = self.connections.get(self.connection_id)
        if record is None:
            return None
        return ConversationView(
            open=record.status == "open",
            active_turn_id=record.active_turn_id,
            turn_counter=record.turn_counter,
            history=record.history,
            last_spoken=record.last_spoken,
        )

    def admit_turn(self, limit: int, now: float) -> bool:
        return self.turns.admit(self.connection_id, limit, now)

    def admit_listen(self, limit: int, now: float) -> bool:
        return self.turns.admit_listen(self.connection_id, limit, now)

    def start_turn(self, turn_id: str, mode: str, now: float) -> StartedTurn:
        return self.turns.start(self.connection_id, turn_id, mode, now)

    def cancel_turn(self, turn_id: str, heard_ms: float | None) -> bool:
        return self.turns.cancel(self.connection_id, turn_id, heard_ms)

    def heard_ms(self, turn_id: str) -> float | None:
        record = self.turns.get(self.connection_id, turn_id)
        return None if record is None else record.heard_ms

    def fail_turn(self, turn_id: str, error_code: str) -> bool:
        return self.turns.fail(self.connection_id, turn_id, error_code)

    def change_history(self, change: HistoryChange) -> bool:
        """Write ``change(history, last_spoken)`` as the history (bounded) and its last spoken
        exchange, if nobody wrote in between (else read again: optimistic locking on
        ``history_version``, so no concurrent change is lost). ``change`` returning None: no
        write. False if the connection is gone or nothing was written; ``HistoryConflict``
        when concurrent writers won every attempt."""
        for _ in range(HISTORY_WRITE_ATTEMPTS):
            record = self.connections.get(self.connection_id)
            if record is None:
                return False
            changed = change(record.history, record.last_spoken)
            if changed is None:
                return False
            history, spoken = bounded_history(changed[0]), changed[1]
            values = {
                ":history": to_item_value(history),
                ":next": record.history_version + 1,
                ":seen": record.history_version,
            }
            update = "SET history = :history, history_version = :next"
            if spoken is not None:
                values[":spoken"] = to_item_value(spoken.stored())
                update += ", last_spoken = :spoken"
            else:
                update += " REMOVE last_spoken"
            written = self.connections.table.update(
                self.connection_id,
                CONNECTION_SORT_KEY,
                update,
                values,
                "history_version = :seen"
                if record.history_version
                else "attribute_not_exists(history_version) OR history_version = :seen",
            )
            if written is not None:
                return True
        raise HistoryConflict(self.connection_id)
