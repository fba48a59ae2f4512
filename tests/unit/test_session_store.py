"""Session state in DynamoDB (moto): connections, turns, race-free status changes, history."""

from __future__ import annotations

import json
import threading
import time

import boto3
import pytest
from interleaving import Interleaving

from functions.adapters.session_store import (
    ClaimVerdict,
    ConnectionClosed,
    DuplicateTurn,
    SessionStore,
)
from functions.adapters.session_table import create_table
from functions.conversation.history import (
    HISTORY_MAX_BYTES,
    HISTORY_MESSAGES,
    INTERRUPTED,
    bounded_history,
    history_exchange,
    joined_history,
)
from voicewire.client_protocol import Timings


def append_exchange(
    store: SessionStore, connection_id: str, prompt: str, answer: str, messages=None
) -> bool:
    """An exchange after the history, through the store's read-modify-write."""
    exchange = history_exchange(prompt, answer, messages)
    return store.change_history(
        connection_id, lambda history, spoken: (joined_history(history, exchange), spoken)
    )


@pytest.fixture
def store(aws) -> SessionStore:
    create_table(boto3.client("dynamodb"), "sessions")
    return SessionStore(boto3.client("dynamodb"), "sessions")


def test_connections_are_recorded_and_marked_gone(store):
    store.put_connection("c1", "alice", "base64", now=1000.0)
    record = store.get_connection("c1")
    assert (record.principal, record.audio, record.status, record.turn_counter) == (
        "alice",
        "base64",
        "open",
        0,
    )
    item = (
        boto3.resource("dynamodb")
        .Table("sessions")
        .get_item(Key={"pk": "c1", "sk": "connection"})["Item"]
    )
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
        "c1",
        "t1",
        "complete",
        Timings(first_audio_ms=812.5, total_ms=2000.0),
        {"audio_bytes": 96_000, "audio_frames": 10},
    )
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
        append_exchange(store, "c1", f"question {number}", f"answer {number}")
    history = store.get_connection("c1").history
    assert len(history) == HISTORY_MESSAGES
    assert history[0] == {"role": "user", "content": [{"text": "question 5"}]}
    assert history[-1] == {"role": "assistant", "content": [{"text": "answer 14"}]}


# --- races and retries (what the local stack hid) ---------------------------------------------


def test_a_turn_cancelled_while_it_is_recorded_stays_cancelled(store):
    """A cancel (or a barge-in, or a $disconnect) handled between start_turn's connection write
    and its last write: the turn must not come back to life as running."""
    store.put_connection("c1", "alice", "binary")
    plain = SessionStore(store.client, store.table_name)
    store.client = Interleaving(
        store.client, "turn_counter", then=lambda: plain.cancel_turn("c1", "t1")
    )
    record, replaced = store.start_turn("c1", "t1", "bidi")
    assert store.client.fired == 1
    assert (record.status, record.turn, replaced) == ("cancelled", 1, None)
    assert plain.turn_status("c1", "t1") == "cancelled"


def test_a_disconnect_while_a_turn_is_recorded_cancels_it(store):
    store.put_connection("c1", "alice", "binary")
    plain = SessionStore(store.client, store.table_name)

    def disconnect():
        active = plain.mark_gone("c1")
        plain.cancel_turn("c1", active)

    store.client = Interleaving(store.client, "turn_counter", then=disconnect)
    record, _ = store.start_turn("c1", "t1", "bidi")
    assert record.status == "cancelled" and plain.turn_status("c1", "t1") == "cancelled"


def test_only_one_worker_claims_a_turn(store):
    store.put_connection("c1", "alice", "binary")
    store.start_turn("c1", "t1", "bidi")
    assert store.claim_turn("c1", "t1", "worker-a", 30).verdict == ClaimVerdict.CLAIMED
    second = store.claim_turn("c1", "t1", "worker-b", 30)  # a duplicate delivery
    assert (second.verdict, second.claimed_by) == (ClaimVerdict.HELD, "worker-a")
    # Lambda's retry of worker-a's event (same request id): worker-a's attempt died.
    assert store.claim_turn("c1", "t1", "worker-a", 30).verdict == ClaimVerdict.ABANDONED
    assert store.renew_claim("c1", "t1", "worker-a", 30) is True
    assert store.renew_claim("c1", "t1", "worker-b", 30) is False
    # Only the claimant ends the turn.
    assert store.finish_turn("c1", "t1", "complete", Timings(), {}, claimant="worker-b") != (
        "complete"
    )
    assert store.turn_status("c1", "t1") == "running"
    assert store.finish_turn("c1", "t1", "complete", Timings(), {}, claimant="worker-a") == (
        "complete"
    )
    late = store.claim_turn("c1", "t1", "worker-c", 30)
    assert (late.verdict, late.status) == (ClaimVerdict.ENDED, "complete")
    assert store.claim_turn("c1", "never", "worker-c", 30).verdict == ClaimVerdict.UNKNOWN


def test_a_claim_whose_lease_expired_is_abandoned(store):
    store.put_connection("c1", "alice", "binary")
    store.start_turn("c1", "t1", "bidi")
    store.claim_turn("c1", "t1", "dead-worker", 30, now=time.time() - 120)
    abandoned = store.claim_turn("c1", "t1", "retry", 30)
    assert (abandoned.verdict, abandoned.claimed_by) == (ClaimVerdict.ABANDONED, "dead-worker")
    assert store.fail_turn("c1", "t1", "internal_error") is True
    assert store.fail_turn("c1", "t1", "internal_error") is False  # once
    assert store.get_turn("c1", "t1")["error_code"] == "internal_error"
    assert store.get_connection("c1").active_turn_id is None


def test_a_turn_cancelled_before_any_worker_is_claimed_with_its_status(store):
    store.put_connection("c1", "alice", "binary")
    store.start_turn("c1", "t1", "bidi")
    store.cancel_turn("c1", "t1")
    claim = store.claim_turn("c1", "t1", "worker-a", 30)
    assert (claim.verdict, claim.status) == (ClaimVerdict.CLAIMED, "cancelled")
    assert store.claim_turn("c1", "t1", "worker-b", 30).verdict == ClaimVerdict.ENDED


def test_concurrent_history_appends_lose_nothing(store):
    store.put_connection("c1", "alice", "binary")
    writers = 8
    barrier = threading.Barrier(writers)

    def append(number: int) -> None:
        barrier.wait()
        append_exchange(store, "c1", f"question {number}", f"answer {number}")

    threads = [threading.Thread(target=append, args=(n,)) for n in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    history = store.get_connection("c1").history
    questions = sorted(m["content"][0]["text"] for m in history if m["role"] == "user")
    assert questions == sorted(f"question {n}" for n in range(writers))
    assert [m["role"] for m in history] == ["user", "assistant"] * writers
    assert store.get_connection("c1").history_version == writers


def test_history_is_bounded_in_bytes(store):
    store.put_connection("c1", "alice", "binary")
    long_answer = "word " * 6000  # 30 KB: more than one exchange may take
    for number in range(6):
        append_exchange(store, "c1", f"question {number}", long_answer)
    history = store.get_connection("c1").history
    size = sum(len(json.dumps(m, ensure_ascii=False).encode()) for m in history)
    assert size <= HISTORY_MAX_BYTES
    assert history[0]["role"] == "user" and history[-1]["role"] == "assistant"
    assert history[-2]["content"][0]["text"] == "question 5"  # the newest exchange is kept
    assert bounded_history(history) == history


def tool_turn(call_id: str, status: str = "success") -> list[dict]:
    """A tool turn's messages after the prompt: the call, its result (with a float, which
    DynamoDB stores only as a number of its own), the answer."""
    return [
        {
            "role": "assistant",
            "content": [
                {"text": "Let me check."},
                {"toolUse": {"toolUseId": call_id, "name": "convert", "input": {"amount": 2.5}}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "toolResult": {
                        "toolUseId": call_id,
                        "content": [{"json": {"rate": 1.0875, "count": 3}}],
                        "status": status,
                    }
                }
            ],
        },
        {"role": "assistant", "content": [{"text": "It is 2.72."}]},
    ]


def test_a_tool_turn_is_kept_whole_and_its_numbers_come_back_as_json(store):
    store.put_connection("c1", "alice", "binary")
    append_exchange(store, "c1", "Convert 2.5", "Let me check. It is 2.72.", tool_turn("t1"))
    history = store.get_connection("c1").history
    assert history == [{"role": "user", "content": [{"text": "Convert 2.5"}]}, *tool_turn("t1")]
    json.dumps(history)  # what botocore does with a request: no Decimal left


def test_a_cut_turn_ending_with_its_results_is_closed_by_the_assistant(store):
    store.put_connection("c1", "alice", "binary")
    cut = tool_turn("t1", "error")[:2]
    append_exchange(store, "c1", "Convert 2.5", "Let me check.", cut)
    append_exchange(store, "c1", "Never mind. Hi!", "Hi!")
    history = store.get_connection("c1").history
    assert [m["role"] for m in history] == [
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
        "assistant",
    ]
    assert history[3] == INTERRUPTED
    assert history[4]["content"] == [{"text": "Never mind. Hi!"}]


def test_a_bounded_history_never_opens_with_a_tool_result():
    question = {"role": "user", "content": [{"text": "q"}]}
    messages = [question, *tool_turn("t1"), question, *tool_turn("t2")]
    for size in range(1, len(messages) + 1):
        kept = bounded_history(messages, max_messages=size)
        if kept:
            assert kept[0] == question
