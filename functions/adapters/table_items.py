"""The session table's items, read and written through a boto3 *client*: the one place that
turns Python values into DynamoDB attributes and back, and a failed condition into ``None``.

A client, not a resource: the worker reaches the table from several threads at once, and boto3
clients are thread-safe where resources must not be shared between threads. The modules that
give the items their meaning (``connect_tickets``, ``connections``, ``turn_ledger``,
``conversation_table``) share one ``TableItems``.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import boto3
from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from botocore.config import Config
from botocore.exceptions import ClientError

from functions.adapters.session_table import PARTITION_KEY, SORT_KEY

# Short timeouts: the cancel watcher reads every 100 ms and must see a stuck request fail in
# seconds, not after botocore's default 60 s read timeout; standard retries (3 attempts in all,
# with jittered backoff) absorb throttling and 5xx without a second retry layer in the callers.
# ``total_max_attempts``, not ``max_attempts``: in a client Config botocore reads
# ``max_attempts`` as the number of *retries* (3 made 4 attempts, ~7 s of backoff at worst).
DYNAMODB_CONFIG = Config(
    connect_timeout=1,
    read_timeout=3,
    retries={"mode": "standard", "total_max_attempts": 3},
    tcp_keepalive=True,
)

_serializer = TypeSerializer()
_deserializer = TypeDeserializer()


def dynamodb_client(**client_kwargs: Any) -> Any:
    """The DynamoDB client the functions use (one per execution environment)."""
    return boto3.client("dynamodb", config=DYNAMODB_CONFIG, **client_kwargs)


def _to_dynamo(value: Any) -> Any:
    """A value DynamoDB can store: floats as Decimals; None inside a map left out (a
    ``Timings`` without a first audio stores no ``first_audio_ms``)."""
    if isinstance(value, float):
        return Decimal(str(value))
    if isinstance(value, dict):
        return {key: _to_dynamo(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [_to_dynamo(item) for item in value]
    return value


def attribute(value: Any) -> dict[str, Any]:
    """One value as a DynamoDB attribute (``{"S": ...}``, ``{"N": ...}``, ...)."""
    return _serializer.serialize(_to_dynamo(value))


def attributes(values: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """An item, or a request's ``ExpressionAttributeValues``, as DynamoDB attributes."""
    return {name: attribute(value) for name, value in values.items()}


def plain_item(raw: dict[str, Any] | None) -> dict[str, Any] | None:
    """An item DynamoDB returned, as Python values (numbers as Decimals); None stays None."""
    if raw is None:
        return None
    return {name: _deserializer.deserialize(value) for name, value in raw.items()}


def conditional_failed(error: ClientError) -> bool:
    """The write was refused by its condition (a lost race, a replay): not an error."""
    return error.response.get("Error", {}).get("Code") in (
        "ConditionalCheckFailedException",
        "TransactionCanceledException",
    )


def to_item_value(value: Any) -> Any:
    """A history value DynamoDB can store: floats (in tool inputs and results) as Decimals.
    Unlike ``attribute``, None stays: a tool's JSON result may hold a null."""
    if isinstance(value, float):
        return Decimal(str(value))
    if isinstance(value, dict):
        return {key: to_item_value(item) for key, item in value.items()}
    if isinstance(value, list):
        return [to_item_value(item) for item in value]
    return value


def from_item_value(value: Any) -> Any:
    """A value as JSON and Bedrock take it: DynamoDB's Decimals as ints or floats."""
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, dict):
        return {key: from_item_value(item) for key, item in value.items()}
    if isinstance(value, list):
        return [from_item_value(item) for item in value]
    return value


def optional_float(value: Any) -> float | None:
    return None if value is None else float(value)


def optional_str(value: Any) -> str | None:
    return None if value is None else str(value)


class TableItems:
    """Get, put, update and query the session table's items, with their conditions."""

    def __init__(self, client: Any, table_name: str) -> None:
        """``client``: a boto3 ``dynamodb`` client (thread-safe, shared by the threads)."""
        self.client = client
        self.table_name = table_name

    def key(self, partition: str, sort: str) -> dict[str, Any]:
        return {PARTITION_KEY: {"S": partition}, SORT_KEY: {"S": sort}}

    def get(self, partition: str, sort: str) -> dict[str, Any] | None:
        """The item, strongly consistent (a cancel written a moment ago must be seen)."""
        response = self.client.get_item(
            TableName=self.table_name, Key=self.key(partition, sort), ConsistentRead=True
        )
        return plain_item(response.get("Item"))

    def put(self, item: dict[str, Any], condition: str | None = None) -> bool:
        """One PutItem; False when ``condition`` failed."""
        request: dict[str, Any] = {"TableName": self.table_name, "Item": attributes(item)}
        if condition:
            request["ConditionExpression"] = condition
        try:
            self.client.put_item(**request)
        except ClientError as error:
            if condition and conditional_failed(error):
                return False
            raise
        return True

    def update(
        self,
        partition: str,
        sort: str,
        update: str,
        values: dict[str, Any] | None = None,
        condition: str | None = None,
        names: dict[str, str] | None = None,
        returns: str = "NONE",
    ) -> dict[str, Any] | None:
        """One UpdateItem; returns the attributes asked for, or None when ``condition`` failed."""
        request: dict[str, Any] = {
            "TableName": self.table_name,
            "Key": self.key(partition, sort),
            "UpdateExpression": update,
            "ReturnValues": returns,
        }
        if values:
            request["ExpressionAttributeValues"] = attributes(values)
        if names:
            request["ExpressionAttributeNames"] = names
        if condition:
            request["ConditionExpression"] = condition
        try:
            response = self.client.update_item(**request)
        except ClientError as error:
            if conditional_failed(error):
                return None
            raise
        return plain_item(response.get("Attributes")) or {}

    def query_prefix(self, partition: str, sort_prefix: str) -> list[dict[str, Any]]:
        """The items under ``partition`` whose sort key starts with ``sort_prefix``."""
        response = self.client.query(
            TableName=self.table_name,
            KeyConditionExpression="pk = :pk AND begins_with(sk, :turn)",
            ExpressionAttributeValues=attributes({":pk": partition, ":turn": sort_prefix}),
            ConsistentRead=True,
        )
        return [plain_item(raw) or {} for raw in response["Items"]]
