"""What the listener heard of an interrupted answer, and the history that keeps only that.

A turn's audio reaches the listener word by word; a cancel or a barge-in says (``heard_ms``) or
lets the worker estimate how far it played. The agent must then remember only the words heard,
else its next answer builds on things the listener never heard ("as I said...") or skips what
they missed. Pipecat and LiveKit do the same: the assistant message is what was played, marked
interrupted (Pipecat commits the text whose audio played, ``llm_response_universal.py``;
LiveKit Agents keeps the transcript up to the playback position with ``interrupted=True``).

The cut keeps the shape of the turn's messages, so the history stays one Bedrock accepts: each
assistant message keeps its tool calls (every ``toolUse`` still answered by its ``toolResult``),
and its text becomes the words heard of its round; the last assistant message ends with
``INTERRUPTED_MARK``, a sentence the model reads as what happened (an assistant message of
words alone would read as a finished answer, and the model would not offer to go on).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from voicewire.client_protocol import RememberedMessage

# Appended to the heard words of a cut answer. Bracketed and in plain words: the model reads it
# as a note on the conversation, not as something it said, and can continue or repeat from there.
INTERRUPTED_MARK = "[interrupted by the user: they heard only up to here]"
# The whole text of a cut answer when no word of it was heard.
NOTHING_HEARD = "[interrupted by the user before they heard any of this answer]"
# What ``history.INTERRUPTED`` closes a cut tool round with (issue 27), also shown as
# interrupted.
_EARLIER_MARKS = ("(I was interrupted before I answered.)",)


@dataclass(frozen=True)
class TurnWord:
    """A word the turn spoke: its text, its end in ms from the start of the turn's audio, the
    round of the answer it belongs to (0 until the first round of tool calls has ended; each
    round is one assistant message), and whether it was a filler ("One moment."), which the
    model never wrote."""

    text: str
    end_ms: float
    round: int = 0
    filler: bool = False

    def stored(self) -> list[Any]:
        """Compact, for the connection record (a long answer has hundreds of words)."""
        return [self.text, self.end_ms, self.round, self.filler]

    @classmethod
    def from_stored(cls, value: list[Any]) -> TurnWord:
        text, end_ms, round_, filler = value
        return cls(str(text), float(end_ms), int(round_), bool(filler))


def heard_words(words: list[TurnWord], heard_ms: float) -> list[TurnWord]:
    """The words the listener heard whole: those that end by ``heard_ms``, fillers left out."""
    return [word for word in words if not word.filler and word.end_ms <= heard_ms]


def heard_messages(
    messages: list[dict[str, Any]], words: list[TurnWord], heard_ms: float
) -> list[dict[str, Any]]:
    """The turn's messages after the prompt (assistant and tool-result messages, in order; the
    answer being written when the turn was cut is not among them) cut to what was heard, and
    closed by an assistant message that says the user interrupted."""
    by_round: dict[int, list[str]] = {}
    for word in heard_words(words, heard_ms):
        by_round.setdefault(word.round, []).append(word.text)
    kept: list[dict[str, Any]] = []
    assistant_round = 0
    for message in messages:
        if message.get("role") != "assistant":
            kept.append(message)
            continue
        heard = by_round.pop(assistant_round, [])
        assistant_round += 1
        others = [block for block in message.get("content", []) if "text" not in block]
        text = [{"text": " ".join(heard)}] if heard else []
        kept.append({**message, "content": text + others})
    # Words of a round with no message yet: the answer the model was still writing.
    unwritten = [text for round_ in sorted(by_round) for text in by_round[round_]]
    any_heard = bool(heard_words(words, heard_ms))
    if kept and kept[-1]["role"] == "assistant" and not unwritten:
        last = kept[-1]
        texts = [block["text"] for block in last["content"] if "text" in block]
        others = [block for block in last["content"] if "text" not in block]
        said = " ".join([*texts, INTERRUPTED_MARK if any_heard else NOTHING_HEARD])
        kept[-1] = {**last, "content": [{"text": said}, *others]}
    else:
        said = " ".join([*unwritten, INTERRUPTED_MARK]) if any_heard else NOTHING_HEARD
        if kept and kept[-1]["role"] == "assistant":  # its text is followed by the unwritten
            last = kept[-1]
            texts = [block["text"] for block in last["content"] if "text" in block]
            others = [block for block in last["content"] if "text" not in block]
            kept[-1] = {**last, "content": [{"text": " ".join([*texts, said])}, *others]}
        else:
            kept.append({"role": "assistant", "content": [{"text": said}]})
    return kept


def remembered(history: list[dict[str, Any]]) -> list[RememberedMessage]:
    """The history as a person reads it: the user's prompts and the assistant's words, tool
    calls and results left out, an exchange's assistant messages joined; a cut answer marked
    interrupted, with only the words heard."""
    out: list[RememberedMessage] = []
    for message in history:
        role = message.get("role")
        texts = [block["text"] for block in message.get("content", []) if "text" in block]
        if role not in ("user", "assistant") or not texts:
            continue  # tool results, or a tool call with nothing said before it
        text = " ".join(texts)
        interrupted = False
        for mark in (INTERRUPTED_MARK, NOTHING_HEARD, *_EARLIER_MARKS):
            if text.endswith(mark):
                text, interrupted = text.removesuffix(mark).rstrip(), True
        if out and out[-1].role == role == "assistant":
            joined = " ".join(part for part in (out[-1].text, text) if part)
            out[-1] = RememberedMessage(
                role="assistant", text=joined, interrupted=out[-1].interrupted or interrupted
            )
            continue
        out.append(RememberedMessage(role=role, text=text, interrupted=interrupted))  # type: ignore[arg-type]
    return out


@dataclass(frozen=True)
class Heard:
    """How much of a cut turn's audio the listener heard, in ms, and who says so: ``client``
    (the cancel's or the barge-in's ``heard_ms``) or ``estimate`` (the turn's own)."""

    ms: float
    source: str


def heard_of(given_ms: float | None, audio_ms: float, estimate_ms: float) -> Heard:
    """What the client said it heard, never more than the audio the turn sent; else the turn's
    estimate (``estimated_heard_ms``)."""
    if given_ms is not None:
        return Heard(min(float(given_ms), audio_ms), "client")
    return Heard(estimate_ms, "estimate")


def estimated_heard_ms(seconds_since_first_audio: float | None, audio_ms: float) -> float:
    """Without the client's word: it has played at most since the first audio frame was posted,
    and never more than the audio it was sent."""
    if seconds_since_first_audio is None:
        return 0.0
    return round(min(max(0.0, seconds_since_first_audio * 1000), audio_ms), 1)
