"""An open speech recognizer for the benchmarks: how many words a listener's machine recovers.

PocketSphinx, because its wheel on PyPI carries its US English model: nothing is fetched from a
model hub. It is a weak recognizer (it mishears clean synthetic speech) and a jumpy one (-60 dB
of noise changes words), so the benchmarks never ask for identical transcripts. They count word
errors against the text over a set, next to the same count for the reference audio with
inaudible noise added: the recognizer's own jitter.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

import numpy as np
from numpy.typing import NDArray

RECOGNIZER_RATE = 16_000  # the bundled model's sample rate


@cache
def _decoder() -> Any:
    from pocketsphinx import Decoder

    return Decoder(samprate=RECOGNIZER_RATE, loglevel="FATAL")


def transcribe(audio: NDArray[np.floating], sample_rate: int) -> str:
    """The recognizer's words for ``audio`` (float in [-1, 1])."""
    decoder = _decoded(audio, sample_rate)
    hypothesis = decoder.hyp()
    return hypothesis.hypstr if hypothesis else ""


def recognizer_segments(
    audio: NDArray[np.floating], sample_rate: int
) -> list[tuple[str, int, int]]:
    """The words the recognizer heard, each with its first and last 10 ms frame (silences and
    fillers left out)."""
    decoder = _decoded(audio, sample_rate)
    return [
        (segment.word, segment.start_frame, segment.end_frame)
        for segment in decoder.seg()
        if not segment.word.startswith(("<", "[")) and segment.word != "<sil>"
    ]


def _decoded(audio: NDArray[np.floating], sample_rate: int) -> Any:
    count = int(len(audio) * RECOGNIZER_RATE / sample_rate)
    # Linear interpolation is enough for a recognizer: speech above 8 kHz carries no words.
    resampled = np.interp(
        np.linspace(0, len(audio) - 1, count), np.arange(len(audio)), np.asarray(audio)
    )
    pcm = (np.clip(resampled, -1.0, 1.0) * 32767).astype("<i2").tobytes()
    decoder = _decoder()
    decoder.start_utt()
    decoder.process_raw(pcm, full_utt=True)
    decoder.end_utt()
    return decoder


def words(text: str) -> list[str]:
    return re.findall(r"[a-z']+", text.lower())


def word_errors(reference: str, hypothesis: str) -> int:
    """Substitutions, insertions and deletions between the two word sequences (Levenshtein)."""
    expected, heard = words(reference), words(hypothesis)
    previous = list(range(len(heard) + 1))
    for i, word in enumerate(expected, 1):
        current = [i]
        for j, other in enumerate(heard, 1):
            current.append(
                min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (word != other))
            )
        previous = current
    return previous[-1]
