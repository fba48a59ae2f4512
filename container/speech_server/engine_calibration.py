"""The vocoder's cost model from timed rounds: pure functions of the timings, tested without a
model (``tests/unit/test_engine_calibration.py``). ``speech_server.engine_tuning`` times the
rounds on this machine's candidate graphs and keeps what ``calibrate`` returns in its record.

Each round decodes the calibration sentence's ``window_sizes`` (its first
``SHORT_WINDOW_FRAMES`` frames, half the sentence, the whole of it); a least-squares line
through each size's fastest time (``fit_line``) gives the cost per frame and per call. The
rounds go on until two successive lines agree (``agree``) and the times show no noise
(``noise_in``), at least ``MIN_ROUNDS`` and at most ``MAX_ROUNDS``; a line no machine can have
(``implausible``) is never kept: the record then gets ``safe_line``, which predicts no window
faster than it was measured.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple

import numpy as np

logger = logging.getLogger(__name__)

SHORT_WINDOW_FRAMES = 64
# Rounds after the warm-up one. Three at least: the first two lines compared then rest on two
# and three rounds (version 2 took the medians of three). Eight at most: on 2 busy cores a
# round of both graphs takes ~5 s.
MIN_ROUNDS = 3
MAX_ROUNDS = 8
# Two successive lines agree when their predictions for the short window and for the whole
# sentence are this close (measured on a quiet AMD EPYC, 2 cores: successive rounds moved by
# 1-3%; a whole decode differs by up to 30% between two processes, which no number of rounds in
# one process removes, and which the window plan's 1.5x margin covers).
SETTLED_WITHIN = 0.05
# A line that misses one of its windows' times by more than this was fitted on a time still
# caught by a slow stretch (a straight line through this AMD EPYC's slightly convex curve missed
# its short window by 8-9% at most).
FIT_WITHIN = 0.15
# What a call costs at least, whatever the line says: onnxruntime's run and its allocations
# (a 4-frame decode cost 8-10 ms more than its frames on this AMD EPYC, 2026-12-04). A line
# under it is implausible; the safe line charges at least DEFAULT_VOCODER_SPEED's 5 ms.
MIN_PER_CALL_MS = 1.0
SAFE_PER_CALL_MS = 5.0

# "line": the least-squares line, settled and plausible; "safe": ``safe_line`` (see the module).
FitKind = Literal["line", "safe"]


class RoundTimes(NamedTuple):
    """One candidate's timings in one round (seconds): its text side, and a decode of each
    window size (frames from the sentence's start)."""

    text: float
    windows: Mapping[int, float]


@dataclass(frozen=True)
class VocoderLine:
    """A vocoder's cost model: milliseconds a call plus milliseconds a frame."""

    per_call_ms: float
    per_frame_ms: float

    def ms(self, frames: int) -> float:
        return self.per_call_ms + self.per_frame_ms * frames


@dataclass(frozen=True)
class Calibrated:
    """One candidate's measurement: its times over the rounds, and the line the record keeps."""

    text_ms: float
    windows_ms: Mapping[int, float]  # each window size's fastest
    line: VocoderLine
    fit: FitKind
    rounds: int
    reason: str | None = None  # why the line is the safe one


def window_sizes(frames: int) -> tuple[int, ...]:
    """The windows each round decodes: the short one, half the sentence and the whole of it
    (the plan predicts whole chunks of 100-1,000 frames; the short window pins the cost per
    call). 637 frames for the calibration sentence's 382, 1.4x the two of version 2."""
    return tuple(sorted({min(SHORT_WINDOW_FRAMES, frames), max(1, frames // 2), frames}))


def fit_line(windows_ms: Mapping[int, float]) -> VocoderLine:
    """The least-squares line through each window size's time (milliseconds)."""
    sizes = np.array(sorted(windows_ms), dtype=np.float64)
    times = np.array([windows_ms[int(size)] for size in sizes], dtype=np.float64)
    if len(sizes) < 2:
        return VocoderLine(0.0, float(times[0] / sizes[0]))
    per_frame, per_call = np.polyfit(sizes, times, 1)
    return VocoderLine(float(per_call), float(per_frame))


def implausible(line: VocoderLine, windows_ms: Mapping[int, float]) -> str | None:
    """Why no machine can have ``line`` (fitted on ``windows_ms``); None if one can: a sign of
    noise (``noise_in``), or a cost per call under ``MIN_PER_CALL_MS`` (a call is never free)."""
    if noise := noise_in(line, windows_ms):
        return noise
    if line.per_call_ms < MIN_PER_CALL_MS:
        return f"a cost per call of {line.per_call_ms:.1f} ms"
    return None


def noise_in(line: VocoderLine, windows_ms: Mapping[int, float]) -> str | None:
    """What in the times can only be noise, which more rounds outvote: a whole sentence no
    slower than its short window, a cost per frame of zero or less, or a window the line misses
    by more than ``FIT_WITHIN`` (a time still caught by a slow stretch). None if nothing."""
    short, whole = min(windows_ms), max(windows_ms)
    if windows_ms[whole] <= windows_ms[short]:
        return (
            f"the whole sentence ({windows_ms[whole]:.0f} ms) decoded no slower than its "
            f"first {short} frames ({windows_ms[short]:.0f} ms)"
        )
    if line.per_frame_ms <= 0:
        return f"a cost per frame of {line.per_frame_ms:.3f} ms"
    for frames, ms in windows_ms.items():
        if abs(line.ms(frames) - ms) > FIT_WITHIN * ms:
            return f"a line {line.ms(frames) / ms - 1:+.0%} off its {frames}-frame window"
    return None


def agree(before: VocoderLine, after: VocoderLine, sizes: Sequence[int]) -> bool:
    """Whether two successive lines predict the shortest and the longest window alike (within
    ``SETTLED_WITHIN``): the two predictions fix a line."""
    return all(
        abs(after.ms(frames) - before.ms(frames)) <= SETTLED_WITHIN * abs(after.ms(frames))
        for frames in (min(sizes), max(sizes))
    )


def safe_line(windows_ms: Mapping[int, float]) -> VocoderLine:
    """A line for when the fitted one cannot be kept: the whole sentence's average cost per
    frame (the most per frame of any size when the cost per frame grows with the window), and
    whatever of the short window that leaves, at least ``SAFE_PER_CALL_MS``. It predicts the
    short window and the whole sentence at or above their times (and, when the cost per frame
    grows with the window, every size between), so a window plan on it errs towards a longer
    first window (a later first audio), not towards a second call that comes too late."""
    short, whole = min(windows_ms), max(windows_ms)
    per_frame = windows_ms[whole] / whole
    per_call = max(SAFE_PER_CALL_MS, windows_ms[short] - per_frame * short)
    return VocoderLine(per_call, per_frame)


def calibrate(timed_round: Callable[[], Mapping[str, RoundTimes]]) -> dict[str, Calibrated]:
    """Rounds of ``timed_round`` (the first a warm-up, not counted) until every candidate is
    done, from ``MIN_ROUNDS`` to ``MAX_ROUNDS``; each line fitted on the times of all its
    rounds so far. A candidate is done when its last two lines agree and its times show no
    noise (``noise_in``). A done, plausible line is kept; otherwise the safe one, said in the
    log: a warning when the rounds ran out (a machine too noisy to settle), else a line of
    information. A done line that is implausible only by its cost per call is the machine's own
    curve, which more rounds would only confirm: on this AMD EPYC a 382-frame decode cost 4-10%
    more per frame than a 191-frame one, so the line's cost per call came out at -10 to -25 ms."""
    timed_round()  # the sessions' first runs of each shape allocate and plan
    rounds: dict[str, list[RoundTimes]] = {}
    lines: dict[str, list[VocoderLine]] = {}

    def settled(name: str) -> bool:
        history, sizes = lines[name], list(rounds[name][-1].windows)
        return len(history) >= 2 and agree(history[-2], history[-1], sizes)

    def done(name: str) -> bool:
        return settled(name) and noise_in(lines[name][-1], _fastest_ms(rounds[name])) is None

    count = 0
    while count < MAX_ROUNDS:
        count += 1
        for name, times in timed_round().items():
            rounds.setdefault(name, []).append(times)
            lines.setdefault(name, []).append(fit_line(_fastest_ms(rounds[name])))
        if count >= MIN_ROUNDS and all(done(name) for name in rounds):
            break
    results = {}
    for name, kept in rounds.items():
        windows_ms = _fastest_ms(kept)
        text_ms = min(times.text for times in kept) * 1000
        line, reason = lines[name][-1], implausible(lines[name][-1], windows_ms)
        if done(name) and reason is None:
            results[name] = Calibrated(text_ms, windows_ms, line, "line", count)
            continue
        if not settled(name):
            unsettled = f"no two successive lines agreed within {SETTLED_WITHIN:.0%}"
            reason = f"{reason}; {unsettled}" if reason else unsettled
        safe = safe_line(windows_ms)
        sizes = ", ".join(f"{frames}: {ms:.0f} ms" for frames, ms in windows_ms.items())
        (logger.info if done(name) else logger.warning)(
            f"the {name} graph's vocoder ({sizes}, {count} rounds): {reason}; keeping the safe "
            f"line, {safe.per_call_ms:.1f} ms a call + {safe.per_frame_ms:.3f} ms a frame"
        )
        results[name] = Calibrated(text_ms, windows_ms, safe, "safe", count, reason)
    return results


def _fastest_ms(rounds: Sequence[RoundTimes]) -> dict[int, float]:
    """Each window size's fastest decode over the rounds, in milliseconds. A decode is only ever
    slowed (another process, a page fault), never sped up, so the fastest is the machine's own
    speed, and a slow stretch that catches the same window in most rounds does not move it
    (given 2% jitter and one decode in six 1.6-3x slower, 58 of 2,000 lines through medians
    were more than 10% off somewhere, 7 of 2,000 through the fastest)."""
    sizes = sorted({frames for times in rounds for frames in times.windows})
    return {
        frames: min(t.windows[frames] for t in rounds if frames in t.windows) * 1000
        for frames in sizes
    }
