"""The real engine on a clock of its own: a test of a plan made for time gets the same plan on
every machine.

``speech_server.chunk_schedule`` decides how each chunk is made from two clocks: how long the
listener's queued audio has left (``PlaybackClock``) and how long the engine took on its last
chunks (``ChunkSchedule.observe``). On the wall clock both depend on the CPU and on what else
runs: a plan a test asserted on a quiet machine came out differently on a slower or busy one
(issue 51). Here the clock moves only when the engine works, by the real-time factor the test
chose times the audio it made, so the engine's "speed" is the test's, the audio is Kokoro's.
Give the clock to the synthesizer: ``Synthesizer(paced, now=paced.clock)``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
from numpy.typing import NDArray


class PacedClock:
    """Seconds that pass only when ``advance`` says (from the synthesis thread and the loop)."""

    def __init__(self) -> None:
        self._seconds = 0.0
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self._seconds

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._seconds += seconds


class PacedEngine:
    """The real engine: each call takes ``real_time_factor`` seconds of the clock per second of
    audio it makes (a streamed call, piece by piece), and says its first window comes after
    ``first_share`` of a whole decode. Notes each call as ("whole" | "streamed", text)."""

    def __init__(self, engine: Any, real_time_factor: float, first_share: float = 0.6) -> None:
        self._engine = engine
        self.real_time_factor = real_time_factor
        self.first_share = first_share
        self.clock = PacedClock()
        self.name, self.sample_rate = engine.name, engine.sample_rate
        self.voices, self.default_voice = engine.voices, engine.default_voice
        self.calls: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    def estimated_audio_seconds(self, text: str, voice: str, speed: float) -> float:
        return self._engine.estimated_audio_seconds(text, voice, speed)

    def streamed_first_share(self, audio_seconds: float) -> float:
        return self.first_share

    def synthesize(self, text: str, voice: str, speed: float) -> NDArray[np.float32]:
        self._note("whole", text)
        audio = self._engine.synthesize(text, voice, speed)
        self._spend(audio)
        return audio

    def synthesize_stream(self, text: str, voice: str, speed: float) -> Iterator[NDArray]:
        self._note("streamed", text)
        for piece in self._engine.synthesize_stream(text, voice, speed):
            self._spend(piece)
            yield piece

    def _spend(self, audio: NDArray) -> None:
        self.clock.advance(self.real_time_factor * len(audio) / self.sample_rate)

    def _note(self, kind: str, text: str) -> None:
        with self._lock:
            self.calls.append((kind, text))
