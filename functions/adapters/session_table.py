"""The DynamoDB table that holds session state: one definition for CDK, the local stack and tests.

One table, two item kinds under the connection id:

=============  ======================  ========================================================
``pk``         ``sk``                  attributes
=============  ======================  ========================================================
connection id  ``connection``          principal, connected_at, audio (binary | base64), status
                                       (open | gone), active_turn_id, turn_counter, history,
                                       expires_at
connection id  ``turn#<turn_id>``      turn, mode, status (starting | running | complete |
                                       cancelled | failed), accepted_at, timings, audio_bytes,
                                       audio_frames, frames, bytes_sent, stop_reason, expires_at
``ticket#``    ``ticket``              expires_at: a connect ticket used once (its ``jti``
+ jti                                  after ``ticket#``), refused if presented again
=============  ======================  ========================================================

``expires_at`` (epoch seconds) is the TTL attribute: state disappears after a connection's
maximum lifetime (API Gateway closes connections after 2 hours).
"""

from __future__ import annotations

from typing import Any

PARTITION_KEY = "pk"
SORT_KEY = "sk"
TTL_ATTRIBUTE = "expires_at"
DEFAULT_TABLE_NAME = "voicewire-sessions"


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
