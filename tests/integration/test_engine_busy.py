"""A speech server speaking as many answers as its engine can: the next new answer is refused at
once with ``speech_busy`` over the real WebSocket and HTTP routes, the session stays usable, and
an answer already speaking is never refused (speech_server.engine_share)."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest
from conftest import start_server
from speech_client import collect_reply, next_control
from speech_standin import ToneEngine
from websockets.asyncio.client import connect

# 10 ms of tone per character: this text plays 1.5 s, made in a moment.
TEXT = "This answer is long enough to keep its listener busy for a second and a half or so. " * 2


class PacedToneEngine(ToneEngine):
    """The tone engine, with a measured pace: half a second of engine per second of audio."""

    real_time_factor = 0.5


@pytest.fixture
def busy_server(monkeypatch):
    monkeypatch.setenv("VOICEWIRE_MAX_ENGINE_LOAD", "1.0")  # two answers at 0.5 each
    running = start_server(PacedToneEngine)
    yield running
    running.stop()


async def ask(ws, text: str, request_id: str, **fields) -> None:
    await ws.send(json.dumps({"text": text, "request_id": request_id, **fields}))


async def two_answers_speaking(first, second) -> None:
    """Two sessions' answers made, their 1.5 s each still to be heard: the engine (0.5 x 2) is
    at its limit of 1.0."""
    await ask(first, TEXT, "a1")
    await ask(second, TEXT, "b1")
    answers = [await collect_reply(first), await collect_reply(second)]
    assert all(reply.complete["status"] == "complete" for reply in answers)


async def test_a_third_answer_is_refused_at_once_and_its_session_goes_on(busy_server):
    async with (
        connect(busy_server.ws_url) as first,
        connect(busy_server.ws_url) as second,
        connect(busy_server.ws_url) as third,
    ):
        await two_answers_speaking(first, second)
        # Both listeners still have their 1.5 s to hear: a third answer would not be in time.
        await ask(third, TEXT, "c1")
        assert (await next_control(third))["type"] == "synthesis_start"
        refused = await next_control(third)
        assert refused["code"] == "speech_busy" and refused["request_id"] == "c1"
        assert "speaking 2 other answers" in refused["message"]
        complete = await next_control(third)
        assert (complete["type"], complete["status"], complete["audio_bytes"]) == (
            "synthesis_complete",
            "failed",
            0,
        )
        # A later text of an answer already speaking is never refused.
        await ask(first, "And one more thing.", "a2", fast_start=False)
        assert (await collect_reply(first)).complete["status"] == "complete"
        # Once the others' audio has played, the same session is served.
        await asyncio.sleep(3.5)  # their 2.1 s and a2, and the 0.5 s a listener still waits
        await ask(third, TEXT, "c2")
        served = await collect_reply(third)
        assert served.complete["status"] == "complete" and len(served.audio) > 0


async def test_a_session_that_closes_stops_counting_though_its_audio_had_time_to_play(
    busy_server, monkeypatch
):
    """Its listener is gone: the audio it had queued plays for no one, so a new answer on
    another session is served at once (a fresh clone's suite, 2026-12-07: a closed session's
    clock counted until the session was collected, and the next test's answer was refused).
    Here every session is kept, as a reference cycle through a traceback keeps one until the
    collector runs: what lets the session go is its end, not the collector."""
    from speech_server import bidi_session

    kept: list[bidi_session.BidiSession] = []
    run = bidi_session.BidiSession.run

    async def run_and_keep(session: bidi_session.BidiSession) -> None:
        kept.append(session)
        await run(session)

    monkeypatch.setattr(bidi_session.BidiSession, "run", run_and_keep)
    async with connect(busy_server.ws_url) as first:
        async with connect(busy_server.ws_url) as second:
            await two_answers_speaking(first, second)
        # ``second`` closed with its 1.5 s unheard; ``first`` alone still speaks.
        await asyncio.sleep(0.2)  # the server sees the close
        async with connect(busy_server.ws_url) as third:
            await ask(third, TEXT, "c1")
            served = await collect_reply(third)
    assert len(kept) == 3
    assert served.complete["status"] == "complete" and len(served.audio) > 0


async def test_a_post_refused_for_the_same_reason_says_so_with_503(busy_server):
    async with connect(busy_server.ws_url) as first, connect(busy_server.ws_url) as second:
        await two_answers_speaking(first, second)
        async with httpx.AsyncClient(base_url=busy_server.base_url) as client:
            answer = await client.post("/invocations", json={"text": TEXT})
    assert answer.status_code == 503
    assert answer.json()["code"] == "speech_busy"


async def test_a_text_that_continues_an_answer_is_never_refused_even_on_an_idle_session(
    busy_server,
):
    """``starts_answer: false``: a long later sentence is sent with fast_start too, and its
    session's audio may have run out while the LLM wrote; the worker says it continues."""
    async with (
        connect(busy_server.ws_url) as first,
        connect(busy_server.ws_url) as second,
        connect(busy_server.ws_url) as third,
    ):
        await two_answers_speaking(first, second)
        await ask(third, TEXT, "c1", starts_answer=False)
        continued = await collect_reply(third)
        assert continued.complete["status"] == "complete" and continued.audio
        # And one declared to begin an answer is weighed, fast_start or not.
        async with connect(busy_server.ws_url) as fourth:
            await ask(fourth, "A new answer.", "d1", starts_answer=True, fast_start=False)
            assert (await next_control(fourth))["type"] == "synthesis_start"
            assert (await next_control(fourth))["code"] == "speech_busy"


async def test_the_floor_bench_waits_out_a_refusal_to_time_the_engine_alone(busy_server):
    """``bench floor`` times the engine straight after a turn whose audio still plays on the
    server's clock: on a busy machine its request is refused ``speech_busy`` (a fresh clone's
    suite, 2026-12-06), and the bench asks again, as the refusal says, until it is served."""
    from voicewire_tools.bench import floor

    async with connect(busy_server.ws_url) as first, connect(busy_server.ws_url) as second:
        await two_answers_speaking(first, second)
        started = time.perf_counter()
        engine_ms = await floor.engine_first_audio_ms(busy_server.ws_url, "Hello there.", runs=1)
        waited = time.perf_counter() - started
    # Served once the two answers' 1.5 s had played (and their listeners' 0.5 s of grace): the
    # figure is the one served request's first audio, not the wait before it.
    assert waited >= 1.0
    assert 0 < engine_ms < 1000 * waited - 500


class UnmeasuredToneEngine(ToneEngine):
    """An engine that measured no speed (as the torch engine on a GPU): half a second of
    compute per second of its audio, which only the synthesizer can observe."""

    def synthesize(self, text, voice, speed):
        audio = super().synthesize(text, voice, speed)
        time.sleep(0.5 * len(audio) / self.sample_rate)
        return audio


def test_an_engine_that_measured_no_speed_is_weighed_by_the_pace_observed():
    from speech_server.chunk_schedule import PlaybackClock
    from speech_server.engine_share import EngineBusy
    from speech_server.synthesis import OBSERVED_PACE_AFTER_SECONDS, Synthesizer

    synthesizer = Synthesizer(UnmeasuredToneEngine(), max_engine_load=1.0)
    try:

        async def speak(text: str) -> None:
            async for _ in synthesizer.pcm_frames(text, "af_heart", 1.0, clock=PlaybackClock()):
                pass

        speaking = [PlaybackClock(), PlaybackClock()]
        for clock in speaking:
            clock.add(60.0)  # two other answers with a minute still to be heard
            synthesizer.share.started(clock)
            synthesizer.share.finished(clock)
        synthesizer.admit(PlaybackClock())  # nothing observed yet: taken as keeping up
        while synthesizer.audio_seconds_made < OBSERVED_PACE_AFTER_SECONDS:
            asyncio.run(speak(TEXT))
        assert synthesizer.pace() == pytest.approx(0.5, rel=0.25)
        with pytest.raises(EngineBusy, match="speaking 2 other answers"):
            synthesizer.admit(PlaybackClock())  # 3 x 0.5 is over 1.0
        assert synthesizer.schedule.pace() is None  # the chunk plan still takes it as keeping up
    finally:
        synthesizer.close()


# --- the worker's side ---------------------------------------------------------------------------


async def test_the_worker_marks_only_a_turns_first_text_as_beginning_its_answer(
    aws, busy_server, monkeypatch
):
    from turn_harness import run_turn

    from voicewire.speech_link import session as speech_session

    sent: list[bool | None] = []
    send = speech_session.SpeechSession.send

    async def recorded(self, text, **options):
        sent.append(options.get("starts_answer"))
        return await send(self, text, **options)

    monkeypatch.setattr(speech_session.SpeechSession, "send", recorded)
    outcome, _, _ = await run_turn(
        busy_server, "bidi", "Why does streaming make voice agents feel faster?"
    )
    assert outcome.status == "complete"
    assert len(sent) > 2 and sent[0] is True and not any(sent[1:])


async def test_a_turn_the_engine_refuses_ends_speech_busy_before_any_audio(aws, busy_server):
    from turn_harness import run_turn

    async with connect(busy_server.ws_url) as first, connect(busy_server.ws_url) as second:
        await two_answers_speaking(first, second)
        outcome, connection, _ = await run_turn(busy_server, "speak", text="Hello there.")
    frames = connection.frames()
    assert not any(isinstance(frame, tuple) for frame in frames)  # no audio
    error, end = frames[-2], frames[-1]
    assert error["code"] == "speech_busy" and "ask again" in error["message"]
    assert end["type"] == "turn_end" and end["status"] == "failed" == outcome.status
