"""The connection item: who connected, how their audio is delivered, whether the connection is
still open. Its turn counter, active turn and rate window are the turn ledger's to change
(``turn_ledger``), its history the conversation's (``conversation_table``); this module reads
them all into one ``ConnectionRecord``."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from functions.adapters.session_table import (
    CONNECTION_SORT_KEY,
    PARTITION_KEY,
    SESSION_SECONDS,
    SORT_KEY,
    TTL_ATTRIBUTE,
)
from functions.adapters.table_items import TableItems, from_item_value
from functions.conversation.history import SpokenExchange
from voicewire.client_protocol import AudioDelivery


@dataclass(frozen=True)
class ConnectionRecord:
    connection_id: str
    principal: str
    audio: AudioDelivery
    status: str  # open | gone
    active_turn_id: str | None
    turn_counter: int
    history: list[dict[str, Any]] = field(default_factory=list)
    history_version: int = 0  # the history's optimistic lock (``conversation_table``)
    # The last exchange the history keeps, as spoken: what a later ``heard_ms`` cuts it to.
    last_spoken: SpokenExchange | None = None


class Connections:
    def __init__(self, table: TableItems) -> None:
        self.table = table

    def put(
        self, connection_id: str, principal: str, audio: AudioDelivery, now: float | None = None
    ) -> None:
        """Record a new connection, open, with no turn and an empty history."""
        now = now or time.time()
        item = {
            PARTITION_KEY: connection_id,
            SORT_KEY: CONNECTION_SORT_KEY,
            "principal": principal,
            "audio": audio,
            "status": "open",
            "connected_at": now,
            "turn_counter": 0,
            "history": [],
            "history_version": 0,
            TTL_ATTRIBUTE: int(now) + SESSION_SECONDS,
        }
        self.table.put(item)

    def get(self, connection_id: str) -> ConnectionRecord | None:
        item = self.table.get(connection_id, CONNECTION_SORT_KEY)
        if item is None:
            return None
        return ConnectionRecord(
            connection_id,
            str(item.get("principal", "")),
            item.get("audio", "binary"),
            str(item.get("status", "open")),
            item.get("active_turn_id"),
            int(item.get("turn_counter", 0)),
            from_item_value(list(item.get("history", []))),
            int(item.get("history_version", 0)),
            SpokenExchange.from_stored(item["last_spoken"]) if "last_spoken" in item else None,
        )

    def mark_gone(self, connection_id: str) -> str | None:
        """Mark the connection gone; returns its active turn id (to cancel), if any."""
        old = self.table.update(
            connection_id,
            CONNECTION_SORT_KEY,
            "SET #status = :gone",
            {":gone": "gone"},
            "attribute_exists(pk)",
            {"#status": "status"},
            "ALL_OLD",
        )
        return None if old is None else old.get("active_turn_id")
