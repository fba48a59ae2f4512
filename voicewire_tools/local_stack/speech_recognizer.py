"""What the local Transcribe endpoint needs from a speech recognizer, and how its hypotheses
become Transcribe's results.

The endpoint (``transcribe_streaming``) speaks Transcribe's protocol; what it hears comes from a
``Recognizer`` behind it. The protocol is small so that an offline recognizer (the next step of
issue 42: one chosen by measured word error rate and speed on this CPU) plugs in without the
endpoint changing:

- ``Recognizer.open(language_code=..., sample_rate=...)`` starts one stream's
  ``RecognizerSession`` (the recognizer resamples if it needs another rate);
- ``session.feed(pcm)`` takes the next signed 16-bit little-endian mono samples and returns the
  hypotheses that changed: for each segment (an utterance, numbered from 0), the words heard so
  far with their start and end times in seconds from the stream's first sample, ``final`` once
  the segment will not change again;
- ``session.finish()`` is the end of the audio: the final hypothesis of every open segment;
- ``session.close()`` releases the session, whether or not it finished (a stream that failed).

The calls are synchronous: a recognizer is CPU work, and the endpoint runs each call in a
worker thread, one at a time per stream, in the order the audio came.

``TranscriptResults`` turns hypotheses into Transcribe's ``Result``: one ``ResultId`` per
segment, repeated by every partial result and by the final one (``IsPartial`` false); the
transcript is the words joined by spaces; each word is a ``pronunciation`` item and a trailing
punctuation mark (``Paris?``) a ``punctuation`` item of its own, timed at the end of its word, as
Transcribe's streaming output lays punctuation out. With partial-results stabilization, the
items of the words the recognizer promises not to change (``stable_words``) say ``Stable: true``,
the others ``false``, and every item of a final result is stable; a recognizer that breaks a
promise (changes a stable word, updates a final segment) is a ``RecognizerProtocolError``.
"""

from __future__ import annotations

import re
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from voicewire.speech_in.transcribe_events import Alternative, Item, Result

_TRAILING_PUNCTUATION = re.compile(r"^(?P<word>.*?[^.,?!;:])(?P<marks>[.,?!;:]+)$")
_ONLY_PUNCTUATION = re.compile(r"^[.,?!;:]+$")
TIME_DECIMALS = 3  # Transcribe's times are seconds with at most millisecond precision


@dataclass(frozen=True)
class Word:
    """A recognized word as written (a trailing punctuation mark included: ``Paris?``), and
    when it was spoken, in seconds from the stream's first sample."""

    text: str
    start: float
    end: float
    confidence: float | None = None


@dataclass(frozen=True)
class Hypothesis:
    """What a recognizer currently hears in one segment. ``stable_words``: how many leading
    words it promises not to change any more (used by partial-results stabilization)."""

    segment: int
    words: tuple[Word, ...]
    final: bool
    stable_words: int = 0


class RecognizerSession(Protocol):
    """One stream's recognition (see the module's docstring)."""

    def feed(self, pcm: bytes) -> Sequence[Hypothesis]: ...

    def finish(self) -> Sequence[Hypothesis]: ...

    def close(self) -> None: ...


class Recognizer(Protocol):
    """A speech recognizer the local Transcribe endpoint can stream to."""

    @property
    def languages(self) -> frozenset[str]:
        """The Transcribe language codes it transcribes (``en-US``, ...)."""
        ...

    def open(self, *, language_code: str, sample_rate: int) -> RecognizerSession: ...


class RecognizerProtocolError(RuntimeError):
    """A recognizer returned something the protocol rules out (the message says what)."""


@dataclass
class _Segment:
    result_id: str
    stable: tuple[str, ...] = ()  # the words promised so far
    final: bool = False
    last: Result | None = None


class TranscriptResults:
    """Transcribe's results for one stream's hypotheses (see the module's docstring)."""

    def __init__(
        self,
        *,
        stabilize: bool = False,
        new_result_id: Callable[[], str] = lambda: str(uuid.uuid4()),
    ) -> None:
        self.stabilize = stabilize
        self._new_result_id = new_result_id
        self._segments: dict[int, _Segment] = {}

    def result(self, hypothesis: Hypothesis) -> Result | None:
        """The result to send for ``hypothesis``, or None when there is nothing to say (a
        segment with no words yet). Raises ``RecognizerProtocolError``."""
        _check(hypothesis)
        segment = self._segments.get(hypothesis.segment)
        if segment is None:
            if not hypothesis.words:
                return None
            segment = self._segments[hypothesis.segment] = _Segment(self._new_result_id())
        if segment.final:
            raise RecognizerProtocolError(
                f"segment {hypothesis.segment} was already final; a new utterance needs a new "
                "segment number"
            )
        texts = tuple(word.text for word in hypothesis.words)
        if texts[: len(segment.stable)] != segment.stable:
            raise RecognizerProtocolError(
                f"segment {hypothesis.segment} changed words it had said were stable: "
                f"{' '.join(segment.stable)!r} became {' '.join(texts)!r}"
            )
        segment.stable = texts[: max(hypothesis.stable_words, len(segment.stable))]
        segment.final = hypothesis.final
        if not hypothesis.words:
            # A final with no words after partials (the speech was noise): the result still
            # ends, empty, so that a client waiting for IsPartial false is told.
            if segment.last is None:
                return None
            result = segment.last.model_copy(
                update={
                    "is_partial": not hypothesis.final,
                    "alternatives": (Alternative(transcript="", items=()),),
                }
            )
        else:
            result = Result(
                result_id=segment.result_id,
                start_time=_seconds(hypothesis.words[0].start),
                end_time=_seconds(hypothesis.words[-1].end),
                is_partial=not hypothesis.final,
                alternatives=(
                    Alternative(
                        transcript=" ".join(texts),
                        items=tuple(self._items(hypothesis, len(segment.stable))),
                    ),
                ),
            )
        segment.last = result
        return result

    def _items(self, hypothesis: Hypothesis, stable_words: int) -> list[Item]:
        items: list[Item] = []
        for index, word in enumerate(hypothesis.words):
            stable = (hypothesis.final or index < stable_words) if self.stabilize else None
            start, end = _seconds(word.start), _seconds(word.end)
            if _ONLY_PUNCTUATION.fullmatch(word.text):
                spoken, marks = "", word.text
            else:
                match = _TRAILING_PUNCTUATION.fullmatch(word.text)
                spoken, marks = (match["word"], match["marks"]) if match else (word.text, "")
            if spoken:
                items.append(
                    Item(
                        start_time=start,
                        end_time=end,
                        type="pronunciation",
                        content=spoken,
                        stable=stable,
                        confidence=word.confidence,
                    )
                )
            for mark in marks:
                items.append(
                    Item(
                        start_time=end,
                        end_time=end,
                        type="punctuation",
                        content=mark,
                        stable=stable,
                    )
                )
        return items


def _check(hypothesis: Hypothesis) -> None:
    previous_start = 0.0
    for word in hypothesis.words:
        if not word.text or word.text != word.text.strip() or " " in word.text:
            raise RecognizerProtocolError(f"a word is one non-empty token, not {word.text!r}")
        if not 0 <= word.start <= word.end:
            raise RecognizerProtocolError(
                f"{word.text!r} has times {word.start}..{word.end}: they must satisfy "
                "0 <= start <= end (seconds from the stream's start)"
            )
        if word.start < previous_start:
            raise RecognizerProtocolError(
                f"{word.text!r} starts at {word.start}, before the word ahead of it "
                f"({previous_start}): words come in the order spoken"
            )
        previous_start = word.start
    if not 0 <= hypothesis.stable_words <= len(hypothesis.words):
        raise RecognizerProtocolError(
            f"stable_words is {hypothesis.stable_words} for {len(hypothesis.words)} words"
        )


def _seconds(value: float) -> float:
    return round(float(value), TIME_DECIMALS)


class RecognizerInBackground:
    """A recognizer loaded on a thread of its own, so that a stack starts without waiting for
    it: the first stream waits for the load instead (by then, usually, long done). A load that
    failed fails every stream that needs it, with the load's error. ``languages``: what the
    loaded recognizer will transcribe, known before it is (a stream's URL is checked first)."""

    def __init__(
        self,
        load: Callable[[], Recognizer],
        languages: frozenset[str],
        name: str = "recognizer-load",
    ) -> None:
        self.languages = languages
        self._loaded: Recognizer | None = None
        self._error: BaseException | None = None
        self._done = threading.Event()
        self._loading = threading.Thread(target=self._load, args=(load,), name=name, daemon=True)
        self._loading.start()

    def _load(self, load: Callable[[], Recognizer]) -> None:
        try:
            self._loaded = load()
        except BaseException as error:  # kept for the streams that need it
            self._error = error
        finally:
            self._done.set()

    def settle(self, timeout: float = 60.0) -> bool:
        """Wait (at most ``timeout`` seconds) for a load under way to end; whether it did.

        A stack stopping calls this before its process exits: a process that exits while the
        load is inside CTranslate2's model constructor, whose worker threads are being made,
        dies with "terminate called without an active exception" (SIGABRT) instead of exiting
        0 (seen when ``voicewire up`` was stopped a moment after it started)."""
        self._loading.join(timeout)
        return not self._loading.is_alive()

    def wait(self, timeout: float | None = None) -> Recognizer:
        if not self._done.wait(timeout):
            raise TimeoutError("the recognizer is still loading")
        if self._error is not None:
            raise RecognizerProtocolError(f"the recognizer failed to load: {self._error}")
        assert self._loaded is not None
        return self._loaded

    def open(self, *, language_code: str, sample_rate: int) -> RecognizerSession:
        return self.wait().open(language_code=language_code, sample_rate=sample_rate)
