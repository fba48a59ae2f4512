"""The conversation's rules (``functions.conversation.rules``) over both of its states: the
WebSocket API's, in DynamoDB (moto, through the real boto3 client), and the AgentCore app's, in
memory. One contract, run against each: whichever front door a person talks to, a turn starts,
is cut off and is remembered the same way."""

from __future__ import annotations

from dataclasses import dataclass, field

import boto3
import pytest

from functions.adapters.connections import Connections
from functions.adapters.conversation_table import TableConversation
from functions.adapters.session_table import create_table
from functions.adapters.table_items import TableItems
from functions.adapters.turn_ledger import TurnLedger
from functions.conversation import rules
from functions.conversation.heard import INTERRUPTED_MARK, Heard, TurnWord, heard_of
from functions.conversation.history import SpokenExchange
from functions.conversation.rate_window import RateWindow, admitted
from functions.conversation.state import ConversationClosed, DuplicateTurn, MemoryConversation
from voicewire.client_protocol import Timings

MINUTE = 60.0
T0 = 1_800_000_000.0  # a clock minute's start


@dataclass
class Answer:
    """What the history needs of a finished ask turn (``functions.turn.TurnOutcome``'s shape)."""

    status: str
    answer: str
    messages: list[dict] = field(default_factory=list)
    words: list[TurnWord] = field(default_factory=list)


def spoken_answer(text: str, status: str = "complete") -> Answer:
    """An answer whose words end 300 ms apart."""
    words = [TurnWord(word, (index + 1) * 300.0) for index, word in enumerate(text.split())]
    message = {"role": "assistant", "content": [{"text": text}]}
    return Answer(status, text, [message], words)


class Table:
    """The DynamoDB conversation, and how its turns end (the worker's ``TurnLedger.finish``)."""

    def __init__(self) -> None:
        create_table(boto3.client("dynamodb"), "sessions")
        table = TableItems(boto3.client("dynamodb"), "sessions")
        self.connections, self.turns = Connections(table), TurnLedger(table)
        self.connections.put("c1", "alice", "binary")
        self.state = TableConversation(self.connections, self.turns, "c1")

    def end(self, turn_id: str, status: str) -> str:
        return self.turns.finish("c1", turn_id, status, Timings(), {})  # type: ignore[arg-type]

    def close(self) -> None:
        self.connections.mark_gone("c1")


class Memory:
    def __init__(self) -> None:
        self.state = MemoryConversation()

    def end(self, turn_id: str, status: str) -> str:
        return self.state.end_turn(turn_id, status)  # type: ignore[arg-type]

    def close(self) -> None:
        self.state.closed = True


@pytest.fixture(params=["dynamodb", "memory"])
def conversation(request, aws):
    return Table() if request.param == "dynamodb" else Memory()


def start(conversation, turn_id: str, heard_ms: float | None = None, now: float = T0):
    return rules.start_turn(conversation.state, turn_id, "bidi", heard_ms, limit=3, now=now)


def finish(conversation, turn_id: str, turn: int, prompt: str, answer: Answer, heard=None):
    """A turn's end as both front doors end it: its exchange kept, then its end recorded."""
    spoken = SpokenExchange(turn_id, turn, 0, answer.words)
    rules.keep_exchange(conversation.state, prompt, answer, spoken, heard)
    return conversation.end(turn_id, answer.status)


def test_turns_are_numbered_and_a_turn_id_is_used_once(conversation):
    first = start(conversation, "a")
    assert first.verdict == rules.Admission.STARTED
    assert (first.turn.turn, first.turn.status, first.replaced) == (1, "running", None)
    assert conversation.state.read().active_turn_id == "a"
    with pytest.raises(DuplicateTurn):
        start(conversation, "a")
    assert start(conversation, "b").turn.turn == 2


def test_a_gone_conversation_starts_nothing(conversation):
    conversation.close()
    with pytest.raises(ConversationClosed):
        start(conversation, "a")
    assert conversation.state.read() is None or conversation.state.read().active_turn_id is None


@pytest.mark.parametrize(
    ("current", "now", "after"),
    [
        (None, T0, RateWindow(int(T0 // 60), 1)),
        (RateWindow(int(T0 // 60), 2), T0 + 59, RateWindow(int(T0 // 60), 3)),
        (RateWindow(int(T0 // 60), 3), T0 + 59, None),  # the limit (3) reached this minute
        (RateWindow(int(T0 // 60), 3), T0 + MINUTE, RateWindow(int(T0 // 60) + 1, 1)),
    ],
)
def test_the_rate_window_is_the_clock_minute(current, now, after):
    assert admitted(current, now, limit=3) == after


def test_the_rate_limit_refuses_the_fourth_turn_of_a_minute_and_changes_nothing(conversation):
    for number, turn_id in enumerate("abc", start=1):
        assert start(conversation, turn_id, now=T0 + number).verdict == rules.Admission.STARTED
    refused = start(conversation, "d", now=T0 + 30)
    assert refused == rules.TurnAdmission(rules.Admission.OVER_LIMIT)
    view = conversation.state.read()
    assert (view.active_turn_id, view.turn_counter) == ("c", 3)
    assert start(conversation, "d", now=T0 + MINUTE).verdict == rules.Admission.STARTED


def test_a_new_turn_cancels_the_running_one_with_what_was_heard(conversation):
    start(conversation, "a")
    barge_in = start(conversation, "b", heard_ms=700)
    assert barge_in.replaced == "a" and barge_in.turn.turn == 2
    assert conversation.state.heard_ms("a") == 700
    # The cut turn's answer is kept as heard: two words of three, marked interrupted.
    heard = heard_of(conversation.state.heard_ms("a"), audio_ms=900, estimate_ms=0)
    assert heard == Heard(700, "client")
    assert finish(conversation, "a", 1, "Tell me", spoken_answer("one two three"), heard) == (
        "cancelled"
    )
    (_, kept) = conversation.state.read().history
    assert kept["content"][0]["text"] == f"one two {INTERRUPTED_MARK}"
    assert conversation.state.read().active_turn_id == "b"


def test_a_cancel_stops_the_running_turn_or_names_an_unknown_one(conversation):
    assert rules.cancel(conversation.state, None, None).verdict == rules.CancelVerdict.UNKNOWN_TURN
    start(conversation, "a")
    other = rules.cancel(conversation.state, "zzz", None)
    assert other.verdict == rules.CancelVerdict.UNKNOWN_TURN
    cancelled = rules.cancel(conversation.state, "a", 250)
    assert (cancelled.verdict, cancelled.turn_id) == (rules.CancelVerdict.CANCELLED, "a")
    assert conversation.state.heard_ms("a") == 250
    assert conversation.end("a", "complete") == "cancelled"  # the cancel has the last word


def test_heard_ms_after_the_turn_ended_cuts_its_exchange_once(conversation):
    start(conversation, "a")
    finish(conversation, "a", 1, "Tell me", spoken_answer("one two three four"))
    (_, whole) = conversation.state.read().history
    assert whole["content"][0]["text"] == "one two three four"
    # The audio still played at the client when the turn ended there: its cancel says so.
    assert rules.cancel(conversation.state, None, 650).verdict == rules.CancelVerdict.CUT
    view = conversation.state.read()
    assert view.history[-1]["content"][0]["text"] == f"one two {INTERRUPTED_MARK}"
    assert view.last_spoken.cut
    # At most once: a second heard_ms cuts nothing, and names no running turn.
    assert rules.cancel(conversation.state, None, 100).verdict == rules.CancelVerdict.UNKNOWN_TURN
    assert conversation.state.read().history == view.history


def test_heard_ms_with_the_next_turn_cuts_the_turn_before(conversation):
    start(conversation, "a")
    finish(conversation, "a", 1, "Tell me", spoken_answer("one two three four"))
    admission = start(conversation, "b", heard_ms=350)
    assert admission.replaced is None  # nothing ran: nothing cancelled
    assert conversation.state.read().history[-1]["content"][0]["text"] == (
        f"one {INTERRUPTED_MARK}"
    )


def test_an_answer_heard_to_its_end_is_marked_so_a_later_cut_does_nothing(conversation):
    start(conversation, "a")
    finish(conversation, "a", 1, "Tell me", spoken_answer("one two"))
    assert rules.cut_heard(conversation.state, 5000, turn_id="a")
    view = conversation.state.read()
    assert view.last_spoken.cut and view.history[-1]["content"][0]["text"] == "one two"
    assert not rules.cut_heard(conversation.state, 100, turn_id="a")
    assert conversation.state.read().history == view.history


def test_a_cut_names_its_turn(conversation):
    start(conversation, "a")
    finish(conversation, "a", 1, "Tell me", spoken_answer("one two three"))
    assert not rules.cut_heard(conversation.state, 300, turn_id="b")
    assert not rules.cut_heard(conversation.state, 300, turn=2)
    assert rules.cut_heard(conversation.state, 300, turn=1)


def test_a_failed_answer_without_tools_leaves_nothing(conversation):
    start(conversation, "a")
    finish(conversation, "a", 1, "Tell me", Answer("failed", "half an", []))
    assert conversation.state.read().history == []
    start(conversation, "b")
    finish(conversation, "b", 2, "Again", spoken_answer("Here it is."))
    assert [m["role"] for m in conversation.state.read().history] == ["user", "assistant"]


def test_a_turn_nothing_could_start_for_fails_once_and_stops_being_active(conversation):
    start(conversation, "a")
    assert conversation.state.fail_turn("a", "worker_unavailable")
    assert conversation.state.read().active_turn_id is None
    assert not conversation.state.fail_turn("a", "worker_unavailable")  # it had ended
    start(conversation, "b")
    rules.cancel(conversation.state, "b", None)
    assert not conversation.state.fail_turn("b", "worker_unavailable")  # cancelled stays so
    assert conversation.end("b", "complete") == "cancelled"
