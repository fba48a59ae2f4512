"""Objective checks that two renderings of the same speech sound the same.

Written here (numpy only) rather than taken from librosa: four functions, and the project would
otherwise pull librosa, numba and llvmlite into its benchmarks for them.

- ``log_mel``: 80-band log-mel spectrogram (1024-sample Hann frames, hop 256, 0-12 kHz), the
  representation speech models and their evaluations compare in;
- ``log_mel_correlation``: correlation of two such spectrograms over their common length;
- ``frame_distances``: per frame, the RMS of the log-mel difference, to find a seam that stands
  out from the frames around it;
- ``heard_span``: where the speech of a chunk begins and ends (what the synthesis layer keeps).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

SAMPLE_RATE = 24_000
FRAME = 1024
HOP = 256
MEL_BANDS = 80
HIGHEST_HZ = 12_000
SILENCE_THRESHOLD = 0.01  # the synthesis layer's


def _mel_bank() -> NDArray[np.float64]:
    def to_mel(hz: float) -> float:
        return 2595 * np.log10(1 + hz / 700)

    edges = 700 * (10 ** (np.linspace(0, to_mel(HIGHEST_HZ), MEL_BANDS + 2) / 2595) - 1)
    bins = np.fft.rfftfreq(FRAME, 1 / SAMPLE_RATE)
    rising = (bins[None, :] - edges[:-2, None]) / (edges[1:-1, None] - edges[:-2, None])
    falling = (edges[2:, None] - bins[None, :]) / (edges[2:, None] - edges[1:-1, None])
    return np.clip(np.minimum(rising, falling), 0, None)


_BANK = _mel_bank()


def log_mel(audio: NDArray[np.floating]) -> NDArray[np.float64]:
    """``[frames, 80]`` log-mel power; frame ``i`` starts at sample ``i * 256``."""
    frames = np.lib.stride_tricks.sliding_window_view(audio, FRAME)[::HOP] * np.hanning(FRAME)
    return np.log(np.abs(np.fft.rfft(frames)) ** 2 @ _BANK.T + 1e-6)


def log_mel_correlation(first: NDArray[np.floating], second: NDArray[np.floating]) -> float:
    n = min(len(first), len(second))
    return float(np.corrcoef(log_mel(first[:n]).ravel(), log_mel(second[:n]).ravel())[0, 1])


def frame_distances(
    first: NDArray[np.floating], second: NDArray[np.floating]
) -> NDArray[np.float64]:
    n = min(len(first), len(second))
    difference = log_mel(first[:n]) - log_mel(second[:n])
    return np.sqrt(np.mean(difference**2, axis=1))


def heard_span(audio: NDArray[np.floating]) -> slice:
    """From the first to the last sample above the silence threshold."""
    loud = np.flatnonzero(np.abs(audio) > SILENCE_THRESHOLD)
    if loud.size == 0:
        return slice(0, 0)
    return slice(int(loud[0]), int(loud[-1]) + 1)
