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
from speech_server.synthesis import AudioPiece, Synthesizer, WordsAhead

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
        if isinstance(frame, AudioPiece):
            heard[name] = heard.get(name, 0) + len(frame.pcm)


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


class SlowForOthersEngine(ToneEngine):
    """The other sessions' chunks take ``OTHER_STEP_SECONDS``; the newcomer's (``zulu``) are
    quick. Word timings come as the real engines give them: the words, then the audio."""

    def __init__(self) -> None:
        super().__init__()
        self.spoken: set[str] = set()
        self.both_spoke = threading.Event()  # alpha's and bravo's first chunks are made

    def synthesize(self, text: str, voice: str, speed: float):
        self.seconds_per_chunk = 0.005 if "zulu" in text.lower() else OTHER_STEP_SECONDS
        audio = super().synthesize(text, voice, speed)
        self.spoken |= {name for name in ("alpha", "bravo") if name in text}
        if len(self.spoken) == 2:
            self.both_spoke.set()
        return audio


OTHER_STEP_SECONDS = 0.4


def test_a_new_answers_first_audio_travels_with_its_words_not_behind_another_step():
    """The newcomer's words and its first audio come from one engine call, and reach it
    together: not the words, then the audio after another session's chunk, due later, that the
    thread took up in between (issue 43's load run: a first audio already made waited 0.3-1.1 s
    behind such a chunk; ``test_deadline_executor`` holds the ordering itself). Two sessions
    talk, so that the thread always has a chunk of theirs to take up."""
    engine = SlowForOthersEngine()
    synthesizer = Synthesizer(engine)

    async def scenario() -> tuple[float, float]:
        heard: dict[str, int] = {}
        talking = [
            asyncio.create_task(listen(synthesizer, name, heard)) for name in ("alpha", "bravo")
        ]
        # Both speak, with more of their chunks queued.
        assert await asyncio.to_thread(engine.both_spoke.wait, 10)
        words_at = audio_at = 0.0
        async for item in synthesizer.pcm_frames(
            "Zulu asks something new.", "af_heart", 1.0, clock=PlaybackClock(), word_timings=True
        ):
            if isinstance(item, WordsAhead):
                words_at = time.perf_counter()
            else:
                audio_at = time.perf_counter()
                break
        for task in talking:
            task.cancel()
        await asyncio.gather(*talking, return_exceptions=True)
        return words_at, audio_at

    try:
        words_at, audio_at = asyncio.run(scenario())
    finally:
        synthesizer.close()
    assert words_at and audio_at
    assert audio_at - words_at < OTHER_STEP_SECONDS / 2


def test_the_next_chunk_is_made_while_the_one_before_is_sent():
    """The pipeline: while the consumer is still sending the first chunk's frames (a slow
    link), the engine already makes the next chunk, as many steps ahead as ``lookahead``
    allows, a chunk's trailing pause being a step of its own."""
    engine = LoggedEngine(calls_before_asking=1)
    synthesizer = Synthesizer(engine)

    async def scenario() -> tuple[float, float]:
        first_frame_sent = 0.0
        async for item in synthesizer.pcm_frames(answer("alpha"), "af_heart", 1.0):
            if isinstance(item, AudioPiece) and not first_frame_sent:
                await asyncio.sleep(0.5)  # the first frame takes a while to send
                first_frame_sent = time.perf_counter()
        return first_frame_sent, engine.calls[1][0]

    try:
        first_frame_sent, second_chunk_started = asyncio.run(scenario())
    finally:
        synthesizer.close()
    assert second_chunk_started < first_frame_sent
