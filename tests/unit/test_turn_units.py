"""The turn's own units, without a speech server: the filler's schedule over the rounds of tool
calls, and the audio reader's word times moved onto the turn's audio."""

import asyncio
import time

import pytest

from functions.conversation.heard import TurnWord
from functions.turn.arrival import AudioOut
from functions.turn.audio_reader import SpokenRequest, TurnAudio
from functions.turn.fillers import ToolFillers, ToolRound
from voicewire.client_protocol import Words
from voicewire.speech_link import AudioChunk
from voicewire.speech_protocol import SAMPLE_WIDTH, TimedWord, WordsFrame


def fillers(delay: float | None = 0.01, heard_until: float = 0.0) -> tuple[ToolFillers, list[str]]:
    said = ToolRound()
    spoken: list[str] = []

    async def say_filler() -> None:
        spoken.append("One moment.")
        said.spoke()

    return ToolFillers(said, say_filler, lambda: heard_until, delay), spoken


async def test_a_silent_round_gets_its_filler_once():
    schedule, spoken = fillers()
    schedule.said.tool_started("a")
    schedule.tool_started()
    await schedule.still_running()
    await schedule.still_running()
    assert spoken == ["One moment."]


async def test_the_next_round_gets_its_own_filler():
    schedule, spoken = fillers()
    schedule.said.tool_started("a")
    await schedule.still_running()
    schedule.said.tool_ended("a")
    schedule.tool_ended()
    assert schedule.said.round == 1 and not schedule.said.filled
    schedule.said.tool_started("b")
    await schedule.still_running()
    assert spoken == ["One moment.", "One moment."]


async def test_a_preamble_waits_out_its_audio_before_the_filler():
    # The preamble's audio plays until 0.1 s from now: the filler comes after it and the quiet.
    schedule, spoken = fillers(delay=0.01, heard_until=time.monotonic() + 0.1)
    schedule.said.spoke()  # the preamble
    schedule.said.tool_started("a")
    schedule.tool_started()
    await schedule.still_running()  # something was said in this round: not now
    assert spoken == []
    await asyncio.sleep(0.3)
    assert spoken == []  # 0.1 s of audio + 0.5 s of quiet have not passed yet
    await asyncio.sleep(0.5)
    assert spoken == ["One moment."]


async def test_a_tool_that_ends_calls_off_the_waiting_filler():
    schedule, spoken = fillers(delay=0.05)
    schedule.said.spoke()
    schedule.said.tool_started("a")
    schedule.tool_started()
    schedule.said.tool_ended("a")
    schedule.tool_ended()
    await asyncio.sleep(0.7)
    assert spoken == []


async def test_no_delay_no_scheduled_filler():
    schedule, spoken = fillers(delay=None)
    schedule.said.spoke()
    schedule.said.tool_started("a")
    schedule.tool_started()
    await asyncio.sleep(0.6)
    await schedule.still_running()
    assert spoken == []


class RecordedSpeech:
    """A speech session's events for each request, as the speech server sends them."""

    def __init__(self, events: dict[str, list[object]]) -> None:
        self._events = events

    async def events(self, request_id: str, idle_timeout: float | None = None):
        for event in self._events[request_id]:
            yield event


def pcm(samples: int) -> bytes:
    return b"\x00" * samples * SAMPLE_WIDTH


async def test_word_times_move_onto_the_turns_audio():
    speech = RecordedSpeech(
        {
            "r1": [
                WordsFrame(request_id="r1", words=[TimedWord(text="Hi", start=0, end=2400)]),
                AudioChunk("r1", pcm(4800)),
            ],
            "r2": [
                WordsFrame(request_id="r2", words=[TimedWord(text="there", start=240, end=2400)]),
                AudioChunk("r2", pcm(2400)),
            ],
        }
    )
    audio = TurnAudio("t1", word_timings=True)
    audio.requested("r1", SpokenRequest("Hi", round=0, filler=False))
    audio.requested("r2", SpokenRequest("there", round=1, filler=False))
    first = [item async for item in audio.read(speech, "r1", idle_timeout=None)]
    second = [item async for item in audio.read(speech, "r2", idle_timeout=None)]
    assert isinstance(first[0], Words) and first[0].words[0].end_ms == 100.0
    # r2's words start after r1's 4800 samples (200 ms).
    assert isinstance(second[0], Words)
    assert (second[0].words[0].start_ms, second[0].words[0].end_ms) == (210.0, 300.0)
    assert audio.words == [TurnWord("Hi", 100.0, 0, False), TurnWord("there", 300.0, 1, False)]
    assert audio.queued_samples == 7200


async def test_untimed_audio_spreads_its_words_for_the_history_only():
    speech = RecordedSpeech({"r1": [AudioChunk("r1", pcm(4800))]})
    audio = TurnAudio("t1", word_timings=False)
    audio.requested("r1", SpokenRequest("One moment.", round=0, filler=True))
    items = [item async for item in audio.read(speech, "r1", idle_timeout=None)]
    assert items == [AudioOut(pcm(4800))]  # no words frame for the client
    assert audio.words == [TurnWord("One", 100.0, 0, True), TurnWord("moment.", 200.0, 0, True)]


@pytest.mark.parametrize("timings", [True, False])
async def test_words_frames_follow_the_clients_choice(timings):
    frame = WordsFrame(request_id="r1", words=[TimedWord(text="Hi", start=0, end=2400)])
    speech = RecordedSpeech({"r1": [frame, AudioChunk("r1", pcm(2400))]})
    audio = TurnAudio("t1", word_timings=timings)
    audio.requested("r1", SpokenRequest("Hi", round=0, filler=False))
    items = [item async for item in audio.read(speech, "r1", idle_timeout=None)]
    assert any(isinstance(item, Words) for item in items) is timings
    assert audio.words == [TurnWord("Hi", 100.0, 0, False)]  # the history has them either way
