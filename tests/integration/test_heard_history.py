"""What the listener heard (issue 28), the worker's half: ``words`` frames on the client link,
``heard_ms`` on a cancel or a barge-in, the cut turn kept in the history as heard, and the
``history`` action.

Over real parts: the speech server app over the tone engine (``speech_standin``, which times
its words as the real engines do: evenly over each chunk), moto's @connections API or the
``connections_server``, moto's DynamoDB, the message route and the worker unchanged
(``turn_harness``)."""

from __future__ import annotations

import base64
import threading
import time

import pytest
from conftest import start_server
from speech_standin import ToneEngine
from test_faults import dynamodb_url, make_world  # noqa: F401  (fixtures)
from test_tool_stack import bedrock_accepts
from turn_harness import apigw_event, run_turn

from functions.adapters.bedrock_request import converse_request
from functions.adapters.replay_llm import ReplayBedrockClient
from functions.conversation.heard import (
    INTERRUPTED_MARK,
    NOTHING_HEARD,
    TurnWord,
    heard_messages,
    remembered,
)
from functions.handlers.messages import handle_message
from functions.tools import sample_tools

BYTES_PER_MS = 48  # 24 kHz, 2 bytes a sample


@pytest.fixture
def tone():
    """The real speech server app over the tone engine: ``(server, engine)``."""
    servers = []

    def start(engine: ToneEngine | None = None):
        engine = engine or ToneEngine()
        servers.append(start_server(lambda: engine))
        return servers[-1], engine

    yield start
    for server in servers:
        server.stop()


def timeline(frames: list) -> list[tuple[str, object]]:
    """Each frame as (kind, frame), audio (binary or base64) as ("audio", its PCM)."""
    out = []
    for frame in frames:
        if isinstance(frame, tuple):
            out.append(("audio", frame[2]))
        elif frame["type"] == "audio":
            out.append(("audio", base64.b64decode(frame["data"])))
        else:
            out.append((frame["type"], frame))
    return out


def words_of(frames: list) -> list[dict]:
    return [word for kind, f in timeline(frames) if kind == "words" for word in f["words"]]


def check_words_lead_their_audio(frames: list) -> int:
    """Every words frame comes before the audio it times, its times counted from the start of
    the turn's audio: the tone's words start where their chunk's audio starts, so each frame's
    first word starts exactly at the audio posted before it. Returns the frames checked."""
    posted_ms, checked = 0.0, 0
    for kind, frame in timeline(frames):
        if kind == "audio":
            posted_ms += len(frame) / BYTES_PER_MS
        elif kind == "words":
            words = frame["words"]
            assert words[0]["start_ms"] == pytest.approx(posted_ms, abs=0.1)
            for word in words:
                assert word["start_ms"] < word["end_ms"]
            checked += 1
    last = words_of(frames)[-1]
    assert last["end_ms"] <= posted_ms + 0.1  # no word past the turn's audio
    return checked


@pytest.mark.parametrize(
    ("mode", "delivery"), [("bidi", "binary"), ("batch", "base64"), ("speak", "base64")]
)
async def test_words_frames_come_before_their_audio_timed_over_the_whole_turn(
    aws, tone, mode, delivery
):
    server, _ = tone()
    outcome, connection, _ = await run_turn(
        server,
        mode,
        "What is the meaning of life?",
        text="Hello there. This is a sentence that is spoken aloud, and then a second one.",
        delivery=delivery,
    )
    frames = connection.frames()
    assert outcome.status == "complete"
    assert check_words_lead_their_audio(frames) >= 2  # several chunks, offsets accumulated
    sentences = [f["text"] for kind, f in timeline(frames) if kind == "sentence"]
    assert [word["text"] for word in words_of(frames)] == " ".join(sentences).split()
    assert all(f["turn_id"] == "turn-3" for kind, f in timeline(frames) if kind == "words")


async def test_the_filler_and_the_preamble_are_timed_as_turn_audio(aws, tone):
    server, _ = tone(ToneEngine(seconds_per_chunk=0.05))
    outcome, connection, _ = await run_turn(
        server,
        "bidi",
        "What time is it in Paris?",
        tools=sample_tools(latency_seconds=2),
        pace=0.3,
        tool_filler_seconds=0.4,
    )
    frames = connection.frames()
    said = [f["text"] for kind, f in timeline(frames) if kind == "sentence"]
    assert said[:2] == ["Let me check the clock.", "One moment."]  # preamble, then the filler
    check_words_lead_their_audio(frames)
    texts = [word["text"] for word in words_of(frames)]
    assert texts[:7] == ["Let", "me", "check", "the", "clock.", "One", "moment."]
    # The turn remembers which words were the filler (the model never said them).
    assert [(w.text, w.filler) for w in outcome.words[4:7]] == [
        ("clock.", False),
        ("One", True),
        ("moment.", True),
    ]
    assert {w.round for w in outcome.words[:7]} == {0} and outcome.words[-1].round == 1


async def test_word_timings_off_sends_no_words_and_asks_the_server_for_none(aws, tone):
    server, engine = tone()
    outcome, connection, _ = await run_turn(
        server, "bidi", "What is the meaning of life?", word_timings=False
    )
    kinds = [kind for kind, _ in timeline(connection.frames())]
    assert outcome.status == "complete" and "audio" in kinds
    assert "words" not in kinds and engine.timed_chunks == 0
    # The history can still be cut at a word: the turn spreads each sentence's words over its
    # audio.
    assert [w.text for w in outcome.words] == outcome.answer.split()
    ends = [w.end_ms for w in outcome.words]
    assert ends == sorted(ends) and ends[-1] == pytest.approx(outcome.audio_ms, abs=0.2)


# --- the cut itself -----------------------------------------------------------------------


def spoken(*texts: str, round_: int = 0, filler: bool = False, start: int = 0) -> list[TurnWord]:
    return [
        TurnWord(text, (start + index + 1) * 100.0, round_, filler)
        for index, text in enumerate(texts)
    ]


def test_the_cut_keeps_the_words_that_ended_before_heard_ms():
    words = spoken("The", "plan", "has", "three", "steps.")
    answer = [{"role": "assistant", "content": [{"text": "The plan has three steps."}]}]
    kept = heard_messages(answer, words, heard_ms=350)  # "three" ends at 400: not heard whole
    assert kept == [
        {"role": "assistant", "content": [{"text": f"The plan has {INTERRUPTED_MARK}"}]}
    ]
    assert heard_messages(answer, words, heard_ms=40) == [
        {"role": "assistant", "content": [{"text": NOTHING_HEARD}]}
    ]
    # An answer cut while the model still wrote it has no message yet: the words make one.
    assert heard_messages([], words, heard_ms=250) == [
        {"role": "assistant", "content": [{"text": f"The plan {INTERRUPTED_MARK}"}]}
    ]


def test_a_cut_tool_turn_keeps_its_calls_and_stays_a_conversation_bedrock_accepts():
    use = {"toolUse": {"toolUseId": "t1", "name": "current_time", "input": {}}}
    result = {
        "toolResult": {"toolUseId": "t1", "content": [{"text": "cancelled"}], "status": "error"}
    }
    messages = [
        {"role": "assistant", "content": [{"text": "Let me check the clock."}, use]},
        {"role": "user", "content": [result]},
    ]
    words = spoken("Let", "me", "check", "the", "clock.") + spoken(
        "One", "moment.", filler=True, start=5
    )
    kept = heard_messages(messages, words, heard_ms=700)  # the filler heard too: not kept
    assert kept[0] == {"role": "assistant", "content": [{"text": "Let me check the clock."}, use]}
    assert kept[1] == messages[1]
    assert kept[2] == {"role": "assistant", "content": [{"text": INTERRUPTED_MARK}]}
    early = heard_messages(messages, words, heard_ms=150)  # "Let" only: the call stays
    assert early[0]["content"] == [{"text": "Let"}, use]
    for cut in (kept, early):
        bedrock_accepts(
            converse_request(
                "m", [{"role": "user", "content": [{"text": "Time?"}]}, *cut], "And now?"
            )["messages"]
        )
    # What a person is shown: the words heard, marked interrupted, no tool blocks.
    shown = remembered([{"role": "user", "content": [{"text": "Time?"}]}, *early])
    assert [(m.role, m.text, m.interrupted) for m in shown] == [
        ("user", "Time?", False),
        ("assistant", "Let", True),
    ]


# --- through the message route and the worker ----------------------------------------------


def wait_for(predicate, within: float = 20.0, what: str = "a condition"):
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if found := predicate():
            return found
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def run_in_thread(world, job: dict, request_id: str) -> threading.Thread:
    thread = threading.Thread(target=world.run_worker, args=(job, request_id), daemon=True)
    thread.start()
    return thread


def frames_of(world, kind: str) -> list[dict]:
    return [f for f in world.received() if isinstance(f, dict) and f["type"] == kind]


def assistant_texts(history: list[dict]) -> list[str]:
    return [
        b["text"] for m in history if m["role"] == "assistant" for b in m["content"] if "text" in b
    ]


def test_a_cancel_with_heard_ms_keeps_only_the_words_heard(make_world, tone):  # noqa: F811
    server, _ = tone(ToneEngine(seconds_per_chunk=0.15))
    world = make_world(server.ws_url)
    world.connect()
    job = world.message("ask_bidi", prompt="What is the meaning of life?", turn_id="t1")
    worker = run_in_thread(world, job, "request-1")
    first = wait_for(lambda: next(iter(frames_of(world, "words")), None), what="words")
    heard_ms = first["words"][1]["end_ms"] + 1  # the second word heard whole, not the third
    world.message("cancel", turn_id="t1", heard_ms=heard_ms)
    worker.join(30)
    assert world.turn("t1").status == "cancelled"
    assert world.turn("t1").heard_ms == pytest.approx(heard_ms)
    history = world.connection().history
    two = " ".join(word["text"] for word in first["words"][:2])
    assert history == [
        {"role": "user", "content": [{"text": "What is the meaning of life?"}]},
        {"role": "assistant", "content": [{"text": f"{two} {INTERRUPTED_MARK}"}]},
    ]
    # The history action: what the agent will remember, as a person reads it.
    world.message("voices", action="history")
    assert frames_of(world, "history")[-1] == {
        "type": "history",
        "messages": [
            {"role": "user", "text": "What is the meaning of life?", "interrupted": False},
            {"role": "assistant", "text": two, "interrupted": True},
        ],
    }


def test_without_heard_ms_the_worker_estimates_and_says_so(make_world, tone, caplog):  # noqa: F811
    server, _ = tone(ToneEngine(seconds_per_chunk=0.15))
    world = make_world(server.ws_url)
    world.connect()
    job = world.message("ask_bidi", prompt="What is the meaning of life?", turn_id="t1")
    worker = run_in_thread(world, job, "request-1")
    wait_for(lambda: any(isinstance(f, tuple) for f in world.received()), what="audio")
    time.sleep(0.5)  # the client plays for half a second, then cancels without a word
    world.message("cancel", turn_id="t1")
    worker.join(30)
    ended = [record.__dict__ for record in caplog.records if record.msg == "turn ended"]
    assert ended[-1]["heard_from"] == "estimate"  # the turn's log line says which it used
    estimate = ended[-1]["heard_ms"]
    audio_ms = ended[-1]["audio_bytes"] / BYTES_PER_MS
    assert 500 <= estimate <= audio_ms  # at least the time it played, at most what was sent
    heard = [w["text"] for w in words_of(world.received()) if w["end_ms"] <= estimate]
    said = assistant_texts(world.connection().history)
    assert said == [" ".join([*heard, INTERRUPTED_MARK]) if heard else NOTHING_HEARD]


def test_a_barge_in_with_heard_ms_is_answered_over_the_heard_history(make_world, tone):  # noqa: F811
    server, _ = tone(ToneEngine(seconds_per_chunk=0.15))
    requests: list[dict] = []
    world = make_world(server.ws_url, ReplayBedrockClient(pace=0.2, requests=requests))
    world.connect()
    first_job = world.message("ask_bidi", prompt="What is the meaning of life?", turn_id="t1")
    first = run_in_thread(world, first_job, "request-1")
    words = wait_for(lambda: next(iter(frames_of(world, "words")), None), what="words")["words"]
    heard_ms = words[2]["end_ms"]  # up to the third word's end: three words heard
    second_job = world.message("ask_bidi", prompt="Go on.", turn_id="t2", heard_ms=heard_ms)
    assert second_job["replaces"] == "t1"
    second = run_in_thread(world, second_job, "request-2")  # at once, as Lambda would
    first.join(30)
    second.join(30)
    assert [world.turn(t).status for t in ("t1", "t2")] == ["cancelled", "complete"]
    # The barge-in's answer was asked over the cut history (it waited for it), and Bedrock
    # accepts that conversation.
    asked = requests[-1]["messages"]
    bedrock_accepts(asked)
    three = " ".join(word["text"] for word in words[:3])
    assert asked[:3] == [
        {"role": "user", "content": [{"text": "What is the meaning of life?"}]},
        {"role": "assistant", "content": [{"text": f"{three} {INTERRUPTED_MARK}"}]},
        {"role": "user", "content": [{"text": "Go on."}]},
    ]


def test_a_barge_in_during_a_tool_call_leaves_a_history_bedrock_accepts(make_world, tone):  # noqa: F811
    server, _ = tone()
    requests: list[dict] = []
    world = make_world(
        server.ws_url, ReplayBedrockClient(pace=0.3, requests=requests), tool_latency_ms=6000
    )
    world.connect()
    first_job = world.message("ask_bidi", prompt="What time is it?", turn_id="t1")
    first = run_in_thread(world, first_job, "request-1")
    wait_for(lambda: frames_of(world, "tool_start") and frames_of(world, "words"), what="tool")
    preamble = frames_of(world, "words")[0]["words"]
    heard_ms = preamble[-1]["end_ms"]  # the whole preamble heard
    started = time.monotonic()
    second_job = world.message("ask_bidi", prompt="Hello there!", turn_id="t2", heard_ms=heard_ms)
    second = run_in_thread(world, second_job, "request-2")
    first.join(30)
    second.join(30)
    assert time.monotonic() - started < 6  # the 6 s tool was not waited for
    assert [world.turn(t).status for t in ("t1", "t2")] == ["cancelled", "complete"]
    asked = requests[-1]["messages"]
    bedrock_accepts(asked)
    assert asked[1]["content"][0] == {"text": " ".join(word["text"] for word in preamble)}
    result = asked[2]["content"][0]["toolResult"]
    assert result["toolUseId"] == asked[1]["content"][1]["toolUse"]["toolUseId"]
    assert asked[3] == {"role": "assistant", "content": [{"text": INTERRUPTED_MARK}]}
    assert asked[4] == {"role": "user", "content": [{"text": "Hello there!"}]}


def test_heard_ms_after_the_turn_ended_cuts_its_history_without_an_error(make_world, tone):  # noqa: F811
    server, _ = tone()
    world = make_world(server.ws_url)
    world.connect()
    job = world.message("ask_bidi", prompt="What is the meaning of life?", turn_id="t1")
    world.run_worker(job, "request-1")  # ended here; its audio still plays there
    assert world.turn("t1").status == "complete"
    words = words_of(world.received())
    world.message("cancel", turn_id="t1", heard_ms=words[0]["end_ms"])
    assert frames_of(world, "error") == []  # the cancel did what it could: the cut
    said = assistant_texts(world.connection().history)
    assert said == [f"{words[0]['text']} {INTERRUPTED_MARK}"]
    # Once: a second cancel of the same turn is what it was before (not running).
    world.message("cancel", turn_id="t1", heard_ms=0)
    assert frames_of(world, "error")[-1]["code"] == "unknown_turn"
    assert assistant_texts(world.connection().history) == said


@pytest.mark.parametrize(
    "body",
    [
        '{"action": "cancel", "heard_ms": -5}',
        '{"action": "cancel", "heard_ms": "1200"}',
        '{"action": "ask", "prompt": "Hi", "heard_ms": true}',
        '{"action": "ask", "prompt": "Hi", "heard_ms": NaN}',
    ],
)
def test_a_bad_heard_ms_is_a_clear_error_and_the_connection_stays_usable(make_world, tone, body):  # noqa: F811
    server, _ = tone()
    world = make_world(server.ws_url)
    world.connect()
    event = apigw_event("cancel")
    event["body"] = body
    assert handle_message(event, world.adapters) == {"statusCode": 200}
    error = frames_of(world, "error")[-1]
    # NaN is not JSON: the strict parser refuses it before any field is read.
    assert error["code"] == ("invalid_json" if "NaN" in body else "invalid_heard_ms")
    assert world.lambda_client.calls == []  # nothing started
    world.message("voices", action="history")
    assert frames_of(world, "history")[-1] == {"type": "history", "messages": []}
    job = world.message("ask_bidi", prompt="Hello there!", turn_id="t9")
    assert world.run_worker(job, "request-9") == {"status": "complete"}


# --- voicewire ask ---------------------------------------------------------------------------


def test_ask_prints_a_line_per_words_frame():
    from voicewire.turn_client import TimedEvent
    from voicewire_tools.commands.ask import timeline_line

    frame = {
        "type": "words",
        "turn_id": "t1",
        "words": [
            {"text": "Hello", "start_ms": 0.0, "end_ms": 310.5},
            {"text": "there.", "start_ms": 310.5, "end_ms": 702.0},
        ],
    }
    line = timeline_line(TimedEvent(12.0, "words", frame))
    assert line.split()[2:] == ["words", "Hello@0", "there.@310"]


async def test_an_interrupted_ask_cancels_its_turn_with_the_audio_received_as_heard():
    """What ``voicewire ask`` does on Ctrl-C (``asyncio.run`` cancels its task): a server that
    sent 0.3 s of audio and then keeps the turn open is told heard_ms=300."""
    import asyncio
    import json
    import struct

    from websockets.asyncio.server import serve

    from voicewire.turn_client import run_turn as ask_turn

    told: list[dict] = []
    cancelled = asyncio.Event()

    async def server(websocket) -> None:
        async for raw in websocket:
            message = json.loads(raw)
            if message["action"] == "cancel":
                told.append(message)
                cancelled.set()
                continue
            start = {
                "type": "turn_start",
                "turn_id": "t-7",
                "turn": 1,
                "mode": "bidi",
                "audio": {"delivery": "binary"},
            }
            await websocket.send(json.dumps(start))
            for seq in range(3):  # 0.1 s each
                await websocket.send(bytes([0xA1]) + struct.pack(">II", 1, seq) + bytes(4800))

    async with serve(server, "127.0.0.1", 0) as running:
        host, port = running.sockets[0].getsockname()[:2]
        frames: list[str] = []
        all_audio = asyncio.Event()

        def on_event(event) -> None:
            frames.append(event.kind)
            if frames.count("audio") == 3:
                all_audio.set()

        message = {"action": "ask", "prompt": "Hi"}
        asking = asyncio.create_task(ask_turn(f"ws://{host}:{port}/", message, on_event))
        await asyncio.wait_for(all_audio.wait(), 10)
        asking.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asking
        await asyncio.wait_for(cancelled.wait(), 5)
    assert told == [{"action": "cancel", "turn_id": "t-7", "heard_ms": 300.0}]
