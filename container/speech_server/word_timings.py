"""When each written word of a chunk is spoken, from the model's own duration predictor.

Kokoro predicts how many 25 ms units (600 samples at 24 kHz, ``speed`` already applied) each
phoneme token lasts, and its audio is exactly those units laid end to end: the duration
predictor's output *is* the alignment, no recognizer needed (hexgrad's ``kokoro``,
``KModel.forward``'s ``pred_dur``; checked here against both engines' audio). Both engines get
those durations (the ONNX engine from the split graph's text side, the torch engine from
``pred_dur``); this module turns them into words.

Two steps:

- **phoneme runs**: the tokens between spaces and punctuation marks, each with the samples its
  phonemes span (``phoneme_runs``);
- **written words**: espeak-ng and misaki say some written words as several (``$29.99``:
  "twenty-nine dollars and ninety-nine cents", ``v1.2.3``, a date) and some marks as words
  (``&``). Each whitespace-separated word of the chunk is phonemized alone to count its runs;
  the counts, laid along the runs in order, give each written word its span (``spoken_words``).
  Phonemized in context a word can come out with another count (rarely: a liaison, a number
  read with its neighbour): then the words are aligned to the runs by the similarity of their
  phonemes instead (``_aligned``), which costs more but never loses a word.

Why our own code: Kokoro's own ``join_timestamps`` (hexgrad/kokoro ``pipeline.py``) is
English-only, works in seconds with an offset marked TODO upstream, and exists only in the torch
pipeline; kokoro-onnx's ``create_timed`` needs a graph with a ``duration`` output, which the int8
v1.0 file this project assembles does not have.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Container, Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

SAMPLES_PER_DURATION = 600  # one duration unit: 25 ms at 24 kHz
# A word's end is pulled back to its last sample louder than this (the synthesis layer's own
# silence threshold), plus END_PAD_SAMPLES: see ``ended_by_audio``.
LOUD = 0.01
END_PAD_SAMPLES = 360  # 15 ms, as the synthesis layer keeps after a chunk's last loud sample
# Quiet this long at the end of what is known of a word means its pause has begun: longer than
# a stop consonant's closure (~100 ms), shorter than the pause Kokoro folds into a phrase's end.
QUIET_TAIL_SAMPLES = 3600  # 150 ms
# Kokoro's punctuation marks and its space (kokoro-onnx's DEFAULT_VOCAB ids 1-16): what ends a
# run. The same characters in a phoneme string, for engines that give phonemes, not ids.
BOUNDARY_TOKENS = frozenset(range(1, 17))
BOUNDARY_CHARACTERS = frozenset(';:,.!?—…"()“” ')


@dataclass(frozen=True)
class SpokenWord:
    """A written word and the samples it is spoken in, ``[start, end)``: from the start of the
    audio it belongs to (an engine's chunk, then a request's stream, as each layer shifts it)."""

    text: str
    start: int
    end: int
    # Where its last run of phonemes begins, when known: the pause Kokoro folds into a phrase's
    # end lies after it, and a word spoken as several runs ("$29.99": "twenty-nine dollars and
    # ninety-nine cents") has pauses of its own before it (``ended_by_audio``).
    last_run_start: int | None = field(default=None, compare=False)

    def shifted(self, by: int, limit: int | None = None) -> SpokenWord:
        """Moved ``by`` samples, and kept within ``[0, limit]`` (the audio that was kept)."""
        start, end = self.start + by, self.end + by
        last = None if self.last_run_start is None else self.last_run_start + by
        if limit is not None:
            start, end = min(start, limit), min(end, limit)
            last = None if last is None else min(last, limit)
        return SpokenWord(
            self.text, max(0, start), max(0, end), None if last is None else max(0, last)
        )


@dataclass(frozen=True)
class PhonemeRun:
    """The phonemes between two boundaries, and the samples they are spoken in."""

    phonemes: str
    start: int
    end: int


def fed_phonemes(phonemes: str, vocabulary: Container[str]) -> str:
    """The phonemes the model was fed: its tokenizer drops any character outside its
    vocabulary, and the durations come one per token fed."""
    return "".join(character for character in phonemes if character in vocabulary)


def runs_of(phonemes: str) -> list[str]:
    """A phoneme string's runs, as text: what ``phoneme_runs`` times, without the times."""
    runs, current = [], ""
    for character in phonemes:
        if character in BOUNDARY_CHARACTERS:
            if current:
                runs.append(current)
            current = ""
        else:
            current += character
    if current:
        runs.append(current)
    return runs


def phoneme_runs(phonemes: str, durations: Sequence[int], *, offset: int = 0) -> list[PhonemeRun]:
    """The runs of ``phonemes`` (one character per token, as the model was fed) with their
    samples, from ``durations``: one per token *plus the two boundary pads* the model adds, in
    25 ms units. ``offset``: samples of audio before this batch (a chunk over 510 phonemes is
    several batches, their audio laid end to end)."""
    if len(durations) != len(phonemes) + 2:
        raise ValueError(
            f"{len(durations)} durations for {len(phonemes)} phoneme tokens and 2 pads"
        )
    runs: list[PhonemeRun] = []
    at = offset + int(durations[0]) * SAMPLES_PER_DURATION  # after the leading pad
    run_start, current = at, ""
    for character, units in zip(phonemes, durations[1:-1], strict=True):
        length = int(units) * SAMPLES_PER_DURATION
        if character in BOUNDARY_CHARACTERS:
            if current:
                runs.append(PhonemeRun(current, run_start, at))
            current = ""
            run_start = at + length
        else:
            if not current:
                run_start = at
            current += character
        at += length
    if current:
        runs.append(PhonemeRun(current, run_start, at))
    return runs


@dataclass(frozen=True)
class WordRuns:
    """A written word and the runs it is spoken as: ``runs[first:stop]`` (none: not spoken)."""

    text: str
    first: int
    stop: int


def words_over_runs(
    written: Sequence[str], run_texts: Sequence[str], phonemize_word: Callable[[str], str]
) -> list[WordRuns]:
    """Which runs each written word is spoken as; every run belongs to exactly one word.

    Each word is phonemized alone and its runs counted; when the counts add up to the runs the
    chunk was spoken with, they are laid along them in order. Otherwise (a word phonemized
    differently in context) the words take the runs whose phonemes match theirs best."""
    return words_over_runs_phonemized(
        written, [phonemize_word(word) for word in written], run_texts
    )


def words_over_runs_phonemized(
    written: Sequence[str], word_phonemes: Sequence[str], run_texts: Sequence[str]
) -> list[WordRuns]:
    """``words_over_runs`` with each written word's phonemes already known (a G2P that gives
    them per token, as misaki does in context, needs no second pass word by word)."""
    alone = [runs_of(phonemes) for phonemes in word_phonemes]
    counts = [len(word_runs) for word_runs in alone]
    if sum(counts) != len(run_texts):
        return _aligned(written, alone, counts, run_texts)
    plan, at = [], 0
    for word, count in zip(written, counts, strict=True):
        plan.append(WordRuns(word, at, at + count))
        at += count
    return plan


class WordTimer:
    """Times a chunk's words as its batches' durations arrive: the runs are planned from the
    phonemes at once, their samples known batch by batch (the ONNX engine's text side runs per
    510-phoneme batch, just before that batch's audio)."""

    def __init__(self, plan: Sequence[WordRuns]) -> None:
        self._plan = [word for word in plan if word.stop > word.first]  # the spoken ones
        self._runs: list[PhonemeRun] = []
        self._told = 0

    @classmethod
    def for_chunk(
        cls, text: str, batches: Sequence[str], phonemize_word: Callable[[str], str]
    ) -> WordTimer:
        """A timer for ``text`` spoken as ``batches`` (the phonemes fed to the model, batch by
        batch); ``phonemize_word`` gives one written word's phonemes alone, as fed."""
        runs = [run for batch in batches for run in runs_of(batch)]
        return cls(words_over_runs(written_words(text), runs, phonemize_word))

    @classmethod
    def for_phonemized_words(
        cls, written: Sequence[str], word_phonemes: Sequence[str], batches: Sequence[str]
    ) -> WordTimer:
        """A timer for ``written`` words whose phonemes (as fed) are known word by word."""
        runs = [run for batch in batches for run in runs_of(batch)]
        return cls(words_over_runs_phonemized(written, word_phonemes, runs))

    def add_batch(
        self, phonemes: str, durations: Sequence[int], offset: int = 0
    ) -> list[SpokenWord]:
        """Time a batch from its durations (``phoneme_runs``); the words now timed whole."""
        return self.add(phoneme_runs(phonemes, durations, offset=offset))

    def add(self, runs: Sequence[PhonemeRun]) -> list[SpokenWord]:
        """Take a batch's timed runs; the words now timed whole (in order, each once)."""
        self._runs.extend(runs)
        words = []
        while self._told < len(self._plan) and self._plan[self._told].stop <= len(self._runs):
            word = self._plan[self._told]
            last = self._runs[word.stop - 1]
            words.append(SpokenWord(word.text, self._runs[word.first].start, last.end, last.start))
            self._told += 1
        return words


def ended_by_audio(
    words: Sequence[SpokenWord], audio: NDArray[np.float32], offset: int = 0
) -> list[SpokenWord]:
    """The words with each end moved back to where its audio falls quiet: ``audio`` starts at
    sample ``offset`` of the words' count and covers what is known of the chunk so far.

    Kokoro gives a phrase's last phoneme the pause after it (measured: "noon." 300 ms past
    its last loud sample, the silence after a sentence inside its last word), so without this a
    word heard to its end would not be counted heard until the pause had played too. A word
    whose span runs past the known audio is moved only when the known part already ends in
    ``QUIET_TAIL_SAMPLES`` of quiet inside its last run of phonemes (its pause has begun); else
    it keeps the predicted end. A quiet before its last run is a pause inside the word ("$29.99"
    between "dollars" and "ninety-nine": ended there, it measured 0.9 s short)."""
    moved = []
    for word in words:
        span = audio[max(0, word.start - offset) : max(0, word.end - offset)]
        loud = np.flatnonzero(np.abs(span) > LOUD)
        end = word.end
        whole = word.end - offset <= len(audio)
        if loud.size and (whole or _pause_begun(word, span, int(loud[-1]))):
            end = min(word.end, word.start + int(loud[-1]) + 1 + END_PAD_SAMPLES)
        moved.append(SpokenWord(word.text, word.start, end, word.last_run_start))
    return moved


def _pause_begun(word: SpokenWord, known: NDArray[np.float32], last_loud: int) -> bool:
    """Whether the known part of ``word`` (``known``, from its start) ends in the pause after
    it: quiet for ``QUIET_TAIL_SAMPLES`` since its last loud sample, that sample in its last run."""
    quiet = len(known) - last_loud - 1 >= QUIET_TAIL_SAMPLES
    in_last_run = word.last_run_start is None or word.start + last_loud >= word.last_run_start
    return quiet and in_last_run


def written_words(text: str) -> list[str]:
    """A chunk's words as written: what the timings name, in order."""
    return text.split()


# The alignment's search: a word is spoken as at most this many runs ("$1,234.56" is 8), and
# lies at most this many runs from where the counts alone would put it.
MOST_RUNS_PER_WORD = 8
BAND_RUNS = 6


def _aligned(
    written: Sequence[str],
    alone: Sequence[list[str]],
    counts: Sequence[int],
    run_texts: Sequence[str],
) -> list[WordRuns]:
    """Each written word takes the consecutive runs (0 to ``MOST_RUNS_PER_WORD``) whose
    phonemes best match its own phonemized alone; the runs in order, all of them used (dynamic
    programming, within ``BAND_RUNS`` of where the counts put each word)."""
    n, m = len(written), len(run_texts)
    inf = float("inf")
    expected_at = [0]
    for count in counts:
        expected_at.append(expected_at[-1] + count)
    scale = m / expected_at[-1] if expected_at[-1] else 0.0
    # best[i][j]: the cost of the first i words over the first j runs; taken[i][j]: how many.
    best = [[inf] * (m + 1) for _ in range(n + 1)]
    taken = [[0] * (m + 1) for _ in range(n + 1)]
    best[0][0] = 0.0
    for i in range(1, n + 1):
        expected = "".join(alone[i - 1])
        centre = round(expected_at[i] * scale)
        low, high = (0, m) if i == n else (max(0, centre - BAND_RUNS), min(m, centre + BAND_RUNS))
        for j in range(low, high + 1):
            for k in range(min(MOST_RUNS_PER_WORD, j) + 1):
                before = best[i - 1][j - k]
                if before == inf:
                    continue
                heard = "".join(run_texts[j - k : j])
                similarity = (
                    1.0
                    if expected == heard
                    else difflib.SequenceMatcher(None, expected, heard).ratio()
                )
                if before + 1.0 - similarity < best[i][j]:
                    best[i][j], taken[i][j] = before + 1.0 - similarity, k
    if best[n][m] == inf:  # no alignment within the band: the whole chunk as one "word"
        return [WordRuns(" ".join(written), 0, m)] if written and m else []
    plan: list[WordRuns] = []
    j = m
    for i in range(n, 0, -1):
        k = taken[i][j]
        plan.append(WordRuns(written[i - 1], j - k, j))
        j -= k
    return plan[::-1]
