"""Whole turns over real parts: replay LLM, real speech server, moto's @connections API."""

from __future__ import annotations

import asyncio
import time

import pytest
from turn_harness import run_turn

from voicewire.speech_link import SpeechStreamError, open_speech_session


def kinds(frames):
    return ["audio" if isinstance(frame, tuple) else frame["type"] for frame in frames]


def check_audio_frames(frames, turn=3):
    audio = [frame for frame in frames if isinstance(frame, tuple)]
    assert [seq for _, seq, _ in audio] == list(range(len(audio)))
    assert {number for number, _, _ in audio} == {turn}
    return audio


async def test_bidi_speaks_before_the_llm_has_finished(aws, speech_server):
    outcome, connection, _ = await run_turn(speech_server, "bidi", "What is the meaning of life?")
    frames = connection.frames()
    order = kinds(frames)
    assert order[0] == "turn_start" and order[-1] == "turn_end"
    last_delta = max(i for i, kind in enumerate(order) if kind == "text_delta")
    assert order.index("audio") < last_delta  # early audio while the LLM still writes
    audio = check_audio_frames(frames)
    end = frames[-1]
    assert end["status"] == "complete" == outcome.status
    assert end["audio_frames"] == len(audio)
    assert end["audio_bytes"] == sum(len(payload) for _, _, payload in audio)
    timings = end["timings"]
    assert timings["first_text_ms"] <= timings["first_sentence_ms"] <= timings["first_audio_ms"]
    assert timings["first_audio_ms"] < timings["total_ms"]
    sentences = [
        frame["text"] for frame in frames if isinstance(frame, dict) and frame["type"] == "sentence"
    ]
    assert sentences[0] == "That's a good question,"  # the first clause, cut early
    deltas = "".join(f["text"] for f in frames if isinstance(f, dict) and f["type"] == "text_delta")
    assert deltas == outcome.answer
    assert " ".join(sentences).split() == deltas.split()


async def test_batch_waits_for_the_whole_answer(aws, speech_server):
    outcome, connection, llm = await run_turn(speech_server, "batch", "Hello, who are you?")
    order = kinds(connection.frames())
    assert order.index("audio") > max(i for i, kind in enumerate(order) if kind == "text_delta")
    assert outcome.status == "complete" and outcome.answer == llm.choose("hello").text
    check_audio_frames(connection.frames())


async def test_speak_synthesizes_the_text_only(aws, speech_server):
    outcome, connection, llm = await run_turn(speech_server, "speak", text="**Hi** there.")
    frames = connection.frames()
    assert kinds(frames)[0:2] == ["turn_start", "sentence"]
    assert frames[1]["text"] == "Hi there."  # markdown is not read aloud
    assert "text_delta" not in kinds(frames) and llm.requests == []
    assert outcome.status == "complete" and check_audio_frames(frames)


async def test_cancel_mid_turn_stops_audio_and_the_llm(aws, speech_server):
    outcome, connection, llm = await run_turn(
        speech_server, "bidi", "Tell me something", cancel_when=lambda data: data[:1] == b"\xa1"
    )
    frames = connection.frames()
    assert frames[-1]["type"] == "turn_end" and frames[-1]["status"] == "cancelled"
    assert outcome.status == "cancelled"
    audio = check_audio_frames(frames)
    assert len(audio) <= 2  # the frame that triggered the cancel, at most one in flight
    assert len(outcome.answer) < len(llm.default.text)  # the LLM stream was stopped


async def test_throttled_llm_ends_the_turn_failed_with_a_code(aws, speech_server):
    outcome, connection, _ = await run_turn(speech_server, "bidi", "[throttle] please")
    frames = connection.frames()
    error, end = frames[-2], frames[-1]
    assert error["type"] == "error" and error["code"] == "llm_throttled"
    assert error["turn_id"] == "turn-3"
    assert end["type"] == "turn_end" and end["status"] == "failed" == outcome.status


async def test_a_speech_error_frame_mid_turn_fails_the_turn(aws, speech_server):
    outcome, connection, _ = await run_turn(speech_server, "speak", text="Hello.", voice="nobody")
    frames = connection.frames()
    assert frames[-2]["code"] == "speech_failed" and frames[-1]["status"] == "failed"
    assert outcome.status == "failed"


@pytest.mark.parametrize("after", [1, 5])
async def test_a_client_gone_mid_turn_stops_everything(aws, speech_server, after):
    outcome, connection, llm = await run_turn(speech_server, "bidi", "Tell me", gone_after=after)
    assert outcome.gone
    assert len(connection.posts) == after  # nothing was posted after the GoneException
    assert len(outcome.answer) < len(llm.default.text)


async def test_the_turn_streams_text_while_its_speech_session_opens(aws, speech_server):
    """The worker hands the turn a session still opening: text flows at once, speech waits
    for the session only at the first sentence."""
    opened_at = []

    async def slow_open():
        await asyncio.sleep(0.8)  # a slow set-up, longer than the LLM's first tokens
        session = open_speech_session(speech_server.ws_url)
        await session.open()
        opened_at.append(time.monotonic())
        return session

    outcome, connection, _ = await run_turn(
        speech_server, "bidi", "What is the meaning of life?", speech_opening=slow_open
    )
    assert outcome.status == "complete"
    frames = connection.frames()
    posted = [(at, frame) for (at, _), frame in zip(connection.posts, frames, strict=True)]
    first_delta = next(at for at, f in posted if isinstance(f, dict) and f["type"] == "text_delta")
    first_audio = next(at for at, f in posted if isinstance(f, tuple))
    assert first_delta < opened_at[0] < first_audio


async def test_a_speech_session_that_cannot_open_fails_the_turn_at_once(aws, speech_server):
    async def failing_open():
        await asyncio.sleep(0.3)
        raise SpeechStreamError("connect_failed", "cannot open the endpoint")

    outcome, connection, llm = await run_turn(
        speech_server, "bidi", "Tell me a story", speech_opening=failing_open
    )
    frames = connection.frames()
    assert outcome.status == "failed" and frames[-1]["status"] == "failed"
    assert frames[-2]["code"] == "speech_failed" and "connect_failed" in frames[-2]["message"]
    # It did not wait for the LLM to finish its answer: the stream was stopped part way.
    assert len(outcome.answer) < len(llm.default.text)


async def test_audio_does_not_wait_behind_text_posts(aws, speech_server):
    """Each post takes 30 ms (a signed HTTPS round trip on AWS) while the LLM writes a delta
    every ~18 ms: text posts would pile up ahead of the audio if they shared its lane. The first
    audio frame leaves within one post of its chunk being synthesized."""
    from voicewire.speech_link import AudioChunk

    latency = 0.03
    first_chunk: list[float] = []

    async def opening():
        session = open_speech_session(speech_server.ws_url)
        await session.open()
        events = session.events

        async def timed(request_id):
            async for event in events(request_id):
                if isinstance(event, AudioChunk) and not first_chunk:
                    first_chunk.append(time.monotonic())
                yield event

        session.events = timed
        return session

    outcome, connection, llm = await run_turn(
        speech_server, "bidi", "Tell me a story", speech_opening=opening, post_latency=latency
    )
    assert outcome.status == "complete"
    audio_answered = [at for at, data in connection.answered if data[:1] == b"\xa1"]
    waited = audio_answered[0] - first_chunk[0]
    # Its own post, plus up to one more post's time of scheduling slack (the model synthesizes
    # on the same 2 cores); text piled up in front of the audio costs many posts: ~1 s before
    # the text lane.
    assert waited <= 2 * latency + 0.04, f"first audio left {waited * 1000:.0f} ms after its chunk"
    deltas = [f for f in connection.frames() if isinstance(f, dict) and f["type"] == "text_delta"]
    assert len(deltas) < len(llm.default.events) / 4  # coalesced


async def test_sentence_text_deltas_carry_the_text_up_to_each_sentence(aws, speech_server):
    outcome, connection, _ = await run_turn(
        speech_server, "bidi", "What is the meaning of life?", text_flush="sentence"
    )
    frames = [f for f in connection.frames() if isinstance(f, dict)]
    deltas = [f for f in frames if f["type"] == "text_delta"]
    sentences = [f for f in frames if f["type"] == "sentence"]
    assert outcome.status == "complete"
    assert "".join(d["text"] for d in deltas) == outcome.answer
    # One post per sentence (and one for what follows the last), not one per model delta.
    assert len(deltas) <= len(sentences) + 1


def test_the_first_sentence_and_long_later_ones_are_cut_early():
    from functions.turn import LONG_SENTENCE_WORDS, cut_early

    long = " ".join(["word"] * (LONG_SENTENCE_WORDS + 1)) + "."
    short = "A short later sentence."
    assert cut_early(short, 0) and cut_early(long, 0)
    assert not cut_early(short, 3)  # spoken whole: it is ready before the audio runs out
    assert cut_early(long, 3)
