"""A TEST DOUBLE of ``speech_recognizer.Recognizer``: it hears a fixed list of words.

The local Transcribe endpoint's tests of its protocol and timing run on this double (the real
recognizer, offline Whisper, has tests of its own, being as slow as the machine): faithful to the
protocol and nothing more, it
counts the samples it is fed (at the stream's sample rate) and "hears" word ``i`` once the audio
reaches that word's end (``i + 1`` times ``seconds_per_word``), so its partial hypotheses grow
as audio arrives, carry times derived from the audio, and turn final once every word was heard
(or at ``finish`` with what was heard). The audio's content is ignored: it is the only thing
this double fakes.

``fail_on_feed``: raise on that call of ``feed`` (1-based), to test a recognizer that fails.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from voicewire_tools.local_stack.speech_recognizer import Hypothesis, Word


@dataclass
class FixedWordsSession:
    words: tuple[str, ...]
    seconds_per_word: float
    sample_rate: int
    language_code: str
    fail_on_feed: int | None = None
    samples: int = 0
    feeds: int = 0
    heard: int = 0  # words heard so far
    final: bool = False
    closed: bool = False

    def feed(self, pcm: bytes) -> Sequence[Hypothesis]:
        assert not self.closed, "fed after close"
        assert len(pcm) % 2 == 0, "the endpoint feeds whole 16-bit samples"
        self.feeds += 1
        if self.fail_on_feed == self.feeds:
            raise RuntimeError("the recognizer double was told to fail here")
        self.samples += len(pcm) // 2
        if self.final:
            return []
        heard = min(len(self.words), int(self.seconds() / self.seconds_per_word + 1e-9))
        if heard == self.heard:
            return []
        self.heard = heard
        self.final = heard == len(self.words)
        return [self._hypothesis()]

    def finish(self) -> Sequence[Hypothesis]:
        assert not self.closed, "finished after close"
        if self.final or self.heard == 0:
            return []
        self.final = True
        return [self._hypothesis()]

    def close(self) -> None:
        self.closed = True

    def seconds(self) -> float:
        return self.samples / self.sample_rate

    def _hypothesis(self) -> Hypothesis:
        spoken = tuple(
            Word(
                text,
                start=index * self.seconds_per_word + 0.05,
                end=(index + 1) * self.seconds_per_word,
            )
            for index, text in enumerate(self.words[: self.heard])
        )
        # Every word but the newest is promised not to change (for stabilization).
        return Hypothesis(
            segment=0, words=spoken, final=self.final, stable_words=max(0, self.heard - 1)
        )


@dataclass
class FixedWordsRecognizer:
    words: tuple[str, ...] = ("What", "time", "is", "it", "in", "Paris?")
    seconds_per_word: float = 0.3
    languages: frozenset[str] = frozenset({"en-US", "en-GB"})
    fail_on_feed: int | None = None
    sessions: list[FixedWordsSession] = field(default_factory=list)

    def open(self, *, language_code: str, sample_rate: int) -> FixedWordsSession:
        assert language_code in self.languages
        session = FixedWordsSession(
            self.words, self.seconds_per_word, sample_rate, language_code, self.fail_on_feed
        )
        self.sessions.append(session)
        return session
