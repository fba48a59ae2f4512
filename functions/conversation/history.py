"""What the conversation keeps for follow-up questions, and how a turn's exchange enters it.

The history is Bedrock's messages (``converse``'s ``messages``), bounded so that every turn's
prompt stays small and the connection record under DynamoDB's item limit. A turn's exchange is
its prompt and what the agent said after it (its tool calls and their results too, so the model
knows what it already did), as heard: a turn cut short keeps only the words the listener heard
(``functions.conversation.heard``). The exchange is remembered as spoken (``SpokenExchange``),
so that a client that says how much it heard only after the turn ended (bidi's audio arrives
faster than it plays) can still have it cut.

Pure functions over plain data: the Lambda path keeps the result in DynamoDB, the AgentCore app
in memory (``functions.conversation.state``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any, Protocol

from functions.conversation.heard import TurnWord, heard_messages

HISTORY_MESSAGES = 20  # user and assistant messages kept for follow-up questions
# The history's size in UTF-8 bytes of its texts: well under DynamoDB's 400 KB item limit, and
# a bounded prompt for the model (every byte of history is paid as input tokens on every turn).
HISTORY_MAX_BYTES = 48 * 1024
# What the assistant "says" after the tool results of a turn cut short, so the next user message
# does not follow a user message: roles must alternate, and some Bedrock models refuse tool
# results and text in one message ("Conversation blocks and tool result blocks cannot be
# provided in the same turn", the ValidationException Strands works around the same way,
# sdk-python models/bedrock.py, issue 1223).
INTERRUPTED = {"role": "assistant", "content": [{"text": "(I was interrupted before I answered.)"}]}


def closed(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` as a history may keep them: ending with the assistant's, ``INTERRUPTED``
    after the tool results of a turn cut short."""
    if messages and messages[-1].get("role") == "user":
        return [*messages, INTERRUPTED]
    return messages


def bounded_history(
    history: list[dict[str, Any]],
    max_messages: int = HISTORY_MESSAGES,
    max_bytes: int = HISTORY_MAX_BYTES,
) -> list[dict[str, Any]]:
    """The newest messages that fit both bounds, starting with a user message that answers no
    tool call (converse wants the conversation to open with the user, and every tool result
    after its call)."""
    kept: list[dict[str, Any]] = []
    size = 0
    for message in reversed(history):
        size += _message_bytes(message)
        if len(kept) == max_messages or size > max_bytes:
            break
        kept.append(message)
    kept.reverse()
    while kept and not _opens_a_conversation(kept[0]):
        kept.pop(0)
    return kept


def joined_history(
    history: list[dict[str, Any]], exchange: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """``exchange`` after ``history``, both closed, bounded: a turn cut short after its tool
    results ends with ``INTERRUPTED``, so roles alternate."""
    return bounded_history([*closed(history), *closed(exchange)])


def history_exchange(
    prompt: str, answer: str, messages: list[dict[str, Any]] | None
) -> list[dict[str, Any]]:
    """A question and its answer as the history keeps them: ``messages`` (the agent's after the
    prompt: its tool calls, their results, the answer) instead of ``answer`` alone when given,
    every text clipped so that one exchange never takes more than half the history's budget."""
    budget = HISTORY_MAX_BYTES // 2
    question = {"role": "user", "content": [{"text": _clipped(prompt, budget // 4)}]}
    if messages:
        share = budget // (2 * len(messages))
        return [question, *(_clipped_message(m, share) for m in messages)]
    answered = {"role": "assistant", "content": [{"text": _clipped(answer, budget // 2)}]}
    return [question, answered]


class SpokenAnswer(Protocol):
    """What the history needs of a finished ask turn (``functions.turn.TurnOutcome``)."""

    @property
    def status(self) -> str: ...

    @property
    def answer(self) -> str: ...

    @property
    def messages(self) -> list[dict[str, Any]]: ...

    @property
    def words(self) -> list[TurnWord]: ...


def kept_messages(outcome: SpokenAnswer, heard_ms: float | None) -> list[dict[str, Any]] | None:
    """What the history keeps of an ask's turn, after its prompt; None: nothing.

    A complete answer is kept with its tool calls. A cut one (``heard_ms`` given: a cancel, a
    barge-in) is kept as heard: its tool calls and results, each round's words heard, and a
    mark that the user interrupted (``functions.conversation.heard``). A failed one is kept only
    if it called tools, closed, so the model knows what it already did."""
    messages = outcome.messages
    if heard_ms is not None:
        messages = heard_messages(messages, outcome.words, heard_ms)
    called_tools = any("toolUse" in block for message in messages for block in message["content"])
    answered = outcome.status == "complete" and bool(outcome.answer.strip())
    if answered or called_tools or heard_ms is not None:
        return messages
    return None


@dataclass
class SpokenExchange:
    """The history's last exchange as the listener was sent it: its turn, its messages after
    the prompt (the last ``count`` of the history) and its words. A client that plays audio
    may say how much it heard after the turn ended (bidi's audio arrives faster than it plays);
    the cut is then made here. ``cut``: it was made already (once per turn)."""

    turn_id: str
    turn: int
    count: int
    words: list[TurnWord]
    cut: bool = False

    def names(self, turn_id: str | None, turn: int | None) -> bool:
        """Whether this is the exchange of the turn named by its id or its number."""
        return (turn_id is None or self.turn_id == turn_id) and (turn is None or self.turn == turn)

    def stored(self) -> dict[str, Any]:
        return {
            "turn_id": self.turn_id,
            "turn": self.turn,
            "count": self.count,
            "words": [word.stored() for word in self.words],
            "cut": self.cut,
        }

    @classmethod
    def from_stored(cls, item: dict[str, Any]) -> SpokenExchange:
        return cls(
            turn_id=str(item["turn_id"]),
            turn=int(item["turn"]),
            count=int(item["count"]),
            words=[TurnWord.from_stored(word) for word in item.get("words", [])],
            cut=bool(item["cut"]),
        )


def with_exchange(
    history: list[dict[str, Any]],
    prompt: str,
    outcome: SpokenAnswer,
    spoken: SpokenExchange,
    heard_ms: float | None,
) -> tuple[list[dict[str, Any]], SpokenExchange] | None:
    """``history`` with the turn's exchange after it, and the exchange as spoken (its
    ``count`` set); None when the turn leaves nothing to keep (``kept_messages``). A cut turn
    (``heard_ms`` given) is kept as heard and marked cut: a later ``heard_ms`` cuts nothing."""
    messages = kept_messages(outcome, heard_ms)
    if messages is None:
        return None
    exchange = history_exchange(prompt, outcome.answer, messages)
    spoken = replace(spoken, count=len(closed(exchange)) - 1, cut=heard_ms is not None)
    return joined_history(history, exchange), spoken


def cut_to_heard(
    history: list[dict[str, Any]], spoken: SpokenExchange, heard_ms: float
) -> list[dict[str, Any]] | None:
    """The history with its last exchange (``spoken``, not cut before) cut to the words heard
    in its first ``heard_ms`` of audio; None when nothing changes (heard to its end, or the
    history no longer holds the exchange)."""
    if all(word.filler or word.end_ms <= heard_ms for word in spoken.words):
        return None  # heard to its end: nothing to cut
    count = spoken.count
    if not count or len(history) <= count:
        return None
    kept, messages = history[:-count], history[-count:]
    return bounded_history([*kept, *heard_messages(messages, spoken.words, heard_ms)])


def _opens_a_conversation(message: dict[str, Any]) -> bool:
    """A user message that answers no tool call: where a kept history may begin (a tool result
    whose call was cut off would make Bedrock refuse the conversation)."""
    return message.get("role") == "user" and not any(
        "toolResult" in block for block in message.get("content", [])
    )


def _message_bytes(message: dict[str, Any]) -> int:
    return len(json.dumps(message, ensure_ascii=False).encode("utf-8"))


def _clipped_message(message: dict[str, Any], max_bytes: int) -> dict[str, Any]:
    """``message`` with each text clipped to ``max_bytes`` and a tool result over it replaced by
    its text, clipped (a tool's reply is bounded by design; this bounds a runaway one)."""
    content = []
    for block in message.get("content", []):
        if "text" in block:
            block = {"text": _clipped(block["text"], max_bytes)}
        elif "toolResult" in block and _message_bytes(block) > max_bytes:
            result = block["toolResult"]
            reply = json.dumps(result.get("content", []), ensure_ascii=False)
            result = {**result, "content": [{"text": _clipped(reply, max_bytes)}]}
            block = {"toolResult": result}
        content.append(block)
    return {**message, "content": content}


def _clipped(text: str, max_bytes: int) -> str:
    """``text`` cut to at most ``max_bytes`` of UTF-8, never inside a character."""
    return text.encode("utf-8")[:max_bytes].decode("utf-8", errors="ignore")
