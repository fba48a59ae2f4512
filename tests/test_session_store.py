"""Session state in DynamoDB (moto): connections, turns, race-free status changes, history."""

from __future__ import annotations

import boto3
import pytest

from functions.adapters.session_store import (
    HISTORY_MESSAGES,
    ConnectionClosed,
    DuplicateTurn,
    SessionStore,
)
from functions.adapters.session_table import create_table
from voicewire.client_protocol import Timings


@pytest.fixture
def store(aws) -> SessionStore:
    create_table(boto3.client("dynamodb"), "sessions")
    return SessionStore(boto3.resource("dynamodb").Table("sessions"))


def test_connections_are_recorded_and_marked_gone(store):
    store.put_connection("c1", "alice", "base64", now=1000.0)
    record = store.get_connection("c1")
    assert (record.principal, record.audio, record.status, record.turn_counter) == (
        "alice", "base64", "open", 0,
    )  # fmt: skip
    item = store.table.get_item(Key={"pk": "c1", "sk": "connection"})["Item"]
    assert item["expires_at"] > 1000 + 7200  # the TTL outlives API Gateway's 2 h limit
    assert store.mark_gone("c1") is None
    assert store.get_connection("c1").status == "gone"
    assert store.mark_gone("never-seen") is None


def test_turns_are_numbered_and_a_new_one_replaces_the_active_one(store):
    store.put_connection("c1", "alice", "binary")
    first, replaced = store.start_turn("c1", "t1", "bidi")
    assert (first.turn, first.status, replaced) == (1, "running", None)
    second, replaced = store.start_turn("c1", "t2", "batch")
    assert (second.turn, replaced) == (2, "t1")
    assert store.get_connection("c1").active_turn_id == "t2"
    assert store.mark_gone("c1") == "t2"  # disconnect learns which turn to cancel


def test_a_reused_turn_id_and_a_gone_connection_are_refused(store):
    store.put_connection("c1", "alice", "binary")
    store.start_turn("c1", "t1", "bidi")
    with pytest.raises(DuplicateTurn):
        store.start_turn("c1", "t1", "bidi")
    store.mark_gone("c1")
    with pytest.raises(ConnectionClosed):
        store.start_turn("c1", "t9", "bidi")
    assert store.turn_status("c1", "t9") == "failed"
    with pytest.raises(ConnectionClosed):
        store.start_turn("unknown", "t1", "bidi")


def test_cancel_happens_once_and_a_cancelled_turn_stays_cancelled(store):
    store.put_connection("c1", "alice", "binary")
    store.start_turn("c1", "t1", "bidi")
    assert store.cancel_turn("c1", "t1") is True
    assert store.cancel_turn("c1", "t1") is False
    final = store.finish_turn(
        "c1", "t1", "complete", Timings(first_audio_ms=812.5, total_ms=2000.0),
        {"audio_bytes": 96_000, "audio_frames": 10},
    )  # fmt: skip
    assert final == "cancelled"
    item = store.get_turn("c1", "t1")
    assert item["status"] == "cancelled" and item["audio_frames"] == 10
    assert float(item["timings"]["first_audio_ms"]) == 812.5
    assert store.get_connection("c1").active_turn_id is None


def test_a_finished_turn_cannot_be_cancelled(store):
    store.put_connection("c1", "alice", "binary")
    store.start_turn("c1", "t1", "speak")
    assert store.finish_turn("c1", "t1", "complete", Timings(), {"audio_bytes": 1}) == "complete"
    assert store.cancel_turn("c1", "t1") is False
    assert store.turn_status("c1", "t1") == "complete"


def test_history_is_bounded_and_in_converse_format(store):
    store.put_connection("c1", "alice", "binary")
    for number in range(15):
        store.append_history("c1", f"question {number}", f"answer {number}")
    history = store.get_connection("c1").history
    assert len(history) == HISTORY_MESSAGES
    assert history[0] == {"role": "user", "content": [{"text": "question 5"}]}
    assert history[-1] == {"role": "assistant", "content": [{"text": "answer 14"}]}
