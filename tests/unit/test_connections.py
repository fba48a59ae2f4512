"""The connection item and the connect tickets in DynamoDB (moto)."""

from __future__ import annotations

import boto3
import pytest

from functions.adapters.connect_tickets import TICKET_RECORD_SLACK_SECONDS, ConnectTickets
from functions.adapters.connections import Connections
from functions.adapters.session_table import create_table
from functions.adapters.table_items import TableItems


@pytest.fixture
def table(aws) -> TableItems:
    create_table(boto3.client("dynamodb"), "sessions")
    return TableItems(boto3.client("dynamodb"), "sessions")


def stored(partition: str, sort: str) -> dict:
    """The item as DynamoDB holds it, read past the adapters."""
    table = boto3.resource("dynamodb").Table("sessions")
    return table.get_item(Key={"pk": partition, "sk": sort})["Item"]


def test_connections_are_recorded_and_marked_gone(table):
    connections = Connections(table)
    connections.put("c1", "alice", "base64", now=1000.0)
    record = connections.get("c1")
    assert (record.principal, record.audio, record.status, record.turn_counter) == (
        "alice",
        "base64",
        "open",
        0,
    )
    assert (record.active_turn_id, record.history, record.history_version) == (None, [], 0)
    assert record.last_spoken is None
    item = stored("c1", "connection")
    assert item["expires_at"] > 1000 + 7200  # the TTL outlives API Gateway's 2 h limit
    assert connections.mark_gone("c1") is None
    assert connections.get("c1").status == "gone"
    assert connections.mark_gone("never-seen") is None
    assert connections.get("never-seen") is None


def test_a_connect_ticket_is_used_once(table):
    tickets = ConnectTickets(table)
    assert tickets.use("jti-1", expires_at=2000.5) is True
    assert tickets.use("jti-1", expires_at=2000.5) is False  # a replay
    assert tickets.use("jti-2", expires_at=2000.5) is True
    # It lives as long as the ticket could still pass, then DynamoDB's TTL removes it.
    assert stored("ticket#jti-1", "ticket")["expires_at"] == 2000 + TICKET_RECORD_SLACK_SECONDS
