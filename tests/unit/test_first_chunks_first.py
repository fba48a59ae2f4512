"""Many sessions on one engine: a new answer's first chunk goes before other sessions' later
chunks, whose listeners still have audio queued (``speech_server.deadline_executor``). In arrival
order it waited behind one step of every other session (issue 43: 30 of 48 turns timed out with
16 clients on one CPU server)."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from speech_standin import ToneEngine

from speech_server.chunk_schedule import PlaybackClock
from speech_server.synthesis import Synthesizer

STEP_SECONDS = 0.04  # each chunk's "compute"; its tone plays 10 ms per character (~0.5 s)


class LoggedEngine(ToneEngine):
    """The tone engine, with the order its chunks were synthesized in."""

    def __init__(self, calls_before_asking: int) -> None:
        super().__init__(seconds_per_chunk=STEP_SECONDS)
        self.calls: list[tuple[float, str]] = []
        self.calls_before_asking = calls_before_asking
        self.time_to_ask = threading.Event()  # that many calls have started
        self.newcomer_spoken = threading.Event()  # the new session's first chunk has started
        self._lock = threading.Lock()

    def synthesize(self, text: str, voice: str, speed: float):
        with self._lock:
            self.calls.append((time.perf_counter(), text))
            if len(self.calls) >= self.calls_before_asking:
                self.time_to_ask.set()
            if "zulu" in text:
                self.newcomer_spoken.set()
        return super().synthesize(text, voice, speed)


def answer(name: str) -> str:
    return " ".join(f"This is {name}, sentence number {n}, long enough to play." for n in range(12))


async def listen(synthesizer: Synthesizer, name: str, heard: dict[str, int]) -> None:
    """A session's answer, its frames taken as they come (the listener's clock fills)."""
    clock = PlaybackClock()
    async for frame in synthesizer.pcm_frames(answer(name), "af_heart", 1.0, clock=clock):
        if isinstance(frame, bytes):
            heard[name] = heard.get(name, 0) + len(frame)


@pytest.mark.parametrize("asked_after", [11, 12, 13, 14])
def test_a_new_answers_first_chunk_goes_before_other_sessions_queued_chunks(asked_after):
    """Asked at each point of the sessions' round (which of them have a step queued)."""
    engine = LoggedEngine(calls_before_asking=asked_after)
    synthesizer = Synthesizer(engine)

    async def scenario() -> float:
        heard: dict[str, int] = {}
        talking = [
            asyncio.create_task(listen(synthesizer, name, heard))
            for name in ("alpha", "bravo", "charlie", "delta", "echo")
        ]
        # Every talking session has a few chunks of audio queued before the new one asks.
        assert await asyncio.to_thread(engine.time_to_ask.wait, 10)
        asked = time.perf_counter()
        newcomer = asyncio.create_task(listen(synthesizer, "zulu", heard))
        assert await asyncio.to_thread(engine.newcomer_spoken.wait, 10)
        for task in [*talking, newcomer]:
            task.cancel()
        await asyncio.gather(*talking, newcomer, return_exceptions=True)
        return asked

    try:
        asked = asyncio.run(scenario())
    finally:
        synthesizer.close()
    first_new = next(i for i, (_, text) in enumerate(engine.calls) if "zulu" in text)
    started_since = [at for at, _ in engine.calls[:first_new] if at >= asked]
    # At most the step already running when it asked may finish first (and the next one, if the
    # running one ended in the instant between the request and its submission): not one step of
    # each of the five other sessions, as in arrival order.
    assert len(started_since) <= 1, [
        text for _, text in engine.calls[first_new - 5 : first_new + 1]
    ]
