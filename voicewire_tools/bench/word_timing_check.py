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


QUIET = 0.01  # the synthesis layer's silence threshold


def quiet_spans(
    audio: NDArray[np.floating], sample_rate: int = 24_000, at_least: float = 0.12
) -> list[tuple[int, int]]:
    """Spans of at least ``at_least`` seconds in which no sample is louder than ``QUIET``: the
    audio's own silences, measured on the PCM."""
    loud = np.append(np.abs(np.asarray(audio)) > QUIET, True)
    spans, start = [], None
    for index in np.flatnonzero(np.diff(np.concatenate([[True], loud]).astype(np.int8))):
        if not loud[index]:
            start = int(index)
        elif start is not None:
            if index - start >= at_least * sample_rate:
                spans.append((start, int(index)))
            start = None
    return spans


@dataclass(frozen=True)
class BoundaryErrors:
    """At each silence between two words: how far the first word's end and the next word's
    start fall from the silence's edges (samples), and the last word's end from the audio's."""

    ends: list[int]
    starts: list[int]
    last_end: int
    end_words: list[int]  # the index of the word each of ``ends`` is


def boundary_errors(
    audio: NDArray[np.floating], words: Sequence[TimedWordLike], sample_rate: int = 24_000
) -> BoundaryErrors:
    ends, starts, end_words = [], [], []
    for gap_start, gap_end in quiet_spans(audio, sample_rate):
        if any(word.start < gap_start and word.end > gap_end for word in words):
            continue  # a pause inside one written word ("$29.99": "twenty-nine. ninety-nine")
        before = [word for word in words if word.start < gap_start]
        after = [word for word in words if word.start >= gap_start]
        if before and after:
            ends.append(before[-1].end - gap_start)
            end_words.append(len(before) - 1)
            starts.append(after[0].start - gap_end)
    loud = np.flatnonzero(np.abs(np.asarray(audio)) > QUIET)
    last_end = words[-1].end - int(loud[-1]) if len(words) and loud.size else 0
    return BoundaryErrors(ends, starts, last_end, end_words)


__all__ = [
    "RECOGNIZER_RATE",
    "Agreement",
    "BoundaryErrors",
    "boundary_errors",
    "normalized",
    "quiet_spans",
    "recognizer_agreement",
]
