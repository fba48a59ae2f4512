"""Connections and turns in DynamoDB, with conditional writes so that cancel, barge-in and
disconnect are race-free: a turn's status only moves forward from ``running``, and only once."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Literal

from boto3.dynamodb.conditions import Attr, Key
from botocore.exceptions import ClientError

from functions.adapters.session_table import TTL_ATTRIBUTE
from voicewire.client_protocol import AudioDelivery, Timings

CONNECTION = "connection"
TURN_PREFIX = "turn#"
SESSION_SECONDS = 2 * 3600 + 600  # API Gateway's 2 h connection limit, and some slack
HISTORY_MESSAGES = 20  # user and assistant messages kept for follow-up questions

TurnStatusValue = Literal["starting", "running", "complete", "cancelled", "failed"]


class ConnectionClosed(Exception):
    """The connection is unknown or gone: no turn can start on it."""


class DuplicateTurn(Exception):
    """The client reused a ``turn_id`` on this connection."""


@dataclass
class ConnectionRecord:
    connection_id: str
    principal: str
    audio: AudioDelivery
    status: str
    active_turn_id: str | None
    turn_counter: int
    history: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class TurnRecord:
    connection_id: str
    turn_id: str
    turn: int
    mode: str
    status: TurnStatusValue
    accepted_at: float
    audio: AudioDelivery = "binary"


def _to_dynamo(value: Any) -> Any:
    if isinstance(value, float):
        return Decimal(str(value))
    if isinstance(value, dict):
        return {key: _to_dynamo(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [_to_dynamo(item) for item in value]
    return value


def _conditional_failed(error: ClientError) -> bool:
    return error.response.get("Error", {}).get("Code") in (
        "ConditionalCheckFailedException",
        "TransactionCanceledException",
    )


class SessionStore:
    def __init__(self, table: Any) -> None:
        """``table``: a boto3 ``dynamodb`` Table resource."""
        self.table = table

    # --- connections ----------------------------------------------------------------------

    def put_connection(
        self, connection_id: str, principal: str, audio: AudioDelivery, now: float | None = None
    ) -> None:
        now = now or time.time()
        self.table.put_item(
            Item={
                "pk": connection_id,
                "sk": CONNECTION,
                "principal": principal,
                "audio": audio,
                "status": "open",
                "connected_at": _to_dynamo(now),
                "turn_counter": 0,
                "history": [],
                TTL_ATTRIBUTE: int(now) + SESSION_SECONDS,
            }
        )

    def get_connection(self, connection_id: str) -> ConnectionRecord | None:
        item = self.table.get_item(
            Key={"pk": connection_id, "sk": CONNECTION}, ConsistentRead=True
        ).get("Item")
        if item is None:
            return None
        return ConnectionRecord(
            connection_id,
            str(item.get("principal", "")),
            item.get("audio", "binary"),
            str(item.get("status", "open")),
            item.get("active_turn_id"),
            int(item.get("turn_counter", 0)),
            list(item.get("history", [])),
        )

    def mark_gone(self, connection_id: str) -> str | None:
        """Mark the connection gone; returns its active turn id (to cancel), if any."""
        try:
            old = self.table.update_item(
                Key={"pk": connection_id, "sk": CONNECTION},
                UpdateExpression="SET #status = :gone",
                ConditionExpression=Attr("pk").exists(),
                ExpressionAttributeNames={"#status": "status"},
                ExpressionAttributeValues={":gone": "gone"},
                ReturnValues="ALL_OLD",
            )["Attributes"]
        except ClientError as error:
            if _conditional_failed(error):
                return None
            raise
        return old.get("active_turn_id")

    # --- turns ----------------------------------------------------------------------------

    def start_turn(
        self, connection_id: str, turn_id: str, mode: str, now: float | None = None
    ) -> tuple[TurnRecord, str | None]:
        """Record a new turn and make it the active one; returns it and the turn it replaces.

        The turn item is written first, conditionally (a reused ``turn_id`` fails there), then
        the connection's counter and active turn move in one conditional update (the connection
        must be open). The replaced turn, if it was still running, is cancelled by the caller.
        """
        now = now or time.time()
        try:
            self.table.put_item(
                Item={
                    "pk": connection_id,
                    "sk": TURN_PREFIX + turn_id,
                    "mode": mode,
                    "status": "starting",
                    "accepted_at": _to_dynamo(now),
                    TTL_ATTRIBUTE: int(now) + SESSION_SECONDS,
                },
                ConditionExpression=Attr("pk").not_exists(),
            )
        except ClientError as error:
            if _conditional_failed(error):
                raise DuplicateTurn(turn_id) from None
            raise
        try:
            old = self.table.update_item(
                Key={"pk": connection_id, "sk": CONNECTION},
                UpdateExpression="SET turn_counter = turn_counter + :one, active_turn_id = :turn",
                ConditionExpression=Attr("pk").exists() & Attr("status").eq("open"),
                ExpressionAttributeValues={":one": 1, ":turn": turn_id},
                ReturnValues="ALL_OLD",
            )["Attributes"]
        except ClientError as error:
            if _conditional_failed(error):
                self._set_status(connection_id, turn_id, "failed", expect=("starting",))
                raise ConnectionClosed(connection_id) from None
            raise
        number = int(old.get("turn_counter", 0)) + 1
        self.table.update_item(
            Key={"pk": connection_id, "sk": TURN_PREFIX + turn_id},
            UpdateExpression="SET turn = :turn, #status = :running",
            ExpressionAttributeNames={"#status": "status"},
            ExpressionAttributeValues={":turn": number, ":running": "running"},
        )
        audio = old.get("audio", "binary")
        record = TurnRecord(connection_id, turn_id, number, mode, "running", now, audio)
        return record, old.get("active_turn_id")

    def get_turn(self, connection_id: str, turn_id: str) -> dict[str, Any] | None:
        return self.table.get_item(
            Key={"pk": connection_id, "sk": TURN_PREFIX + turn_id}, ConsistentRead=True
        ).get("Item")

    def turn_status(self, connection_id: str, turn_id: str) -> str | None:
        item = self.get_turn(connection_id, turn_id)
        return None if item is None else str(item["status"])

    def cancel_turn(self, connection_id: str, turn_id: str) -> bool:
        """Cancel a turn that is still starting or running; False if it had already ended."""
        return self._set_status(connection_id, turn_id, "cancelled", expect=("starting", "running"))

    def finish_turn(
        self,
        connection_id: str,
        turn_id: str,
        status: TurnStatusValue,
        timings: Timings,
        counts: dict[str, int],
        stop_reason: str | None = None,
    ) -> TurnStatusValue:
        """Record how the turn ended. A turn cancelled meanwhile stays cancelled (and that is
        the status returned), but its figures are still recorded."""
        values = {
            ":status": status,
            ":timings": _to_dynamo(timings.model_dump()),
            **{f":{key}": value for key, value in counts.items()},
        }
        counters = ", ".join(f"{key} = :{key}" for key in counts)
        extra = ", stop_reason = :stop" if stop_reason else ""
        if stop_reason:
            values[":stop"] = stop_reason
        key = {"pk": connection_id, "sk": TURN_PREFIX + turn_id}
        try:
            self.table.update_item(
                Key=key,
                UpdateExpression=f"SET #status = :status, timings = :timings, {counters}{extra}",
                ConditionExpression=Attr("status").eq("running"),
                ExpressionAttributeNames={"#status": "status"},
                ExpressionAttributeValues=values,
            )
            final: TurnStatusValue = status
        except ClientError as error:
            if not _conditional_failed(error):
                raise
            del values[":status"]
            self.table.update_item(
                Key=key,
                UpdateExpression=f"SET timings = :timings, {counters}{extra}",
                ExpressionAttributeValues=values,
            )
            final = "cancelled"
        self._clear_active(connection_id, turn_id)
        return final

    def _clear_active(self, connection_id: str, turn_id: str) -> None:
        try:
            self.table.update_item(
                Key={"pk": connection_id, "sk": CONNECTION},
                UpdateExpression="REMOVE active_turn_id",
                ConditionExpression=Attr("active_turn_id").eq(turn_id),
            )
        except ClientError as error:
            if not _conditional_failed(error):
                raise

    def _set_status(
        self, connection_id: str, turn_id: str, status: str, expect: tuple[str, ...]
    ) -> bool:
        condition = Attr("status").is_in(list(expect))
        try:
            self.table.update_item(
                Key={"pk": connection_id, "sk": TURN_PREFIX + turn_id},
                UpdateExpression="SET #status = :status",
                ConditionExpression=condition,
                ExpressionAttributeNames={"#status": "status"},
                ExpressionAttributeValues={":status": status},
            )
        except ClientError as error:
            if _conditional_failed(error):
                return False
            raise
        return True

    # --- conversation history -------------------------------------------------------------

    def append_history(self, connection_id: str, prompt: str, answer: str) -> None:
        """Keep the last ``HISTORY_MESSAGES`` messages, in converse format, for follow-ups."""
        record = self.get_connection(connection_id)
        if record is None:
            return
        history = [
            *record.history,
            {"role": "user", "content": [{"text": prompt}]},
            {"role": "assistant", "content": [{"text": answer}]},
        ][-HISTORY_MESSAGES:]
        self.table.update_item(
            Key={"pk": connection_id, "sk": CONNECTION},
            UpdateExpression="SET history = :history",
            ExpressionAttributeValues={":history": history},
        )

    def turns(self, connection_id: str) -> list[dict[str, Any]]:
        return self.table.query(
            KeyConditionExpression=Key("pk").eq(connection_id) & Key("sk").begins_with(TURN_PREFIX)
        )["Items"]
