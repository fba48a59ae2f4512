"""The DynamoDB table that holds session state: one definition for CDK, the local stack and tests.

One table, two item kinds under the connection id:

=============  ======================  ========================================================
``pk``         ``sk``                  attributes
=============  ======================  ========================================================
connection id  ``connection``          principal, connected_at, audio (binary | base64), status
                                       (open | gone), active_turn_id, turn_counter, rate_window,
                                       rate_count, history, history_version, last_spoken,
                                       expires_at
connection id  ``turn#<turn_id>``      turn, mode, status (starting | running | complete |
                                       cancelled | failed), accepted_at, claimed_by, claimed_at,
                                       lease_until, heard_ms, ended_at, timings, audio_bytes,
                                       audio_frames, frames, bytes_sent, stop_reason, error_code,
                                       expires_at
``ticket#``    ``ticket``              expires_at: a connect ticket used once (its ``jti``
+ jti                                  after ``ticket#``), refused if presented again
=============  ======================  ========================================================

``expires_at`` (epoch seconds) is the TTL attribute: state disappears after a connection's
maximum lifetime (API Gateway closes connections after 2 hours).

The modules that read and write these items, one per job, all over this one table:
``connect_tickets`` (the tickets), ``connections`` (the connection item), ``turn_ledger`` (the
turn items, and the connection's turn counter, rate window and active turn) and
``conversation_table`` (the conversation's state, its history included), through
``table_items`` (the client and the item codec).
"""

from __future__ import annotations

from typing import Any

PARTITION_KEY = "pk"
SORT_KEY = "sk"
TTL_ATTRIBUTE = "expires_at"
DEFAULT_TABLE_NAME = "voicewire-sessions"

# The sort keys, and the partition key's prefix of a ticket: deployed data, never renamed.
CONNECTION_SORT_KEY = "connection"
TURN_SORT_KEY_PREFIX = "turn#"
TICKET_KEY_PREFIX = "ticket#"  # a used connect ticket's jti (functions/access/tickets.py)
TICKET_SORT_KEY = "ticket"
# How long a connection's items live: API Gateway's 2 h connection limit, and some slack.
SESSION_SECONDS = 2 * 3600 + 600


def create_table(client: Any, table_name: str = DEFAULT_TABLE_NAME) -> None:
    """Create the table (and its TTL setting) with a boto3 ``dynamodb`` client; wait for it."""
    client.create_table(
        TableName=table_name,
        AttributeDefinitions=[
            {"AttributeName": PARTITION_KEY, "AttributeType": "S"},
            {"AttributeName": SORT_KEY, "AttributeType": "S"},
        ],
        KeySchema=[
            {"AttributeName": PARTITION_KEY, "KeyType": "HASH"},
            {"AttributeName": SORT_KEY, "KeyType": "RANGE"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    client.get_waiter("table_exists").wait(TableName=table_name)
    client.update_time_to_live(
        TableName=table_name,
        TimeToLiveSpecification={"Enabled": True, "AttributeName": TTL_ATTRIBUTE},
    )
