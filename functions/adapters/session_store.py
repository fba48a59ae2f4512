"""Connections and turns in DynamoDB. Every state change is a conditional write, so cancel,
barge-in, disconnect, duplicate deliveries and retries of the worker are race-free:

- a turn's status only moves forward (``starting`` -> ``running`` -> ``complete`` | ``cancelled``
  | ``failed``), and only once;
- a turn runs in at most one worker: the worker *claims* it (``claimed_by``), and keeps its claim
  alive with a heartbeat (``lease_until``); a second delivery of the same job finds the claim and
  is dropped; a retry after the claimant died finds the lease expired and only ends the turn;
- the history is appended with optimistic locking (``history_version``), so two writers never
  lose each other's entries.

It talks to DynamoDB through a boto3 *client* (thread-safe), not a resource: the worker reaches
the store from several threads at once, and boto3 resources must not be shared between threads.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from decimal import Decimal
from enum import StrEnum
from typing import Any

import boto3
from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from botocore.config import Config
from botocore.exceptions import ClientError

from functions.adapters.session_table import TTL_ATTRIBUTE
from functions.conversation.history import SpokenExchange, bounded_history
from functions.conversation.state import (
    ConversationClosed,
    ConversationView,
    DuplicateTurn,
    HistoryChange,
    StartedTurn,
    TurnStatus,
)
from voicewire.client_protocol import AudioDelivery, Timings

CONNECTION = "connection"
TURN_PREFIX = "turn#"
TICKET_PREFIX = "ticket#"  # a used connect ticket's jti (functions/auth_tokens.py)
TICKET = "ticket"
TICKET_RECORD_SLACK_SECONDS = 60  # past the ticket's exp: its leeway, and some
SESSION_SECONDS = 2 * 3600 + 600  # API Gateway's 2 h connection limit, and some slack
HISTORY_WRITE_ATTEMPTS = 8  # optimistic-locking retries before giving up on one change

TurnStatusValue = TurnStatus

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


# The connection is unknown or gone: no turn can start on it.
ConnectionClosed = ConversationClosed


class HistoryConflict(Exception):
    """Concurrent writers kept changing the history; the append was not made."""


class ClaimVerdict(StrEnum):
    """What a worker learns when it tries to claim its turn."""

    CLAIMED = "claimed"  # this worker's turn: to run if running, else to tell it ended
    ABANDONED = "abandoned"  # its worker died (lease expired, or a retry): end it, unspoken
    HELD = "held"  # another worker runs it now (a duplicate delivery): drop the job
    ENDED = "ended"  # the turn already ended (cancelled, failed, complete): drop the job
    UNKNOWN = "unknown"  # no such turn (expired by TTL, or never recorded): drop the job


@dataclass
class Claim:
    verdict: ClaimVerdict
    status: str | None = None  # the turn's status when the claim was tried
    claimed_by: str | None = None  # who held the turn before
    # A worker recorded the turn's end (``ended_at``): it told the client, or tried to. A turn
    # that ended without one was ended by a cancel, a barge-in or a disconnect alone.
    end_recorded: bool = False


@dataclass
class ConnectionRecord:
    connection_id: str
    principal: str
    audio: AudioDelivery
    status: str
    active_turn_id: str | None
    turn_counter: int
    history: list[dict[str, Any]] = field(default_factory=list)
    history_version: int = 0
    # The last exchange the history keeps, as spoken: what a later ``heard_ms`` cuts it to.
    last_spoken: SpokenExchange | None = None


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


def _attribute(value: Any) -> dict[str, Any]:
    return _serializer.serialize(_to_dynamo(value))


def _values(values: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {name: _attribute(value) for name, value in values.items()}


def _item(raw: dict[str, Any] | None) -> dict[str, Any] | None:
    if raw is None:
        return None
    return {name: _deserializer.deserialize(value) for name, value in raw.items()}


def _conditional_failed(error: ClientError) -> bool:
    return error.response.get("Error", {}).get("Code") in (
        "ConditionalCheckFailedException",
        "TransactionCanceledException",
    )


def _to_item_value(value: Any) -> Any:
    """A history value DynamoDB can store: floats (in tool inputs and results) as Decimals."""
    if isinstance(value, float):
        return Decimal(str(value))
    if isinstance(value, dict):
        return {key: _to_item_value(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_to_item_value(item) for item in value]
    return value


def _from_item_value(value: Any) -> Any:
    """A history value as JSON and Bedrock take it: DynamoDB's Decimals as ints or floats."""
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, dict):
        return {key: _from_item_value(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_from_item_value(item) for item in value]
    return value


class SessionStore:
    def __init__(self, client: Any, table_name: str) -> None:
        """``client``: a boto3 ``dynamodb`` client (thread-safe, shared by the threads)."""
        self.client = client
        self.table_name = table_name

    # --- low level ------------------------------------------------------------------------

    def _key(self, connection_id: str, sort_key: str) -> dict[str, Any]:
        return {"pk": {"S": connection_id}, "sk": {"S": sort_key}}

    def _get(self, connection_id: str, sort_key: str) -> dict[str, Any] | None:
        response = self.client.get_item(
            TableName=self.table_name, Key=self._key(connection_id, sort_key), ConsistentRead=True
        )
        return _item(response.get("Item"))

    def _update(
        self,
        connection_id: str,
        sort_key: str,
        update: str,
        values: dict[str, Any] | None = None,
        condition: str | None = None,
        names: dict[str, str] | None = None,
        returns: str = "NONE",
    ) -> dict[str, Any] | None:
        """One UpdateItem; returns the attributes asked for, or None when ``condition`` failed."""
        request: dict[str, Any] = {
            "TableName": self.table_name,
            "Key": self._key(connection_id, sort_key),
            "UpdateExpression": update,
            "ReturnValues": returns,
        }
        if values:
            request["ExpressionAttributeValues"] = _values(values)
        if names:
            request["ExpressionAttributeNames"] = names
        if condition:
            request["ConditionExpression"] = condition
        try:
            response = self.client.update_item(**request)
        except ClientError as error:
            if _conditional_failed(error):
                return None
            raise
        return _item(response.get("Attributes")) or {}

    # --- connections ----------------------------------------------------------------------

    def put_connection(
        self, connection_id: str, principal: str, audio: AudioDelivery, now: float | None = None
    ) -> None:
        now = now or time.time()
        item = {
            "pk": connection_id,
            "sk": CONNECTION,
            "principal": principal,
            "audio": audio,
            "status": "open",
            "connected_at": now,
            "turn_counter": 0,
            "history": [],
            "history_version": 0,
            TTL_ATTRIBUTE: int(now) + SESSION_SECONDS,
        }
        self.client.put_item(TableName=self.table_name, Item=_values(item))

    def get_connection(self, connection_id: str) -> ConnectionRecord | None:
        item = self._get(connection_id, CONNECTION)
        if item is None:
            return None
        return ConnectionRecord(
            connection_id,
            str(item.get("principal", "")),
            item.get("audio", "binary"),
            str(item.get("status", "open")),
            item.get("active_turn_id"),
            int(item.get("turn_counter", 0)),
            _from_item_value(list(item.get("history", []))),
            int(item.get("history_version", 0)),
            SpokenExchange.from_stored(item["last_spoken"]) if "last_spoken" in item else None,
        )

    def mark_gone(self, connection_id: str) -> str | None:
        """Mark the connection gone; returns its active turn id (to cancel), if any."""
        old = self._update(
            connection_id, CONNECTION, "SET #status = :gone",
            {":gone": "gone"}, "attribute_exists(pk)", {"#status": "status"}, "ALL_OLD",
        )  # fmt: skip
        return None if old is None else old.get("active_turn_id")

    def use_ticket(self, ticket_id: str, expires_at: float) -> bool:
        """Record a connect ticket's first use; False if it was used before (a replay).

        The record lives as long as the ticket could still pass (``expires_at`` plus the
        verifier's leeway), then DynamoDB's TTL removes it."""
        try:
            self.client.put_item(
                TableName=self.table_name,
                Item=_values(
                    {
                        "pk": TICKET_PREFIX + ticket_id,
                        "sk": TICKET,
                        TTL_ATTRIBUTE: int(expires_at) + TICKET_RECORD_SLACK_SECONDS,
                    }
                ),
                ConditionExpression="attribute_not_exists(pk)",
            )
        except ClientError as error:
            if _conditional_failed(error):
                return False
            raise
        return True

    def admit_turn(self, connection_id: str, limit: int, now: float | None = None) -> bool:
        """Count one more turn in the connection's current clock minute; False when ``limit``
        turns already started in it (or the connection is gone).

        A fixed window: two conditional writes, no read, so concurrent messages cannot both
        take the last place. A burst across a minute's edge may start up to twice ``limit``."""
        window = int((now or time.time()) // 60)
        values = {":one": 1, ":window": window, ":limit": limit}
        for _ in range(2):  # a concurrent writer may open the new window between the writes
            if self._update(
                connection_id, CONNECTION, "SET rate_count = rate_count + :one",
                values, "rate_window = :window AND rate_count < :limit",
            ) is not None:  # fmt: skip
                return True
            if self._update(
                connection_id, CONNECTION, "SET rate_window = :window, rate_count = :one",
                {":one": 1, ":window": window},
                "attribute_exists(pk) AND (attribute_not_exists(rate_window)"
                " OR rate_window <> :window)",
            ) is not None:  # fmt: skip
                return True
        return False

    # --- turns ----------------------------------------------------------------------------

    def start_turn(
        self, connection_id: str, turn_id: str, mode: str, now: float | None = None
    ) -> tuple[TurnRecord, str | None]:
        """Record a new turn and make it the active one; returns it and the turn it replaces.

        Three conditional writes: the turn item, ``starting`` (a reused ``turn_id`` fails
        there); the connection's counter and active turn (the connection must be open); the turn
        ``running``, only if it is still ``starting``. A cancel, a barge-in or a disconnect
        handled between the writes cancels the starting turn, and the last write then leaves it
        cancelled: the record comes back with status ``cancelled`` and no worker must run it.
        The replaced turn, if it was still running, is cancelled by the caller.
        """
        now = now or time.time()
        item = {
            "pk": connection_id,
            "sk": TURN_PREFIX + turn_id,
            "mode": mode,
            "status": "starting",
            "accepted_at": now,
            TTL_ATTRIBUTE: int(now) + SESSION_SECONDS,
        }
        try:
            self.client.put_item(
                TableName=self.table_name,
                Item=_values(item),
                ConditionExpression="attribute_not_exists(pk)",
            )
        except ClientError as error:
            if _conditional_failed(error):
                raise DuplicateTurn(turn_id) from None
            raise
        old = self._update(
            connection_id,
            CONNECTION,
            "SET turn_counter = turn_counter + :one, active_turn_id = :turn",
            {":one": 1, ":turn": turn_id, ":open": "open"},
            "attribute_exists(pk) AND #status = :open",
            {"#status": "status"},
            "ALL_OLD",
        )
        if old is None:
            self._set_status(connection_id, turn_id, "failed", expect=("starting",))
            raise ConnectionClosed(connection_id)
        number = int(old.get("turn_counter", 0)) + 1
        running = self._update(
            connection_id,
            TURN_PREFIX + turn_id,
            "SET turn = :turn, #status = :running",
            {":turn": number, ":running": "running", ":starting": "starting"},
            "#status = :starting",
            {"#status": "status"},
        )
        if running is None:  # cancelled between the writes: it stays cancelled, with its number
            self._update(
                connection_id, TURN_PREFIX + turn_id, "SET turn = :turn", {":turn": number}
            )
        audio = old.get("audio", "binary")
        status: TurnStatusValue = "running" if running is not None else "cancelled"
        record = TurnRecord(connection_id, turn_id, number, mode, status, now, audio)
        return record, old.get("active_turn_id")

    def get_turn(self, connection_id: str, turn_id: str) -> dict[str, Any] | None:
        return self._get(connection_id, TURN_PREFIX + turn_id)

    def turn_status(self, connection_id: str, turn_id: str) -> str | None:
        item = self.get_turn(connection_id, turn_id)
        return None if item is None else str(item["status"])

    def cancel_turn(self, connection_id: str, turn_id: str, heard_ms: float | None = None) -> bool:
        """Cancel a turn that is still starting or running; False if it had already ended.
        ``heard_ms``: how much of its audio the client played, written with the cancel for the
        turn's worker, which keeps only that much in the history."""
        if heard_ms is None:
            return self._set_status(
                connection_id, turn_id, "cancelled", expect=("starting", "running")
            )
        cancelled = self._update(
            connection_id, TURN_PREFIX + turn_id, "SET #status = :status, heard_ms = :heard",
            {":status": "cancelled", ":heard": heard_ms, ":starting": "starting",
             ":running": "running"},
            "#status IN (:starting, :running)", {"#status": "status"},
        )  # fmt: skip
        return cancelled is not None

    def claim_turn(
        self, connection_id: str, turn_id: str, claimant: str, lease_seconds: float,
        now: float | None = None,
    ) -> Claim:  # fmt: skip
        """Make ``claimant`` (a worker invocation) the one worker of this turn.

        The first claim wins whatever the turn's status: a turn cancelled before any worker
        took it is ``CLAIMED`` with its status, and its worker only tells the client it ended.
        """
        now = now or time.time()
        claimed = self._update(
            connection_id,
            TURN_PREFIX + turn_id,
            "SET claimed_by = :me, lease_until = :until, claimed_at = :now",
            {":me": claimant, ":until": now + lease_seconds, ":now": now},
            "attribute_exists(pk) AND attribute_not_exists(claimed_by)",
            returns="ALL_NEW",
        )
        if claimed is not None:
            return Claim(ClaimVerdict.CLAIMED, str(claimed.get("status")))
        item = self.get_turn(connection_id, turn_id)
        if item is None:
            return Claim(ClaimVerdict.UNKNOWN)
        status, holder = str(item["status"]), item.get("claimed_by")
        if status != "running":
            return Claim(ClaimVerdict.ENDED, status, holder, "ended_at" in item)
        if holder == claimant:
            # Lambda retries an event under the same request id, and only once the attempt
            # before has ended: this claimant's earlier attempt died with the turn running.
            return Claim(ClaimVerdict.ABANDONED, status, holder)
        if float(item.get("lease_until", 0)) >= now:
            return Claim(ClaimVerdict.HELD, status, holder)
        return Claim(ClaimVerdict.ABANDONED, status, holder)

    def renew_claim(
        self, connection_id: str, turn_id: str, claimant: str, lease_seconds: float
    ) -> bool:
        """Extend the claim's lease; False if the turn is no longer running or no longer ours."""
        renewed = self._update(
            connection_id,
            TURN_PREFIX + turn_id,
            "SET lease_until = :until",
            {":until": time.time() + lease_seconds, ":me": claimant, ":running": "running"},
            "#status = :running AND claimed_by = :me",
            {"#status": "status"},
        )
        return renewed is not None

    def finish_turn(
        self,
        connection_id: str,
        turn_id: str,
        status: TurnStatusValue,
        timings: Timings,
        counts: dict[str, int],
        stop_reason: str | None = None,
        claimant: str | None = None,
        error_code: str | None = None,
    ) -> TurnStatusValue:
        """Record how the turn ended. A turn that ended meanwhile (cancelled) keeps its status,
        which is returned, but its figures are still recorded. With ``claimant``, only the
        worker holding the turn's claim can end it."""
        values: dict[str, Any] = {
            ":status": status,
            ":running": "running",
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
        condition = "#status = :running"
        if claimant is not None:
            values[":me"] = claimant
            condition += " AND claimed_by = :me"
        key = TURN_PREFIX + turn_id
        names = {"#status": "status"}
        ended = self._update(
            connection_id, key, "SET #status = :status, " + ", ".join(sets), values, condition,
            names,
        )  # fmt: skip
        final: TurnStatusValue = status
        if ended is None:
            del values[":status"], values[":running"]
            mine = "claimed_by = :me" if claimant is not None else None
            after = self._update(
                connection_id, key, "SET " + ", ".join(sets), values, mine, None, "ALL_NEW"
            )
            current = after.get("status") if after else self.turn_status(connection_id, turn_id)
            final = current if current in ("complete", "cancelled", "failed") else "cancelled"  # type: ignore[assignment]
        self._clear_active(connection_id, turn_id)
        return final

    def _clear_active(self, connection_id: str, turn_id: str) -> None:
        self._update(
            connection_id, CONNECTION, "REMOVE active_turn_id", {":turn": turn_id},
            "active_turn_id = :turn",
        )  # fmt: skip

    def _set_status(
        self, connection_id: str, turn_id: str, status: str, expect: tuple[str, ...]
    ) -> bool:
        allowed = {f":expect{index}": value for index, value in enumerate(expect)}
        return (
            self._update(
                connection_id,
                TURN_PREFIX + turn_id,
                "SET #status = :status",
                {":status": status, **allowed},
                f"#status IN ({', '.join(allowed)})",
                {"#status": "status"},
            )
            is not None
        )

    def fail_turn(self, connection_id: str, turn_id: str, error_code: str) -> bool:
        """End a turn that never reached a worker (or whose worker died) as ``failed``; False if
        it had already ended. Clears it as the connection's active turn."""
        failed = self._update(
            connection_id,
            TURN_PREFIX + turn_id,
            "SET #status = :failed, error_code = :code, ended_at = :now",
            {
                ":failed": "failed", ":code": error_code, ":now": time.time(),
                ":starting": "starting", ":running": "running",
            },
            "#status IN (:starting, :running)",
            {"#status": "status"},
        )  # fmt: skip
        self._clear_active(connection_id, turn_id)
        return failed is not None

    # --- conversation history -------------------------------------------------------------

    def change_history(self, connection_id: str, change: HistoryChange) -> bool:
        """Write ``change(history, last_spoken)`` as the history (bounded) and its last spoken
        exchange, if nobody wrote in between (else read again: optimistic locking on
        ``history_version``, so no concurrent change is lost). ``change`` returning None: no
        write. False if the connection is gone or nothing was written."""
        for _ in range(HISTORY_WRITE_ATTEMPTS):
            record = self.get_connection(connection_id)
            if record is None:
                return False
            changed = change(record.history, record.last_spoken)
            if changed is None:
                return False
            history, spoken = bounded_history(changed[0]), changed[1]
            values = {
                ":history": _to_item_value(history),
                ":next": record.history_version + 1,
                ":seen": record.history_version,
            }
            update = "SET history = :history, history_version = :next"
            if spoken is not None:
                values[":spoken"] = _to_item_value(spoken.stored())
                update += ", last_spoken = :spoken"
            else:
                update += " REMOVE last_spoken"
            written = self._update(
                connection_id,
                CONNECTION,
                update,
                values,
                "history_version = :seen"
                if record.history_version
                else "attribute_not_exists(history_version) OR history_version = :seen",
            )
            if written is not None:
                return True
        raise HistoryConflict(connection_id)

    def turns(self, connection_id: str) -> list[dict[str, Any]]:
        response = self.client.query(
            TableName=self.table_name,
            KeyConditionExpression="pk = :pk AND begins_with(sk, :turn)",
            ExpressionAttributeValues=_values({":pk": connection_id, ":turn": TURN_PREFIX}),
            ConsistentRead=True,
        )
        return [_item(raw) or {} for raw in response["Items"]]


class TableConversation:
    """One connection's conversation in the session table: the ``ConversationState`` the
    rules (``functions.conversation.rules``) use on the WebSocket API's path."""

    def __init__(self, store: SessionStore, connection_id: str) -> None:
        self.store, self.connection_id = store, connection_id

    def read(self) -> ConversationView | None:
        record = self.store.get_connection(self.connection_id)
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
        return self.store.admit_turn(self.connection_id, limit, now)

    def start_turn(self, turn_id: str, mode: str, now: float) -> StartedTurn:
        record, replaced = self.store.start_turn(self.connection_id, turn_id, mode, now)
        return StartedTurn(turn_id, record.turn, record.status, replaced, record.audio)

    def cancel_turn(self, turn_id: str, heard_ms: float | None) -> bool:
        return self.store.cancel_turn(self.connection_id, turn_id, heard_ms)

    def heard_ms(self, turn_id: str) -> float | None:
        item = self.store.get_turn(self.connection_id, turn_id)
        given = item.get("heard_ms") if item else None
        return None if given is None else float(given)

    def change_history(self, change: HistoryChange) -> bool:
        return self.store.change_history(self.connection_id, change)
