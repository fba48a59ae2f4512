"""The chunk schedule: the listener's playback clock, and chunks made in time by the engine's
measured speed (streamed, or cut like a fast start, only when decoding whole would leave a
silence). The synthesis-layer tests run the real model on a clock of its own
(tests/paced_engine.py): the plans they assert are the same on every machine."""

from __future__ import annotations

import asyncio

import pytest
from paced_engine import PacedEngine

from speech_server.chunk_plan import DEFAULT_POLICY, plan_chunks
from speech_server.chunk_schedule import (
    LISTENING_GRACE_SECONDS,
    MAX_GROWTH,
    MIN_GROWTH,
    ChunkSchedule,
    PlaybackClock,
    policy_for,
)
from speech_server.synthesis import Synthesizer


class ManualTime:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_clock_plays_each_piece_after_the_one_before():
    time = ManualTime()
    clock = PlaybackClock(time)
    assert clock.ahead() == 0 and not clock.listening()  # nothing played yet: nobody waits
    clock.add(1.0)
    time.now = 0.3
    clock.add(0.5)  # queued behind the first: plays from 1.0 to 1.5
    assert clock.ahead() == pytest.approx(1.2) and clock.listening()
    time.now = 1.5 + LISTENING_GRACE_SECONDS / 2  # it ran out at 1.5: a silence, heard as one
    assert clock.ahead() == 0 and clock.listening()
    clock.add(0.25)  # plays at once, from now
    assert clock.ahead() == pytest.approx(0.25)
    time.now += 0.25 + LISTENING_GRACE_SECONDS + 0.01
    assert not clock.listening()  # long over: the next request starts a new answer
    clock.add(1.0)
    clock.stop()  # cancelled: what was queued never plays
    assert clock.ahead() == 0 and not clock.listening()


def test_a_chunk_is_streamed_or_cut_only_when_whole_it_would_come_too_late():
    time = ManualTime()
    clock = PlaybackClock(time)
    schedule = ChunkSchedule(real_time_factor=0.3)
    sentence = "x" * 32  # 2 s of speech, 2.5 s with the engine's silences: 0.75 s to make
    assert schedule.synthesis_seconds(sentence, "af_heart", 1.0) == pytest.approx(0.75)
    assert schedule.synthesis_seconds(sentence, "af_heart", 2.0) == pytest.approx(0.375)
    # Nobody is listening yet (a request's own start): as the request's fast_start says.
    assert not schedule.streams(sentence, "af_heart", 1.0, clock)
    assert not schedule.needs_fast_start(sentence, "af_heart", 1.0, clock)
    clock.add(2.0)
    assert not schedule.streams(
        sentence, "af_heart", 1.0, clock
    )  # 2 s ahead: decoded whole in time
    time.now = 1.1  # 0.9 s ahead: too little for the whole decode, enough for a first window
    assert schedule.streams(sentence, "af_heart", 1.0, clock)
    assert not schedule.needs_fast_start(sentence, "af_heart", 1.0, clock)
    time.now = 1.6  # 0.4 s ahead: even its first window would be late
    assert schedule.needs_fast_start(sentence, "af_heart", 1.0, clock)
    assert not ChunkSchedule(None).streams(
        sentence, "af_heart", 1.0, clock
    )  # an engine that keeps up


def test_a_request_is_cut_when_the_engines_window_plan_gains_nothing_streamed():
    # On a CPU twice as slow, a short chunk's plan is one window: streamed, its first audio is
    # its whole decode. With 0.9 s ahead, the typical share (0.6 of 0.75 s, x 1.3) fits; the
    # engine's own (1.0) does not, and the request is cut like a fast start.
    time = ManualTime()
    clock = PlaybackClock(time)
    sentence = "x" * 32  # 0.75 s to make
    typical = ChunkSchedule(real_time_factor=0.3)
    slow_plan = ChunkSchedule(real_time_factor=0.3, streamed_share=lambda audio: 1.0)
    clock.add(2.0)
    time.now = 1.1  # 0.9 s ahead
    assert not typical.needs_fast_start(sentence, "af_heart", 1.0, clock)
    assert slow_plan.needs_fast_start(sentence, "af_heart", 1.0, clock)
    # The share is asked for the chunk's estimated audio (2.5 s here).
    asked = []
    ChunkSchedule(0.3, streamed_share=lambda audio: asked.append(audio) or 0.5).needs_fast_start(
        sentence, "af_heart", 1.0, clock
    )
    assert asked == [pytest.approx(2.5)]


def test_a_cut_made_for_time_keeps_what_can_be_heard_before_the_audio_runs_out():
    time = ManualTime()
    clock = PlaybackClock(time)
    # 1 s of audio per word, made at 0.25 s per audio second with its first audio at once.
    schedule = ChunkSchedule(
        real_time_factor=0.25,
        estimate=lambda text, voice, speed: float(len(text.split())),
        streamed_share=lambda audio: 1.0,
    )
    words = "one two three four five six seven"
    clock.add(1.0)  # 1.0 s ahead: 3 words (0.75 s, x 1.3 = 0.975) fit, 4 do not
    assert schedule.words_in_time(words, "af_heart", 1.0, clock, most=5) == 3
    clock.add(10.0)
    assert schedule.words_in_time(words, "af_heart", 1.0, clock, most=5) == 5  # at most
    time.now = 100.0  # all played: nothing ahead, but a cut never leaves one word alone
    assert schedule.words_in_time(words, "af_heart", 1.0, clock, most=5) == 2


def test_the_schedule_follows_the_engines_pace_under_load():
    time = ManualTime()
    clock = PlaybackClock(time)
    schedule = ChunkSchedule(real_time_factor=0.3)
    sentence = "x" * 32  # 0.75 s to make at the measured pace
    clock.add(1.2)
    assert not schedule.streams(sentence, "af_heart", 1.0, clock)  # 0.975 s needed: in time
    growth = schedule.policy.growth
    schedule.observe(sentence, "af_heart", 1.0, seconds=1.5)  # twice as slow as measured
    assert schedule.load_factor == pytest.approx(1 + (2 - 1) / 3)
    assert schedule.streams(sentence, "af_heart", 1.0, clock)  # now it would come late
    assert schedule.policy.growth < growth  # and later chunks grow by less
    for _ in range(20):
        schedule.observe(sentence, "af_heart", 1.0, seconds=0.3)  # faster than measured
    assert schedule.load_factor == pytest.approx(1.0, abs=1e-3)  # never taken below it
    ChunkSchedule(None).observe(sentence, "af_heart", 1.0, seconds=9.0)  # nothing to follow


def test_later_chunks_grow_by_what_the_engine_affords():
    assert policy_for(None) == DEFAULT_POLICY
    assert policy_for(0.3).growth == pytest.approx(2.0)
    assert policy_for(0.1).growth == MAX_GROWTH and policy_for(0.9).growth == MIN_GROWTH
    text = (
        "Sure, here is the plan. We start with the tests, then the docs. After that the release "
        "goes out to everyone who asked for it, and we watch the figures for a week."
    )
    slow, fast = (
        plan_chunks(text, policy=policy_for(0.5)),
        plan_chunks(text, policy=policy_for(0.2)),
    )
    assert " ".join(slow) == " ".join(fast) == " ".join(text.split())
    assert slow[0] == fast[0] and len(slow) > len(fast)  # a slower engine: smaller steps


SENTENCE = "I'm voicewire, the voice of your agent."


def speak_next_sentence(
    engine: PacedEngine, seconds_ahead: float, fast_start: bool = False
) -> bytes:
    """A pipeline's second sentence (no fast start), sent while the first's audio still has
    ``seconds_ahead`` to play."""
    synthesizer = Synthesizer(engine, now=engine.clock)
    clock = synthesizer.playback_clock()
    clock.add(seconds_ahead)

    async def speak() -> bytes:
        audio = b""
        frames = synthesizer.pcm_frames(
            SENTENCE, "af_heart", 1.0, fast_start=fast_start, clock=clock
        )
        async for frame in frames:
            audio += frame.pcm
        return audio

    try:
        return asyncio.run(speak())
    finally:
        synthesizer.close()


def test_the_next_sentence_is_decoded_whole_when_the_audio_ahead_covers_it(onnx_engine):
    engine = PacedEngine(onnx_engine, real_time_factor=0.3)
    audio = speak_next_sentence(engine, seconds_ahead=10.0)
    assert engine.calls == [("whole", SENTENCE)]  # as the seed's pipeline made it
    assert len(audio) > 24000 * 2


def test_the_next_sentence_is_cut_and_streamed_when_the_listener_would_wait(onnx_engine):
    engine = PacedEngine(onnx_engine, real_time_factor=0.3)
    audio = speak_next_sentence(engine, seconds_ahead=0.05)
    first_kind, first_text = engine.calls[0]
    assert first_kind == "streamed" and first_text == "I'm voicewire,"  # its first clause
    assert " ".join(text for _, text in engine.calls) == SENTENCE  # nothing dropped
    assert len(audio) > 24000 * 2


def test_a_new_answer_starts_fast_whatever_the_clock_held(onnx_engine):
    """A fast start is a new answer the listener waits for: 10 s still queued from the turn
    before (that turn ended on this side while its audio played on) do not make it whole."""
    engine = PacedEngine(onnx_engine, real_time_factor=0.3)
    speak_next_sentence(engine, seconds_ahead=10.0, fast_start=True)
    assert engine.calls[0] == ("streamed", "I'm voicewire,")


GREETING = "Hello! I'm voicewire, the voice of your agent. Ask me anything."


def speak_request(engine: PacedEngine, text: str) -> bytes:
    """One new answer (a fast start) on a fresh session."""
    synthesizer = Synthesizer(engine, now=engine.clock)

    async def speak() -> bytes:
        frames = synthesizer.pcm_frames(text, "af_heart", 1.0, fast_start=True, clock=None)
        return b"".join([frame.pcm async for frame in frames])

    try:
        return asyncio.run(speak())
    finally:
        synthesizer.close()


def test_a_later_chunk_the_first_ones_audio_cannot_cover_is_cut_at_its_first_clause(onnx_engine):
    """A slow CPU (its window plan gains nothing on a short chunk streamed): after "Hello!"
    (0.8 s of audio) the next chunk's first audio would come after that audio has played, so it
    is cut at its first clause. On a fast one it is made as planned. Nothing is dropped."""
    slow = PacedEngine(onnx_engine, real_time_factor=0.33, first_share=1.0)
    speak_request(slow, GREETING)
    texts = [text for _, text in slow.calls]
    assert texts[:3] == ["Hello!", "I'm voicewire,", "the voice of your agent."]
    assert " ".join(texts) == GREETING
    fast = PacedEngine(onnx_engine, real_time_factor=0.1, first_share=0.4)
    speak_request(fast, GREETING)
    assert [text for _, text in fast.calls][:2] == [
        "Hello!",
        "I'm voicewire, the voice of your agent.",
    ]


def test_the_engine_estimates_a_texts_audio_by_its_sounds(onnx_engine):
    """Numbers, versions and symbols say more than their characters: the phoneme estimate stays
    near the real length where the character one falls far short."""
    from speech_server.chunk_schedule import audio_seconds_by_characters

    for text in (
        "Your parcel arrives on Thursday.",
        "1. The price drops from $29.99 to $24.99 per month, about 16.7% less.",
        "Here is what changes in v2.3.1, shipping on Jan. 5 at 10:30 a.m.:",
    ):
        side, _ = next(onnx_engine.text_sides(text, "af_heart", 1.0))
        real = side.frames / 80
        estimate = onnx_engine.estimated_audio_seconds(text, "af_heart", 1.0)
        assert estimate == pytest.approx(real, rel=0.2)
        assert onnx_engine.estimated_audio_seconds(text, "af_heart", 2.0) == pytest.approx(
            estimate / 2
        )
    assert audio_seconds_by_characters(text, "af_heart", 1.0) < 0.75 * real
