"""The turns in DynamoDB (moto): numbered, race-free status changes, one worker's claim, and
the typed records callers read instead of the table's items."""

from __future__ import annotations

import time

import boto3
import pytest
from interleaving import Interleaving

from functions.adapters.connections import Connections
from functions.adapters.session_table import create_table
from functions.adapters.table_items import TableItems
from functions.adapters.turn_ledger import ClaimVerdict, TurnLedger, TurnRecord
from functions.conversation.state import ConversationClosed, DuplicateTurn
from voicewire.client_protocol import Timings


@pytest.fixture
def table(aws) -> TableItems:
    create_table(boto3.client("dynamodb"), "sessions")
    return TableItems(boto3.client("dynamodb"), "sessions")


@pytest.fixture
def connections(table) -> Connections:
    return Connections(table)


@pytest.fixture
def turns(table) -> TurnLedger:
    return TurnLedger(table)


def test_turns_are_numbered_and_a_new_one_replaces_the_active_one(connections, turns):
    connections.put("c1", "alice", "binary")
    first = turns.start("c1", "t1", "bidi")
    assert (first.turn, first.status, first.replaced, first.audio) == (1, "running", None, "binary")
    second = turns.start("c1", "t2", "batch")
    assert (second.turn, second.replaced) == (2, "t1")
    assert connections.get("c1").active_turn_id == "t2"
    assert connections.mark_gone("c1") == "t2"  # disconnect learns which turn to cancel


def test_a_turn_carries_its_connections_audio_delivery(connections, turns):
    connections.put("c1", "alice", "base64")
    assert turns.start("c1", "t1", "speak").audio == "base64"


def test_a_reused_turn_id_and_a_gone_connection_are_refused(connections, turns):
    connections.put("c1", "alice", "binary")
    turns.start("c1", "t1", "bidi")
    with pytest.raises(DuplicateTurn):
        turns.start("c1", "t1", "bidi")
    connections.mark_gone("c1")
    with pytest.raises(ConversationClosed):
        turns.start("c1", "t9", "bidi")
    assert turns.status("c1", "t9") == "failed"
    assert turns.get("c1", "t9").turn is None  # refused before it got a number
    with pytest.raises(ConversationClosed):
        turns.start("unknown", "t1", "bidi")


def test_cancel_happens_once_and_a_cancelled_turn_stays_cancelled(connections, turns):
    connections.put("c1", "alice", "binary")
    turns.start("c1", "t1", "bidi")
    assert turns.cancel("c1", "t1") is True
    assert turns.cancel("c1", "t1") is False
    final = turns.finish(
        "c1",
        "t1",
        "complete",
        Timings(first_audio_ms=812.5, total_ms=2000.0),
        {"audio_bytes": 96_000, "audio_frames": 10},
    )
    assert final == "cancelled"
    record = turns.get("c1", "t1")
    assert record.status == "cancelled" and record.audio_frames == 10
    assert record.timings.first_audio_ms == 812.5
    assert connections.get("c1").active_turn_id is None


def test_a_finished_turn_cannot_be_cancelled(connections, turns):
    connections.put("c1", "alice", "binary")
    turns.start("c1", "t1", "speak")
    assert turns.finish("c1", "t1", "complete", Timings(), {"audio_bytes": 1}) == "complete"
    assert turns.cancel("c1", "t1") is False
    assert turns.status("c1", "t1") == "complete"


# --- the typed records ------------------------------------------------------------------------


def test_an_unknown_turn_has_no_record(connections, turns):
    connections.put("c1", "alice", "binary")
    assert turns.get("c1", "never") is None
    assert turns.status("c1", "never") is None
    assert turns.of_connection("c1") == []


def test_a_turns_record_round_trips_through_the_table(connections, turns):
    connections.put("c1", "alice", "binary")
    turns.start("c1", "t1", "batch", now=1_800_000_000.25)
    started = turns.get("c1", "t1")
    assert started == TurnRecord(
        connection_id="c1",
        turn_id="t1",
        mode="batch",
        status="running",
        accepted_at=1_800_000_000.25,
        expires_at=started.expires_at,
        turn=1,
    )
    assert not started.end_recorded
    assert started.expires_at > 1_800_000_000 + 7200  # the TTL outlives the connection
    turns.claim("c1", "t1", "worker-a", 30, now=1_800_000_001.0)
    turns.cancel("c1", "t1", heard_ms=640.5)
    counts = {"audio_bytes": 9600, "audio_frames": 1, "frames": 4, "bytes_sent": 9800}
    timings = Timings(first_text_ms=120.0, first_audio_ms=400.5, total_ms=900.0)
    assert (
        turns.finish(
            "c1", "t1", "complete", timings, counts, "end_turn", "worker-a", "speech_failed"
        )
        == "cancelled"
    )
    ended = turns.get("c1", "t1")
    assert (ended.status, ended.turn, ended.mode, ended.heard_ms) == (
        "cancelled",
        1,
        "batch",
        640.5,
    )
    assert (ended.claimed_by, ended.claimed_at, ended.lease_until) == (
        "worker-a",
        1_800_000_001.0,
        1_800_000_031.0,
    )
    assert ended.timings == timings and ended.timings.first_sentence_ms is None
    assert (ended.audio_bytes, ended.audio_frames, ended.frames, ended.bytes_sent) == (
        9600,
        1,
        4,
        9800,
    )
    assert (ended.stop_reason, ended.error_code) == ("end_turn", "speech_failed")
    assert ended.end_recorded and ended.ended_at is not None
    assert turns.of_connection("c1") == [ended]


def test_the_turns_of_a_connection_are_its_own(connections, turns):
    connections.put("c1", "alice", "binary")
    connections.put("c2", "bob", "binary")
    turns.start("c1", "a", "bidi")
    turns.start("c1", "b", "speak")
    turns.start("c2", "z", "bidi")
    assert [(t.turn_id, t.turn, t.status) for t in turns.of_connection("c1")] == [
        ("a", 1, "running"),
        ("b", 2, "running"),
    ]
    assert [t.connection_id for t in turns.of_connection("c2")] == ["c2"]


def test_only_the_counts_a_record_reads_can_be_written(connections, turns):
    connections.put("c1", "alice", "binary")
    turns.start("c1", "t1", "speak")
    with pytest.raises(ValueError, match="not a turn count"):
        turns.finish("c1", "t1", "complete", Timings(), {"status": 1})
    assert turns.status("c1", "t1") == "running"


# --- races and retries (what the local stack hid) ---------------------------------------------


def test_a_turn_cancelled_while_it_is_recorded_stays_cancelled(table, connections):
    """A cancel (or a barge-in, or a $disconnect) handled between start's connection write and
    its last write: the turn must not come back to life as running."""
    connections.put("c1", "alice", "binary")
    plain = TurnLedger(table)
    racing = Interleaving(table.client, "turn_counter", then=lambda: plain.cancel("c1", "t1"))
    started = TurnLedger(TableItems(racing, table.table_name)).start("c1", "t1", "bidi")
    assert racing.fired == 1
    assert (started.status, started.turn, started.replaced) == ("cancelled", 1, None)
    assert plain.status("c1", "t1") == "cancelled"
    assert plain.get("c1", "t1").turn == 1  # it keeps its number


def test_a_disconnect_while_a_turn_is_recorded_cancels_it(table, connections):
    connections.put("c1", "alice", "binary")
    plain = TurnLedger(table)

    def disconnect():
        active = connections.mark_gone("c1")
        plain.cancel("c1", active)

    racing = Interleaving(table.client, "turn_counter", then=disconnect)
    started = TurnLedger(TableItems(racing, table.table_name)).start("c1", "t1", "bidi")
    assert started.status == "cancelled" and plain.status("c1", "t1") == "cancelled"


def test_only_one_worker_claims_a_turn(connections, turns):
    connections.put("c1", "alice", "binary")
    turns.start("c1", "t1", "bidi")
    assert turns.claim("c1", "t1", "worker-a", 30).verdict == ClaimVerdict.CLAIMED
    second = turns.claim("c1", "t1", "worker-b", 30)  # a duplicate delivery
    assert (second.verdict, second.claimed_by) == (ClaimVerdict.HELD, "worker-a")
    # Lambda's retry of worker-a's event (same request id): worker-a's attempt died.
    assert turns.claim("c1", "t1", "worker-a", 30).verdict == ClaimVerdict.ABANDONED
    assert turns.renew_claim("c1", "t1", "worker-a", 30) is True
    assert turns.renew_claim("c1", "t1", "worker-b", 30) is False
    # Only the claimant ends the turn.
    assert turns.finish("c1", "t1", "complete", Timings(), {}, claimant="worker-b") != ("complete")
    assert turns.status("c1", "t1") == "running"
    assert turns.finish("c1", "t1", "complete", Timings(), {}, claimant="worker-a") == ("complete")
    late = turns.claim("c1", "t1", "worker-c", 30)
    assert (late.verdict, late.status, late.end_recorded) == (ClaimVerdict.ENDED, "complete", True)
    assert turns.claim("c1", "never", "worker-c", 30).verdict == ClaimVerdict.UNKNOWN


def test_a_claim_whose_lease_expired_is_abandoned(connections, turns):
    connections.put("c1", "alice", "binary")
    turns.start("c1", "t1", "bidi")
    turns.claim("c1", "t1", "dead-worker", 30, now=time.time() - 120)
    abandoned = turns.claim("c1", "t1", "retry", 30)
    assert (abandoned.verdict, abandoned.claimed_by) == (ClaimVerdict.ABANDONED, "dead-worker")
    assert turns.fail("c1", "t1", "internal_error") is True
    assert turns.fail("c1", "t1", "internal_error") is False  # once
    assert turns.get("c1", "t1").error_code == "internal_error"
    assert connections.get("c1").active_turn_id is None


def test_a_turn_cancelled_before_any_worker_is_claimed_with_its_status(connections, turns):
    connections.put("c1", "alice", "binary")
    turns.start("c1", "t1", "bidi")
    turns.cancel("c1", "t1")
    claim = turns.claim("c1", "t1", "worker-a", 30)
    assert (claim.verdict, claim.status) == (ClaimVerdict.CLAIMED, "cancelled")
    ended = turns.claim("c1", "t1", "worker-b", 30)
    # Nobody recorded its end: the cancel alone ended it, and its worker must still tell.
    assert (ended.verdict, ended.end_recorded) == (ClaimVerdict.ENDED, False)
