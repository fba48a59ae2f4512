"""Word timings held against what a recognizer hears, and against the audio's own silences.

The recognizer (``voicewire_tools.bench.recognizer``: PocketSphinx, its model from PyPI) places
the words it hears on its own, 10 ms frames apart. For each word it heard that is also a word of
the text, ``recognizer_agreement`` asks whether the middle of what it heard lies inside the span
the timings give that written word, and, as chance would have it, inside the span of the word
the timings put before or after it (the timings moved by one word). Timings that follow the
voice are inside nearly always and shifted rarely; timings that drift are the other way round.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from voicewire_tools.bench.recognizer import RECOGNIZER_RATE, recognizer_segments

RECOGNIZER_FRAME_SECONDS = 0.01  # PocketSphinx's frames
# The recognizer places a word's frames on its own acoustic model: measured on Kokoro's audio,
# up to ~60 ms earlier than the audio's own onsets. A middle that near a span counts as inside.
RECOGNIZER_SLACK_SECONDS = 0.06


class TimedWordLike(Protocol):
    text: str
    start: int
    end: int


@dataclass(frozen=True)
class Agreement:
    """How many recognized words matched a written word, and of those, how many fell in its
    own span (``inside``) and in a neighbour's span instead (``shifted``)."""

    heard: int
    inside: int
    shifted: int

    @property
    def inside_share(self) -> float:
        return self.inside / self.heard if self.heard else 0.0

    @property
    def shifted_share(self) -> float:
        return self.shifted / self.heard if self.heard else 0.0


def normalized(word: str) -> str:
    return re.sub(r"[^a-z']", "", word.lower())


def recognizer_agreement(
    audio: NDArray[np.floating], words: Sequence[TimedWordLike], sample_rate: int = 24_000
) -> Agreement:
    """Recognized words against the timings' spans (samples at ``sample_rate``)."""
    scale = sample_rate * RECOGNIZER_FRAME_SECONDS
    heard = inside = shifted = 0
    texts = [normalized(word.text) for word in words]
    for said, first_frame, last_frame in recognizer_segments(audio, sample_rate):
        said = normalized(re.sub(r"\(\d+\)$", "", said))  # "the(2)": a pronunciation variant
        if not said or said not in texts:
            continue
        middle = (first_frame + last_frame + 1) / 2 * scale
        # The written word it is: the nearest one with that spelling.
        candidates = [i for i, text in enumerate(texts) if text == said]
        index = min(candidates, key=lambda i: abs((words[i].start + words[i].end) / 2 - middle))
        heard += 1
        slack = RECOGNIZER_SLACK_SECONDS * sample_rate
        if words[index].start - slack <= middle < words[index].end + slack:
            inside += 1
        neighbours = [words[i] for i in (index - 1, index + 1) if 0 <= i < len(words)]
        if any(word.start <= middle < word.end for word in neighbours):
            shifted += 1
    return Agreement(heard, inside, shifted)


__all__ = ["RECOGNIZER_RATE", "Agreement", "normalized", "recognizer_agreement"]
