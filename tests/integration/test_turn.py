"""Whole turns over real parts: replay LLM, real speech server, moto's @connections API."""

from __future__ import annotations

import asyncio
import json
import threading
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


def first_text_delta(loop: asyncio.AbstractEventLoop) -> tuple[asyncio.Event, object]:
    """An event set once the turn has posted its first text_delta, and the ``watch`` that
    sets it (posts run on threads)."""
    posted = asyncio.Event()

    def watch(data: bytes) -> None:
        if data[:1] == b"{" and json.loads(data)["type"] == "text_delta":
            loop.call_soon_threadsafe(posted.set)

    return posted, watch


async def test_the_turn_streams_text_while_its_speech_session_opens(aws, speech_server):
    """The worker hands the turn a session still opening: text flows at once, speech waits
    for the session only at the first sentence. Here the session opens only once text has
    been posted: a turn that waited for its session before its text would never finish."""
    opened_at = []
    text_posted, watch = first_text_delta(asyncio.get_running_loop())

    async def open_after_the_first_text():
        async with asyncio.timeout(30):
            await text_posted.wait()
        session = open_speech_session(speech_server.ws_url)
        await session.open()
        opened_at.append(time.monotonic())
        return session

    outcome, connection, _ = await run_turn(
        speech_server,
        "bidi",
        "Hello there",  # the short recorded answer: three sentences
        speech_opening=open_after_the_first_text,
        watch=watch,
    )
    assert outcome.status == "complete"
    frames = connection.frames()
    posted = [(at, frame) for (at, _), frame in zip(connection.posts, frames, strict=True)]
    first_delta = next(at for at, f in posted if isinstance(f, dict) and f["type"] == "text_delta")
    first_audio = next(at for at, f in posted if isinstance(f, tuple))
    assert first_delta < opened_at[0] < first_audio


async def test_a_speech_session_that_cannot_open_fails_the_turn_at_once(aws, speech_server):
    text_posted, watch = first_text_delta(asyncio.get_running_loop())

    async def failing_open():  # fails while the LLM is writing
        async with asyncio.timeout(30):
            await text_posted.wait()
        raise SpeechStreamError("connect_failed", "cannot open the endpoint")

    outcome, connection, llm = await run_turn(
        speech_server, "bidi", "Tell me a story", speech_opening=failing_open, watch=watch
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

        async def timed(request_id, **options):
            async for event in events(request_id, **options):
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
    # The short recorded answer: three short sentences.
    outcome, connection, _ = await run_turn(
        speech_server, "bidi", "Hello there", text_flush="sentence"
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


def audio_counts(frames) -> tuple[int, int]:
    """(frames, payload bytes) of the audio frames posted (perhaps none)."""
    audio = [frame for frame in frames if isinstance(frame, tuple)]
    if audio:
        check_audio_frames(frames)
    return len(audio), sum(len(payload) for _, _, payload in audio)


async def test_an_llm_stream_error_ends_the_turn_failed_with_llm_failed(aws, speech_server):
    """The recording writes a few words, then Bedrock's stream breaks
    (``modelStreamErrorException``)."""
    outcome, connection, llm = await run_turn(speech_server, "bidi", "[stream-error] please")
    recording = llm.choose("[stream-error]")
    frames = connection.frames()
    error, end = frames[-2], frames[-1]
    assert error["type"] == "error" and error["code"] == "llm_failed"
    assert error["turn_id"] == "turn-3" and "modelStreamErrorException" in error["message"]
    assert end["type"] == "turn_end" and end["status"] == "failed" == outcome.status
    assert outcome.answer == recording.text  # everything the model wrote before it broke
    deltas = "".join(f["text"] for f in frames if isinstance(f, dict) and f["type"] == "text_delta")
    assert recording.text.startswith(deltas)  # text not yet posted is dropped, never changed
    assert (end["audio_frames"], end["audio_bytes"]) == audio_counts(frames)


class SentenceThenBrokenStream:
    """A ConverseStream client whose answer breaks after its first sentence has been heard: it
    writes a sentence and the start of the next, waits until ``heard`` is set (the first audio
    frame was posted), then sends Bedrock's ``modelStreamErrorException``."""

    def __init__(self) -> None:
        self.heard = threading.Event()

    def converse_stream(self, **request):
        return {"stream": self._events()}

    def _events(self):
        yield {"messageStart": {"role": "assistant"}}
        for text in ("Hello there,", " this is the first sentence.", " And then the"):
            yield {"contentBlockDelta": {"delta": {"text": text}, "contentBlockIndex": 0}}
        if not self.heard.wait(30):
            raise AssertionError("no audio was posted")
        yield {"modelStreamErrorException": {"message": "The model stream broke."}}


async def test_an_llm_failure_after_audio_started_counts_the_audio_sent(aws, speech_server):
    llm = SentenceThenBrokenStream()

    def watch(data: bytes) -> None:
        if data[:1] == b"\xa1":
            llm.heard.set()

    outcome, connection, _ = await run_turn(speech_server, "bidi", "Anything", llm=llm, watch=watch)
    frames = connection.frames()
    assert [f["type"] for f in frames[-2:]] == ["error", "turn_end"]  # nothing after the end
    assert frames[-2]["code"] == "llm_failed" and frames[-1]["status"] == "failed" == outcome.status
    sent_frames, sent_bytes = audio_counts(frames)
    assert sent_frames >= 1  # the failure came after audio had been posted
    assert (frames[-1]["audio_frames"], frames[-1]["audio_bytes"]) == (sent_frames, sent_bytes)
    assert frames[-1]["timings"]["first_audio_ms"] is not None


async def test_a_speech_stream_dropping_after_audio_started_fails_the_turn_and_the_next_works(
    aws, speech_server, sagemaker_runtime
):
    """Over SageMaker, the response stream breaks (``ModelStreamError``) after the first audio
    frames: the turn ends ``failed`` with ``speech_failed``, its turn_end counts the audio the
    client did get, and the next turn, on a new stream, is spoken whole."""
    from voicewire_tools.local_stack.sagemaker_runtime import StreamFault

    text = "Hello there, the stream drops now."

    async def opening():
        session = sagemaker_runtime.session()
        await session.open()
        return session

    fault = StreamFault(after_parts=4, kind="model")  # synthesis_start, then 3 audio frames
    sagemaker_runtime.runtime.fail_next_stream(fault)
    # Without word timings: their words frames would be parts of the stream too.
    outcome, connection, _ = await run_turn(
        speech_server, "speak", text=text, speech_opening=opening, word_timings=False
    )
    frames = connection.frames()
    assert [f["type"] for f in frames[-2:]] == ["error", "turn_end"]
    error, end = frames[-2:]
    assert error["code"] == "speech_failed" and "model_stream_error" in error["message"]
    assert end["status"] == "failed" == outcome.status
    sent_frames, sent_bytes = audio_counts(frames)
    # Every audio frame that came before the break reached the client (one post each).
    assert sent_frames == fault.after_parts - 1
    assert (end["audio_frames"], end["audio_bytes"]) == (sent_frames, sent_bytes)

    after, connection, _ = await run_turn(speech_server, "speak", text=text, speech_opening=opening)
    assert after.status == "complete" and connection.frames()[-1]["status"] == "complete"
    assert audio_counts(connection.frames())[1] > sent_bytes
