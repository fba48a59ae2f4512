"""The latency design's audio, checked exactly: the synthesis layer trims each chunk's silence,
puts back the pause its punctuation calls for, and cuts the first chunk short. A deterministic
engine (silence, a tone as long as the text, silence: the shape of Kokoro's output) makes every
sample predictable; ``test_streamed_vocoder`` and the speech-session tests run the real model."""

from __future__ import annotations

import asyncio

import numpy as np

from speech_server.chunk_plan import pause_after, plan_chunks
from speech_server.synthesis import EDGE_PAD_SECONDS, SILENCE_THRESHOLD, Synthesizer

RATE = 24_000
LEAD, TAIL = int(0.3 * RATE), int(0.5 * RATE)  # Kokoro's silence around every chunk
PAD = int(EDGE_PAD_SECONDS * RATE)


def tone_samples(text: str) -> int:
    return len(text) * 240  # 10 ms per character


class ToneEngine:
    name, sample_rate = "tone", RATE
    voices, default_voice = frozenset({"af_heart"}), "af_heart"

    def __init__(self) -> None:
        self.texts: list[str] = []

    def synthesize(self, text: str, voice: str, speed: float) -> np.ndarray:
        self.texts.append(text)
        tone = 0.3 + 0.1 * np.sin(np.arange(tone_samples(text)) * 0.3)  # never near zero
        return np.concatenate([np.zeros(LEAD), tone, np.zeros(TAIL)]).astype(np.float32)

    def synthesize_stream(self, text: str, voice: str, speed: float):
        audio = self.synthesize(text, voice, speed)
        yield audio[: LEAD + 100]  # the first window ends just after the onset
        yield audio[LEAD + 100 :]


def speak(text: str, fast_start: bool = True) -> tuple[np.ndarray, list[str]]:
    engine = ToneEngine()
    synthesizer = Synthesizer(engine)

    async def collect() -> bytes:
        return b"".join(
            [
                frame.pcm
                async for frame in synthesizer.pcm_frames(
                    text, "af_heart", 1.0, fast_start=fast_start
                )
            ]
        )

    try:
        pcm = asyncio.run(collect())
    finally:
        synthesizer.close()
    return np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32767.0, engine.texts


def silent_runs(audio: np.ndarray) -> list[tuple[int, int]]:
    """(start, length) of each run of samples at or under the silence threshold."""
    quiet = np.abs(audio) <= SILENCE_THRESHOLD
    edges = np.flatnonzero(np.diff(np.r_[0, quiet.astype(int), 0]))
    return [
        (int(start), int(stop - start))
        for start, stop in zip(edges[::2], edges[1::2], strict=False)
    ]


def test_each_chunk_is_trimmed_and_followed_by_the_pause_its_punctuation_calls_for():
    text = "Of course, I can check that for you. The parcel left the depot this morning"
    audio, texts = speak(text)
    chunks = plan_chunks(text, fast_start=True)
    assert texts == chunks and len(chunks) >= 3
    runs = silent_runs(audio)
    # The first chunk's leading silence is gone but for the edge pad: first audio at once.
    assert runs[0] == (0, PAD)
    # Between chunks: the trailing pad, the pause, the next chunk's leading pad.
    between = [length for _, length in runs[1:]]
    expected = [PAD + int(pause_after(chunk) * RATE) + PAD for chunk in chunks[:-1]]
    assert between[: len(expected)] == expected
    assert pause_after(chunks[0]) == 0.1 and pause_after(chunks[1]) == 0.25  # clause, sentence
    # The last chunk ends with its pad (no pause: nothing follows) and nothing is lost.
    assert between[len(expected)] == PAD
    tones = sum(tone_samples(chunk) for chunk in chunks)
    assert len(audio) == tones + sum(expected) + 2 * PAD


def test_the_first_chunk_is_cut_short_only_with_fast_start():
    text = "The parcel left the depot this morning and reaches you on Thursday afternoon."
    _, cut = speak(text, fast_start=True)
    _, whole = speak(text, fast_start=False)
    assert len(cut[0].split()) <= 5 and len(cut) > 1
    assert whole == [text]
