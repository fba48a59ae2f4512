"""A connection's history in DynamoDB (moto): bounded, in Converse format, appended by
concurrent writers without losing any. The rules over it: ``test_conversation_state.py``."""

from __future__ import annotations

import json
import threading

import boto3
import pytest

from functions.adapters.connections import Connections
from functions.adapters.conversation_table import (
    HISTORY_WRITE_ATTEMPTS,
    HistoryConflict,
    TableConversation,
)
from functions.adapters.session_table import create_table
from functions.adapters.table_items import TableItems
from functions.adapters.turn_ledger import TurnLedger
from functions.conversation.history import (
    HISTORY_MAX_BYTES,
    HISTORY_MESSAGES,
    INTERRUPTED,
    bounded_history,
    history_exchange,
    joined_history,
)


@pytest.fixture
def table(aws) -> TableItems:
    create_table(boto3.client("dynamodb"), "sessions")
    return TableItems(boto3.client("dynamodb"), "sessions")


@pytest.fixture
def connections(table) -> Connections:
    connections = Connections(table)
    connections.put("c1", "alice", "binary")
    return connections


@pytest.fixture
def conversation(table, connections) -> TableConversation:
    return TableConversation(connections, TurnLedger(table), "c1")


def append_exchange(
    conversation: TableConversation, prompt: str, answer: str, messages=None
) -> bool:
    """An exchange after the history, through the conversation's read-modify-write."""
    exchange = history_exchange(prompt, answer, messages)
    return conversation.change_history(
        lambda history, spoken: (joined_history(history, exchange), spoken)
    )


def test_history_is_bounded_and_in_converse_format(connections, conversation):
    for number in range(15):
        append_exchange(conversation, f"question {number}", f"answer {number}")
    history = connections.get("c1").history
    assert len(history) == HISTORY_MESSAGES
    assert history[0] == {"role": "user", "content": [{"text": "question 5"}]}
    assert history[-1] == {"role": "assistant", "content": [{"text": "answer 14"}]}


def test_concurrent_history_appends_lose_nothing(connections, conversation):
    writers = 8
    barrier = threading.Barrier(writers)

    def append(number: int) -> None:
        barrier.wait()
        append_exchange(conversation, f"question {number}", f"answer {number}")

    threads = [threading.Thread(target=append, args=(n,)) for n in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    history = connections.get("c1").history
    questions = sorted(m["content"][0]["text"] for m in history if m["role"] == "user")
    assert questions == sorted(f"question {n}" for n in range(writers))
    assert [m["role"] for m in history] == ["user", "assistant"] * writers
    assert connections.get("c1").history_version == writers


def test_a_history_that_keeps_changing_under_the_writer_is_a_conflict(connections, conversation):
    """Another writer wins every attempt: the change is not made, and says so."""

    def change(history, spoken):
        # Another writer's change lands between this read and this write, every time.
        append_exchange(TableConversation(connections, conversation.turns, "c1"), "q", "a")
        return [*history, {"role": "user", "content": [{"text": "lost"}]}], spoken

    with pytest.raises(HistoryConflict):
        conversation.change_history(change)
    record = connections.get("c1")
    assert record.history_version == HISTORY_WRITE_ATTEMPTS
    assert all(m["content"][0]["text"] != "lost" for m in record.history)


def test_a_gone_connection_or_no_change_writes_nothing(table, connections, conversation):
    assert conversation.change_history(lambda history, spoken: None) is False
    assert connections.get("c1").history_version == 0
    gone = TableConversation(connections, TurnLedger(table), "never-seen")
    assert gone.read() is None
    assert append_exchange(gone, "q", "a") is False


def test_history_is_bounded_in_bytes(connections, conversation):
    long_answer = "word " * 6000  # 30 KB: more than one exchange may take
    for number in range(6):
        append_exchange(conversation, f"question {number}", long_answer)
    history = connections.get("c1").history
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


def test_a_tool_turn_is_kept_whole_and_its_numbers_come_back_as_json(connections, conversation):
    append_exchange(conversation, "Convert 2.5", "Let me check. It is 2.72.", tool_turn("t1"))
    history = connections.get("c1").history
    assert history == [{"role": "user", "content": [{"text": "Convert 2.5"}]}, *tool_turn("t1")]
    json.dumps(history)  # what botocore does with a request: no Decimal left


def test_a_cut_turn_ending_with_its_results_is_closed_by_the_assistant(connections, conversation):
    cut = tool_turn("t1", "error")[:2]
    append_exchange(conversation, "Convert 2.5", "Let me check.", cut)
    append_exchange(conversation, "Never mind. Hi!", "Hi!")
    history = connections.get("c1").history
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
