"""Connect tickets used once: the record that makes a replayed ticket fail (the authorizer's
check, after ``functions.access.tickets`` verified the ticket itself)."""

from __future__ import annotations

from functions.adapters.session_table import (
    PARTITION_KEY,
    SORT_KEY,
    TICKET_KEY_PREFIX,
    TICKET_SORT_KEY,
    TTL_ATTRIBUTE,
)
from functions.adapters.table_items import TableItems

# Past the ticket's exp: the verifier's leeway, and some.
TICKET_RECORD_SLACK_SECONDS = 60


class ConnectTickets:
    def __init__(self, table: TableItems) -> None:
        self.table = table

    def use(self, ticket_id: str, expires_at: float) -> bool:
        """Record a connect ticket's first use; False if it was used before (a replay).

        The record lives as long as the ticket could still pass (``expires_at`` plus the
        verifier's leeway), then DynamoDB's TTL removes it."""
        item = {
            PARTITION_KEY: TICKET_KEY_PREFIX + ticket_id,
            SORT_KEY: TICKET_SORT_KEY,
            TTL_ATTRIBUTE: int(expires_at) + TICKET_RECORD_SLACK_SECONDS,
        }
        return self.table.put(item, condition="attribute_not_exists(pk)")
