"""Whether a new answer fits on the engine (speech_server.engine_share)."""

from __future__ import annotations

import asyncio

import pytest
from speech_standin import ToneEngine

from speech_server.chunk_schedule import PlaybackClock
from speech_server.engine_share import EngineBusy, EngineShare, max_engine_load_from_env
from speech_server.synthesis import AudioPiece, Synthesizer


class Clock:
    """A settable time for playback clocks."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_new_answers_are_refused_past_the_engines_load_and_admitted_again_after():
    time = Clock()
    share = EngineShare(max_load=1.0)
    first, second, third = (PlaybackClock(time) for _ in range(3))
    share.admit(first, 0.4)
    share.started(first)
    share.admit(second, 0.4)
    share.started(second)
    with pytest.raises(EngineBusy, match=r"speaking 2 other answers; .* 1\.20 engine-seconds"):
        share.admit(third, 0.4)
    assert share.refused == 1
    # The first answer's synthesis ends, but its listener still has audio to hear: it still
    # speaks, so it still counts.
    first.add(3.0)
    share.finished(first)
    with pytest.raises(EngineBusy):
        share.admit(third, 0.4)
    time.now += 5.0  # its audio has played
    share.admit(third, 0.4)


def test_a_sessions_own_answer_is_not_counted_against_its_next_one():
    share = EngineShare(max_load=1.0)
    clock = PlaybackClock()
    share.started(clock)
    clock.add(2.0)
    share.admit(clock, 0.9)  # a barge-in's new answer on the same session replaces the old


def test_an_answer_alone_on_the_engine_is_served_however_slow_the_engine():
    EngineShare(max_load=1.0).admit(PlaybackClock(), 3.0)


def test_an_engine_with_no_measured_pace_refuses_nothing():
    share = EngineShare(max_load=1.0)
    for _ in range(20):
        clock = PlaybackClock()
        share.admit(clock, None)
        share.started(clock)
    assert share.producing() == 20 and share.refused == 0


@pytest.mark.parametrize(("raw", "problem"), [("many", "not a number"), ("0", "above 0")])
def test_the_limit_from_the_environment_is_checked(monkeypatch, raw, problem):
    monkeypatch.setenv("VOICEWIRE_MAX_ENGINE_LOAD", raw)
    with pytest.raises(ValueError, match=problem):
        max_engine_load_from_env()
    monkeypatch.setenv("VOICEWIRE_MAX_ENGINE_LOAD", "2.5")
    assert max_engine_load_from_env() == 2.5


def test_chunks_grow_more_slowly_for_the_sessions_sharing_the_engine():
    """Four sessions being synthesized: each chunk is ready after about four times its own
    engine time, so later chunks grow more slowly; whether one streams stays its own decode's
    matter (streaming adds work a shared engine can least afford)."""
    from speech_server.chunk_schedule import ChunkSchedule

    schedule = ChunkSchedule(0.2)
    clock = PlaybackClock()
    clock.add(2.0)  # two seconds of audio ahead of the next chunk
    chunk = "A later sentence of the answer, about two seconds of speech when it is said."
    alone_growth = schedule.policy.growth
    schedule.sharing = 4
    assert schedule.policy.growth < alone_growth
    assert not schedule.streams(chunk, "af_heart", 1.0, clock)
    assert schedule.pace() == 0.2  # one session's own pace is what admission weighs


def test_a_session_already_speaking_is_not_weighed_again():
    """A long later sentence is sent with fast_start too: its session is speaking, so it adds
    nothing to the engine's load and is never refused."""
    share = EngineShare(max_load=1.0)
    clocks = [PlaybackClock() for _ in range(3)]
    for clock in clocks:
        share.started(clock)
    share.admit(clocks[0], 0.6)  # being synthesized for
    share.finished(clocks[1])
    clocks[1].add(5.0)
    share.admit(clocks[1], 0.6)  # its audio still playing
    with pytest.raises(EngineBusy):
        share.admit(PlaybackClock(), 0.6)  # a new answer on an idle session


def test_an_answer_its_caller_admitted_is_not_weighed_again():
    """The POST route weighs a new answer before its response starts; weighed again once its
    200 is sent, an answer that another began beside in the meantime would fail mid-stream."""
    engine = ToneEngine()
    engine.real_time_factor = 1.0  # measured: an engine-second per second of audio
    synthesizer = Synthesizer(engine, max_engine_load=1.5)
    synthesizer.share.started(PlaybackClock())  # another answer is being made

    async def frames(**options: bool) -> list[bytes]:
        return [
            frame.pcm
            async for frame in synthesizer.pcm_frames("Hello there.", "af_heart", 1.0, **options)
            if isinstance(frame, AudioPiece)
        ]

    try:
        with pytest.raises(EngineBusy):
            asyncio.run(frames())
        assert asyncio.run(frames(admitted=True))
    finally:
        synthesizer.close()
