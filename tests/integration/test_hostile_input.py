"""Every row of tests/hostile_inputs.py, over the real links: a real speech session, the local
stack's client WebSocket, and the message Lambda handler as API Gateway would invoke it. Each bad
input gets its documented code, the session or connection stays usable, the process stays up."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from hostile_inputs import CLIENT_LINK, SPEECH_LINK, Hostile
from speech_client import collect_reply, next_control
from test_handlers import CONNECTION, adapters, posted, sample  # noqa: F401 (fixture)
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from functions.handlers.connect import connect as connect_handler
from functions.handlers.messages import handle_message
from voicewire.client_protocol import MAX_MESSAGE_BYTES, decode_audio_frame

# An error message quotes what was sent cut short: a 100 KB voice is not echoed back.
MAX_ERROR_MESSAGE_CHARS = 1_000  # the unknown-voice error lists all 54 voices


def test_the_tables_are_big_enough_and_name_each_input_once():
    for table in (SPEECH_LINK, CLIENT_LINK):
        assert len([row for row in table if row.code is not None]) >= 40
        assert len({row.name for row in table}) == len(table)
        assert len({row.frame for row in table}) == len(table)


# --- the speech link -----------------------------------------------------------------------


async def test_every_hostile_speech_message_gets_its_code_and_the_session_goes_on(speech_server):
    mismatches: list[tuple[str, str | None, object]] = []
    audio: dict[str, int] = {}
    async with connect(speech_server.ws_url, max_size=None) as ws:
        for row in SPEECH_LINK:
            await ws.send(row.frame)
            if row.code is None:
                reply = await collect_reply(ws)
                assert reply.complete is not None
                if reply.complete["status"] != "complete":
                    mismatches.append((row.name, None, reply.complete["status"]))
                audio[row.name] = len(reply.audio)
                continue
            answer = await next_control(ws)
            if answer.get("code") != row.code:
                mismatches.append((row.name, row.code, answer))
            assert answer["type"] == "error"
            assert 0 < len(answer["message"]) <= MAX_ERROR_MESSAGE_CHARS, row.name
        # The words after a NUL are spoken: as long as the same words without it.
        await ws.send(json.dumps({"text": "Hello there friend."}))
        clean = await collect_reply(ws)
    assert mismatches == []
    assert clean.complete is not None and clean.complete["status"] == "complete"
    with_controls = audio["control characters inside text"]
    assert abs(with_controls - len(clean.audio)) < 0.15 * len(clean.audio)
    ping = await asyncio.to_thread(httpx.get, f"{speech_server.base_url}/ping", timeout=10)
    assert ping.status_code == 200


async def test_text_the_engine_finds_nothing_to_say_in_is_no_audio_not_a_failure(onnx_engine):
    """What validation lets through may still have no phonemes (espeak-ng skips it); the engine
    answers with no audio, on both of its decode paths, instead of raising."""
    voice = onnx_engine.default_voice
    assert onnx_engine.synthesize("\u200b", voice, 1.0).size == 0
    assert [piece.size for piece in onnx_engine.synthesize_stream("\u200b", voice, 1.0)] == []
    assert onnx_engine.synthesize("Hi.", voice, 1.0).size > 24_000 // 4  # it still speaks


async def test_a_flood_of_pings_is_answered_in_order(speech_server):
    async with connect(speech_server.ws_url) as ws:
        for number in range(500):
            await ws.send(json.dumps({"type": "ping", "request_id": f"p{number}"}))
        answers = [await next_control(ws) for _ in range(500)]
    assert [answer["request_id"] for answer in answers] == [f"p{n}" for n in range(500)]
    assert {answer["type"] for answer in answers} == {"pong"}


async def test_a_flood_of_requests_is_bounded_by_too_many_pending(speech_server):
    """70 texts at once: 64 are queued, 6 refused; a cancel of everything ends the 64 at once,
    each with its synthesis_complete, and the session still speaks afterwards."""
    async with connect(speech_server.ws_url, max_size=None) as ws:
        for number in range(70):
            await ws.send(json.dumps({"text": "Hello there.", "request_id": f"f{number}"}))
        await ws.send(json.dumps({"type": "cancel"}))
        await ws.send(json.dumps({"type": "ping", "request_id": "after"}))
        refused, completed = [], []
        while True:
            frame = await asyncio.wait_for(ws.recv(), 120)
            if isinstance(frame, bytes):
                continue
            message = json.loads(frame)
            if message["type"] == "error":
                refused.append(message)
            elif message["type"] == "synthesis_complete":
                completed.append(message)
            elif message["type"] == "pong":
                break
        await ws.send(json.dumps({"text": "Still here.", "request_id": "again"}))
        again = await collect_reply(ws)
    assert [error["code"] for error in refused] == ["too_many_pending"] * 6
    assert [error["request_id"] for error in refused] == [f"f{n}" for n in range(64, 70)]
    assert [done["request_id"] for done in completed] == [f"f{n}" for n in range(64)]
    assert {done["status"] for done in completed[1:]} == {"cancelled"}
    assert again.complete is not None and again.complete["status"] == "complete" and again.audio


# --- the client link, on the local stack ---------------------------------------------------


async def _answer_to(ws: ClientConnection, row: Hostile) -> dict:
    """The frame that answers ``row``: its error, the voices list, or a whole turn's end (whose
    audio frames must belong to the turn and add up to what turn_end counts)."""
    await ws.send(row.frame)
    turn: int | None = None
    audio_bytes = 0
    while True:
        frame = await asyncio.wait_for(ws.recv(), 60)
        if isinstance(frame, bytes):
            number, _, payload = decode_audio_frame(frame)
            assert number == turn
            audio_bytes += len(payload)
            continue
        message = json.loads(frame)
        if message["type"] == "turn_start":
            turn = message["turn"]
        elif message["type"] in ("error", "voices"):
            return message
        elif message["type"] == "turn_end":
            assert message["audio_bytes"] == audio_bytes
            return message


async def test_every_hostile_client_message_gets_its_code_on_the_local_stack(stack):
    mismatches: list[tuple[str, str | None, dict]] = []
    async with connect(stack.ws_url, max_size=None) as ws:
        for row in CLIENT_LINK:
            answer = await _answer_to(ws, row)
            if row.code is None:
                if answer["type"] == "error" or answer.get("status", "complete") != "complete":
                    mismatches.append((row.name, None, answer))
                continue
            if (answer["type"], answer.get("code")) != ("error", row.code):
                mismatches.append((row.name, row.code, answer))
            assert 0 < len(answer.get("message", "")) <= MAX_ERROR_MESSAGE_CHARS, row.name
        last = await _answer_to(ws, Hostile("good", json.dumps({"action": "voices"}), None))
    assert mismatches == []
    assert last["type"] == "voices" and last["voices"]


async def test_invalid_utf8_in_a_text_frame_closes_with_1007_and_the_disconnect_runs(stack):
    async with connect(stack.ws_url) as ws:
        await ws.send(b'{"action": "speak", "text": "\xff"}', text=True)
        with pytest.raises(ConnectionClosed):
            await asyncio.wait_for(ws.recv(), 10)
    assert ws.close_code == 1007
    async with asyncio.timeout(10):
        # The gateway has no event to await: poll its table until the disconnect has run.
        while any(connection.open for connection in stack.gateway.connections.values()):  # noqa: ASYNC110
            await asyncio.sleep(0.05)


async def test_a_flood_of_messages_is_answered_and_the_connection_stays(stack):
    """200 ``voices`` messages at once, handled concurrently as API Gateway would: every one
    answered, then a turn still works."""
    async with connect(stack.ws_url, max_size=None) as ws:
        for _ in range(200):
            await ws.send(json.dumps({"action": "voices"}))
        answers = [json.loads(await asyncio.wait_for(ws.recv(), 30)) for _ in range(200)]
        end = await _answer_to(
            ws, Hostile("speak", json.dumps({"action": "speak", "text": "Still here."}), None)
        )
    assert {answer["type"] for answer in answers} == {"voices"}
    assert end["type"] == "turn_end" and end["status"] == "complete" and end["audio_bytes"]


async def test_a_second_ask_while_one_runs_is_a_barge_in_not_an_error(stack):
    async with connect(stack.ws_url, max_size=None) as ws:
        await ws.send(json.dumps({"action": "ask", "prompt": "Tell me a story", "turn_id": "a1"}))
        frames = []
        async with asyncio.timeout(60):
            while True:  # the first turn has started speaking
                frame = await ws.recv()
                if isinstance(frame, bytes):
                    break
                frames.append(json.loads(frame))
        await ws.send(
            json.dumps({"action": "ask", "prompt": "Hello, who are you?", "turn_id": "a2"})
        )
        ends: dict[str, dict] = {}
        async with asyncio.timeout(120):
            while "a2" not in ends:
                frame = await ws.recv()
                if isinstance(frame, str):
                    message = json.loads(frame)
                    frames.append(message)
                    if message["type"] == "turn_end":
                        ends[message["turn_id"]] = message
    assert not [frame for frame in frames if frame["type"] == "error"]
    assert ends["a1"]["status"] == "cancelled" and ends["a2"]["status"] == "complete"


# --- the same rows, straight to the Lambda handler -------------------------------------------


def _message_event(body: str) -> dict:
    event = sample("speak")
    event["body"] = body
    return event


def test_every_hostile_client_message_gets_its_code_from_the_lambda_handler(adapters):  # noqa: F811
    connect_handler(sample("connect"), adapters)
    mismatches = []
    for row in CLIENT_LINK:
        calls_before = len(adapters.lambda_client.calls)
        posts_before = len(posted(adapters))
        assert handle_message(_message_event(row.frame), adapters) == {"statusCode": 200}
        answers = posted(adapters)[posts_before:]
        started = len(adapters.lambda_client.calls) - calls_before
        if row.code is None:
            if row.name.startswith("voices"):
                ok = [answer["type"] for answer in answers] == ["voices"]
            else:
                ok = started == 1 and not answers  # the worker speaks it
        else:
            ok = started == 0 and [(a["type"], a["code"]) for a in answers] == [("error", row.code)]
        if not ok:
            mismatches.append((row.name, row.code, answers, started))
    assert mismatches == []
    assert adapters.connections.get(CONNECTION).status == "open"


def test_a_message_over_128_kb_reaches_the_handler_as_message_too_large(adapters):  # noqa: F811
    """API Gateway closes a client whose *frame* is over 32 KB, but a message may arrive in
    several frames up to 128 KB; over that the handler refuses it by size, before parsing."""
    connect_handler(sample("connect"), adapters)
    body = json.dumps({"action": "speak", "text": "Hi.", "pad": "x" * MAX_MESSAGE_BYTES})
    handle_message(_message_event(body), adapters)
    (answer,) = posted(adapters)
    assert answer["code"] == "message_too_large"
    assert adapters.lambda_client.calls == []
    handle_message(sample("speak"), adapters)
    assert len(adapters.lambda_client.calls) == 1
