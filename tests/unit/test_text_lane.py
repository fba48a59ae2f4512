"""The relay's lanes over an in-memory sink: the text lane coalesces text deltas and keeps
their order; the ordered lane keeps its order, even when a caller is cancelled mid-send; and
each frame keeps its WebSocket type (the sink's ``bytes`` or ``str``)."""

from __future__ import annotations

import asyncio
import json

import pytest

from functions.adapters.frame_sink import ClientGone
from functions.adapters.relay import Relay
from functions.adapters.text_lane import TextLane
from voicewire.client_protocol import (
    TextDelta,
    TurnEnd,
    TurnStart,
    decode_audio_frame,
    dump_control,
    encode_base64_audio,
)


class MemorySink:
    """Keeps every frame it is sent; ``delay(frame)``: how long its send takes."""

    def __init__(self, delay=lambda frame: 0.0, gone: bool = False) -> None:
        self.frames: list[bytes | str] = []
        self.started: list[bytes | str] = []
        self.delay = delay
        self.gone = gone

    async def send(self, frame: bytes | str) -> None:
        if self.gone:
            raise ClientGone("memory")
        self.started.append(frame)
        if pause := self.delay(frame):
            await asyncio.sleep(pause)
        self.frames.append(frame)

    def kinds(self) -> list[str]:
        return [
            "audio" if isinstance(frame, bytes) else json.loads(frame)["type"]
            for frame in self.frames
        ]

    def texts(self) -> list[tuple[int, str]]:
        return [
            (delta["seq"], delta["text"])
            for frame in self.frames
            if isinstance(frame, str) and (delta := json.loads(frame))["type"] == "text_delta"
        ]


def turn_end(relay: Relay, status: str = "complete") -> TurnEnd:
    return TurnEnd(
        turn_id="t-1",
        status=status,
        timings={},
        audio_bytes=relay.audio_bytes,
        audio_frames=relay.audio_frames,
    )


def is_text_delta(frame: bytes | str) -> bool:
    return isinstance(frame, str) and '"text_delta"' in frame


# --- the text lane on its own -------------------------------------------------------------------


async def test_fragments_given_while_a_post_is_out_are_coalesced_into_the_next():
    posted: list[TextDelta] = []
    release = asyncio.Event()

    async def post(frame: TextDelta) -> None:
        posted.append(frame)
        await release.wait()  # the first post is slow: the rest pile up behind it

    lane = TextLane(post, interval=0.0)
    lane.add("t-1", "Hel")
    await asyncio.sleep(0.01)
    for piece in ["lo", ", ", "wor", "ld"]:
        lane.add("t-1", piece)
    release.set()
    await lane.finish()
    assert [(frame.seq, frame.text) for frame in posted] == [(0, "Hel"), (1, "lo, world")]
    assert lane.deltas == 5 and not lane.posting


async def test_sentence_mode_posts_up_to_each_flush():
    posted: list[TextDelta] = []

    async def post(frame: TextDelta) -> None:
        posted.append(frame)

    lane = TextLane(post, flush="sentence")
    lane.add("t-1", "One. ")
    lane.add("t-1", "Two.")
    await asyncio.sleep(0.01)
    assert posted == []  # nothing is due before a flush
    lane.flush()
    lane.add("t-1", " Three")
    await asyncio.sleep(0.01)
    await lane.finish()
    assert [frame.text for frame in posted] == ["One. Two.", " Three"]


async def test_a_lane_carries_one_turn_and_checks_its_mode():
    async def post(frame: TextDelta) -> None:
        pass

    lane = TextLane(post)
    lane.add("t-1", "a")
    with pytest.raises(ValueError, match="one turn"):
        lane.add("t-2", "b")
    await lane.close()
    with pytest.raises(ValueError, match="text_flush"):
        TextLane(post, flush="word")  # type: ignore[arg-type]


# --- the text lane against the ordered lane -----------------------------------------------------


async def test_text_is_coalesced_in_order_and_the_turn_end_comes_after_it():
    sink = MemorySink(delay=lambda frame: 0.02 if is_text_delta(frame) else 0.001)
    relay = Relay(sink, turn=1, text_interval=0.05)
    await relay.control(TurnStart(turn_id="t-1", turn=1, mode="bidi"))
    words = [f"w{i} " for i in range(30)]

    async def write() -> None:
        for word in words:
            await relay.text("t-1", word)
            await asyncio.sleep(0.003)

    async def speak() -> None:
        for _ in range(5):
            await relay.audio(bytes(4800))
            await asyncio.sleep(0.01)

    await asyncio.gather(write(), speak())
    await relay.finish_text()
    await relay.control(turn_end(relay))
    texts = sink.texts()
    assert "".join(text for _, text in texts) == "".join(words)  # nothing lost or doubled
    assert [seq for seq, _ in texts] == list(range(len(texts)))  # in order
    assert len(texts) < len(words) / 2  # coalesced
    kinds = sink.kinds()
    assert kinds[0] == "turn_start" and kinds[-1] == "turn_end"
    assert [decode_audio_frame(f)[1] for f in sink.frames if isinstance(f, bytes)] == [
        0,
        1,
        2,
        3,
        4,
    ]
    assert relay.text_deltas == 30 and relay.text_posts == len(texts)
    assert relay.frames == len(sink.frames)
    assert relay.bytes_sent == sum(
        len(frame.encode() if isinstance(frame, str) else frame) for frame in sink.frames
    )


async def test_audio_does_not_wait_behind_a_slow_text_post():
    sink = MemorySink(delay=lambda frame: 0.5 if is_text_delta(frame) else 0.0)
    relay = Relay(sink, turn=1)
    await relay.text("t-1", "Hello")
    await asyncio.sleep(0.01)  # the text post is out, and slow
    await asyncio.wait_for(relay.audio(bytes(480)), 0.2)
    assert sink.kinds() == ["audio"]
    await relay.close()  # returns once the text post in flight is done
    assert sink.kinds() == ["audio", "text_delta"] and relay.text_posts == 1


async def test_a_gone_client_stops_the_text_lane_and_surfaces_at_the_next_text():
    sink = MemorySink(gone=True)
    relay = Relay(sink, turn=1)
    await relay.text("t-1", "Hello")
    with pytest.raises(ClientGone):
        await relay.finish_text()
    with pytest.raises(ClientGone):
        await relay.text("t-1", " again")
    assert relay.frames == 0 and relay.text_posts == 0


# --- the ordered lane -------------------------------------------------------------------------


async def test_a_frame_whose_caller_is_cancelled_is_still_sent_before_the_next():
    """A cancelled turn still ends with its turn_end: the audio frame it was sending completes
    (it cannot be taken back half-sent), keeps its seq, and the turn_end follows it."""
    sink = MemorySink(delay=lambda frame: 0.05 if isinstance(frame, bytes) else 0.0)
    relay = Relay(sink, turn=1)
    speaking = asyncio.create_task(relay.audio(bytes(80_000)))  # three frames
    await asyncio.sleep(0.01)  # the first frame is being sent
    speaking.cancel()
    with pytest.raises(asyncio.CancelledError):
        await speaking
    await relay.control(turn_end(relay, "cancelled"))
    assert sink.kinds() == ["audio", "turn_end"]
    assert decode_audio_frame(sink.frames[0])[:2] == (1, 0)
    assert relay.audio_frames == 1 and relay.frames == 2
    await relay.audio(bytes(480))  # a later frame takes the next seq, not a reused one
    assert decode_audio_frame(sink.frames[-1])[:2] == (1, 1)


async def test_frames_keep_their_websocket_type():
    """The wire as before: binary audio as bytes, JSON (control, text, base64 audio) as str."""
    sink = MemorySink()
    relay = Relay(sink, turn=4)
    start = TurnStart(turn_id="t-4", turn=4, mode="bidi")
    await relay.control(start)
    await relay.audio(b"\x01\x02")
    assert sink.frames == [
        dump_control(start).decode(),
        b"\xa1\x00\x00\x00\x04\x00\x00\x00\x00\x01\x02",
    ]
    base64 = MemorySink()
    await Relay(base64, turn=4, delivery="base64").audio(b"\x01\x02")
    assert base64.frames == [encode_base64_audio(4, 0, b"\x01\x02").decode()]
