"""The speech server's WebSocket route over a real port, with the real Kokoro-82M ONNX model."""

from __future__ import annotations

import asyncio
import json
import threading

import httpx
import numpy as np
import pytest
from speech_client import collect_reply, next_control
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosedOK, InvalidStatus

SAMPLE_RATE = 24_000


def pcm_seconds(audio: bytes) -> float:
    return len(audio) / 2 / SAMPLE_RATE


def rms(audio: bytes) -> float:
    samples = np.frombuffer(bytes(audio), dtype="<i2").astype(np.float64) / 32768
    return float(np.sqrt(np.mean(samples**2))) if samples.size else 0.0


async def test_binary_frame_is_decoded_and_spoken_by_the_real_model(speech_server):
    text = "Hello there, this is a test of streaming speech."
    async with connect(speech_server.ws_url) as ws:
        # SageMaker delivers every request part as a binary frame: the seed's first lesson.
        await ws.send(json.dumps({"text": text, "request_id": "b1"}).encode())
        reply = await collect_reply(ws)
    assert reply.start == {
        "type": "synthesis_start",
        "request_id": "b1",
        "encoding": "pcm_s16le",
        "sample_rate": 24000,
        "channels": 1,
    }
    complete = reply.complete
    assert complete["status"] == "complete"
    assert complete["audio_bytes"] == len(reply.audio)
    assert complete["audio_seconds"] == pytest.approx(pcm_seconds(reply.audio), abs=0.002)
    assert complete["chunks"] >= 2  # the first clause was cut short
    assert 0 < complete["first_audio_ms"] <= complete["elapsed_ms"]
    # Speech, not silence, and as long as 48 characters take to say (about 2.5-4 s).
    assert rms(reply.audio) > 0.02
    assert 1.5 < pcm_seconds(reply.audio) < 6.0
    assert len(reply.audio) % 2 == 0
    assert reply.frames >= 2


async def test_session_stays_open_for_a_second_message_then_closes_on_request(speech_server):
    async with connect(speech_server.ws_url) as ws:
        await ws.send(json.dumps({"text": "One.", "request_id": "first"}))
        first = await collect_reply(ws)
        await ws.send(json.dumps({"text": "Two.", "request_id": "second"}).encode())
        second = await collect_reply(ws)
        await ws.send(json.dumps({"type": "close"}))
        with pytest.raises(ConnectionClosedOK):
            await asyncio.wait_for(ws.recv(), 10)
        assert ws.close_code == 1000
    assert first.complete["request_id"] == "first" and second.complete["request_id"] == "second"
    assert first.audio and second.audio


async def test_pipelined_messages_are_answered_in_order(speech_server):
    texts = {"p1": "First one.", "p2": "Second, a little longer.", "p3": "Third."}
    async with connect(speech_server.ws_url) as ws:
        for request_id, text in texts.items():  # back to back, no waiting
            await ws.send(json.dumps({"text": text, "request_id": request_id}))
        replies = [await collect_reply(ws) for _ in texts]
    assert [reply.start["request_id"] for reply in replies] == list(texts)
    assert all(reply.complete["status"] == "complete" and reply.audio for reply in replies)


async def test_server_assigns_request_ids_when_the_client_gives_none(speech_server):
    async with connect(speech_server.ws_url) as ws:
        await ws.send(json.dumps({"text": "Hi."}))
        await ws.send(json.dumps({"text": "Bye."}))
        first, second = await collect_reply(ws), await collect_reply(ws)
    assert first.start["request_id"] and second.start["request_id"]
    assert first.start["request_id"] != second.start["request_id"]


LONG_TEXT = (
    "This answer is long on purpose, so that it has many chunks to synthesize. "
    "The first clause arrives quickly, and the rest follows in growing pieces. "
    "Each piece is synthesized while the one before it is being sent. "
    "A cancel must stop all of it without closing the session."
)


async def test_cancel_stops_a_running_request_and_the_session_goes_on(speech_server):
    async with connect(speech_server.ws_url) as ws:
        await ws.send(json.dumps({"text": LONG_TEXT, "request_id": "long"}))
        start = await next_control(ws)
        assert start["request_id"] == "long"
        first_audio = await asyncio.wait_for(ws.recv(), 60)
        assert isinstance(first_audio, bytes)
        await ws.send(json.dumps({"type": "cancel", "request_id": "long"}))
        audio = len(first_audio)
        while True:
            frame = await asyncio.wait_for(ws.recv(), 60)
            if isinstance(frame, bytes):
                audio += len(frame)
                continue
            complete = json.loads(frame)
            break
        assert complete["type"] == "synthesis_complete"
        assert complete["status"] == "cancelled"
        assert complete["audio_bytes"] == audio
        # Far less than the whole text (about 15 s of speech) was sent.
        assert audio / 2 / SAMPLE_RATE < 8
        await ws.send(json.dumps({"text": "Still here.", "request_id": "after"}))
        after = await collect_reply(ws)
    assert after.complete["status"] == "complete" and after.audio


async def test_cancel_of_a_queued_request_ends_it_without_audio(speech_server):
    async with connect(speech_server.ws_url) as ws:
        await ws.send(json.dumps({"text": "Running first.", "request_id": "q1"}))
        await ws.send(json.dumps({"text": "Queued and dropped.", "request_id": "q2"}))
        await ws.send(json.dumps({"type": "cancel", "request_id": "q2"}))
        first, second = await collect_reply(ws), await collect_reply(ws)
    assert first.complete["status"] == "complete" and first.audio
    assert second.complete["status"] == "cancelled"
    assert second.audio == b"" and second.complete["audio_bytes"] == 0


async def test_cancel_without_request_id_cancels_everything_pending(speech_server):
    async with connect(speech_server.ws_url) as ws:
        await ws.send(json.dumps({"text": LONG_TEXT, "request_id": "a"}))
        await ws.send(json.dumps({"text": LONG_TEXT, "request_id": "b"}))
        await ws.send(json.dumps({"type": "cancel"}))
        first, second = await collect_reply(ws), await collect_reply(ws)
    assert [first.complete["status"], second.complete["status"]] == ["cancelled", "cancelled"]
    assert second.audio == b""


async def test_cancel_of_an_unknown_request_is_an_error_frame(speech_server):
    async with connect(speech_server.ws_url) as ws:
        await ws.send(json.dumps({"type": "cancel", "request_id": "nope"}))
        error = await next_control(ws)
    assert error["type"] == "error"
    assert error["code"] == "unknown_request_id"
    assert error["request_id"] == "nope"


async def test_duplicate_request_id_while_pending_is_refused(speech_server):
    async with connect(speech_server.ws_url) as ws:
        await ws.send(json.dumps({"text": "Once.", "request_id": "dup"}))
        await ws.send(json.dumps({"text": "Twice.", "request_id": "dup"}))
        reply = await collect_reply(ws)
        error = await next_control(ws)
    assert reply.complete["status"] == "complete"
    assert error["code"] == "duplicate_request_id" and error["request_id"] == "dup"


BAD_INPUTS = [
    (b"\xff\xfe\xfd", "invalid_utf8"),
    ("this is not json", "invalid_json"),
    ("[1, 2, 3]", "not_an_object"),
    ('"just a string"', "not_an_object"),
    ("{}", "missing_text"),
    ('{"text": ""}', "missing_text"),
    ('{"text": "   \\n\\t "}', "missing_text"),
    (json.dumps({"text": "x" * 4001}), "text_too_long"),
    ('{"text": "Hi.", "voice": "nobody"}', "unknown_voice"),
    ('{"text": "Hi.", "speed": 3.5}', "speed_out_of_range"),
    ('{"text": "Hi.", "speed": 0.1}', "speed_out_of_range"),
    ('{"text": "Hi.", "speed": "fast"}', "invalid_field"),
    ('{"text": 42}', "invalid_field"),
    ('{"text": "Hi.", "fast_start": "yes"}', "invalid_field"),
    ('{"type": "dance", "request_id": "d1"}', "unknown_type"),
]


async def test_every_bad_input_gets_its_code_and_the_session_goes_on(speech_server):
    async with connect(speech_server.ws_url) as ws:
        errors = []
        for raw, _ in BAD_INPUTS:
            await ws.send(raw)
            errors.append(await next_control(ws))
        # Still usable after all of that: a good request is answered normally.
        await ws.send(json.dumps({"text": "Fine.", "request_id": "good"}))
        good = await collect_reply(ws)
    assert [error["code"] for error in errors] == [code for _, code in BAD_INPUTS]
    for error in errors:
        assert error["type"] == "error"
        assert error["message"] and "Traceback" not in error["message"]
        assert "KeyError" not in error["message"]
    assert errors[-1]["request_id"] == "d1"  # the id travels back when the message had one
    assert good.complete["status"] == "complete" and good.audio


async def test_error_names_the_request_when_it_has_an_id(speech_server):
    async with connect(speech_server.ws_url) as ws:
        await ws.send(json.dumps({"text": "Hi.", "voice": "nobody", "request_id": "v1"}))
        error = await next_control(ws)
    assert error["code"] == "unknown_voice" and error["request_id"] == "v1"
    assert "af_heart" in error["message"]  # says what the valid voices are


async def test_close_is_answered_after_the_messages_before_it(speech_server):
    async with connect(speech_server.ws_url) as ws:
        await ws.send(json.dumps({"text": "Before closing.", "request_id": "last"}))
        await ws.send(json.dumps({"type": "close"}))
        reply = await collect_reply(ws)
        with pytest.raises(ConnectionClosedOK):
            await asyncio.wait_for(ws.recv(), 10)
    assert reply.complete["status"] == "complete" and reply.audio
    assert ws.close_code == 1000


async def test_websocket_pings_are_answered(speech_server):
    async with connect(speech_server.ws_url, ping_interval=None) as ws:
        pong = await ws.ping(b"are you there")
        latency = await asyncio.wait_for(pong, 5)
    assert latency >= 0


async def test_disconnect_mid_synthesis_leaves_the_server_healthy(speech_server):
    async with connect(speech_server.ws_url) as ws:
        await ws.send(json.dumps({"text": LONG_TEXT}))
        await next_control(ws)
    # Gone without a close message; a new session works at once.
    async with connect(speech_server.ws_url) as ws:
        await ws.send(json.dumps({"text": "New session."}))
        reply = await collect_reply(ws)
    assert reply.complete["status"] == "complete"


class ExplodingEngine:
    """The real engine, failing on one marker text: how an engine crash reaches the client."""

    def __init__(self, engine):
        self._engine = engine
        self.name, self.sample_rate = engine.name, engine.sample_rate
        self.voices, self.default_voice = engine.voices, engine.default_voice

    def synthesize(self, text, voice, speed):
        if "explode" in text:
            raise RuntimeError("internal detail that must not reach the client")
        return self._engine.synthesize(text, voice, speed)

    def synthesize_stream(self, text, voice, speed):
        if "explode" in text:
            raise RuntimeError("internal detail that must not reach the client")
        yield from self._engine.synthesize_stream(text, voice, speed)


async def test_engine_failure_is_an_error_frame_and_the_session_survives(
    onnx_engine, server_factory
):
    server = server_factory(lambda: ExplodingEngine(onnx_engine))
    async with connect(server.ws_url) as ws:
        await ws.send(json.dumps({"text": "Please explode now.", "request_id": "boom"}))
        start = await next_control(ws)
        error = await next_control(ws)
        complete = await next_control(ws)
        await ws.send(json.dumps({"text": "Calm.", "request_id": "calm"}))
        calm = await collect_reply(ws)
    assert start["type"] == "synthesis_start"
    assert error["code"] == "synthesis_failed" and error["request_id"] == "boom"
    assert "internal detail" not in error["message"]
    assert complete["type"] == "synthesis_complete" and complete["status"] == "failed"
    assert calm.complete["status"] == "complete" and calm.audio


async def test_ping_says_loading_until_the_model_is_ready(onnx_engine, server_factory):
    release = threading.Event()

    def slow_load():
        release.wait(30)
        return onnx_engine

    server = server_factory(slow_load, wait_ready=False)
    async with httpx.AsyncClient(base_url=server.base_url) as http:
        loading = await http.get("/ping")
        with pytest.raises(InvalidStatus) as refused:
            async with connect(server.ws_url):
                pass
        release.set()
        for _ in range(200):
            ready = await http.get("/ping")
            if ready.status_code == 200:
                break
            await asyncio.sleep(0.02)
    assert loading.status_code == 503 and loading.json()["code"] == "model_loading"
    assert refused.value.response.status_code == 503
    assert ready.status_code == 200
    assert ready.json()["default_voice"] == "af_heart" and ready.json()["engine"] == "onnx"


async def test_ping_reports_a_failed_load(server_factory):
    def broken_load():
        raise RuntimeError("no weights here")

    server = server_factory(broken_load, wait_ready=False)
    async with httpx.AsyncClient(base_url=server.base_url) as http:
        for _ in range(200):
            response = await http.get("/ping")
            if response.status_code != 503:
                break
            await asyncio.sleep(0.02)
    assert response.status_code == 500
    assert response.json()["code"] == "model_load_failed"
    assert "no weights here" in response.json()["message"]


async def test_voices_lists_each_voice_with_its_language_english_first(speech_server):
    async with httpx.AsyncClient(base_url=speech_server.base_url) as http:
        listing = (await http.get("/voices")).json()
    voices = {voice["name"]: voice for voice in listing["voices"]}
    assert listing["default_voice"] == "af_heart" and len(voices) == 54
    assert voices["bf_emma"] == {
        "name": "bf_emma",
        "language": "en-GB",
        "label": "British English",
        "gender": "female",
        "espeak": "en-gb",
    }
    languages = [voice["language"] for voice in listing["voices"]]
    english = [language.startswith("en") for language in languages]
    assert english == sorted(english, reverse=True)  # English first


class GatedToneEngine:
    """Speaks a tone as long as the text, but its first call waits for ``gate``: a request
    that stays running for as long as a test needs it to."""

    name, sample_rate = "tone", SAMPLE_RATE
    voices, default_voice = frozenset({"af_heart"}), "af_heart"

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.entered = threading.Event()

    def synthesize(self, text, voice, speed):
        self.entered.set()
        if not self.gate.wait(30):
            raise RuntimeError("the test never opened the gate")
        tone = 0.3 * np.sin(np.arange(len(text) * 240) * 0.3)
        return tone.astype(np.float32)

    def synthesize_stream(self, text, voice, speed):
        yield self.synthesize(text, voice, speed)


async def test_a_65th_pending_request_is_refused_and_a_slot_frees_once_answered(server_factory):
    from voicewire.speech_protocol import MAX_PENDING_REQUESTS

    engine = GatedToneEngine()
    server = server_factory(lambda: engine)
    ids = [f"r{n}" for n in range(MAX_PENDING_REQUESTS)]
    try:
        async with connect(server.ws_url) as ws:
            for request_id in ids:  # the first runs (held at the gate), the rest queue
                await ws.send(json.dumps({"text": "Held.", "request_id": request_id}))
            await ws.send(json.dumps({"text": "One too many.", "request_id": "extra"}))
            assert await asyncio.to_thread(engine.entered.wait, 10)  # r0 is running
            await ws.send(json.dumps({"type": "cancel"}))  # every pending request
            engine.gate.set()
            replies = [await collect_reply(ws) for _ in ids]
            refused = await next_control(ws)  # answered in order: after the 64 before it
            # All answered, nothing pending: the same id (and any other) is accepted again.
            await ws.send(json.dumps({"text": "Room again.", "request_id": "extra"}))
            again = await collect_reply(ws)
    finally:
        engine.gate.set()
    assert [reply.start["request_id"] for reply in replies] == ids  # 64 accepted
    assert {reply.complete["status"] for reply in replies} == {"cancelled"}
    assert refused["type"] == "error" and refused["code"] == "too_many_pending"
    assert refused["request_id"] == "extra" and str(MAX_PENDING_REQUESTS) in refused["message"]
    assert again.complete["status"] == "complete"
    assert again.complete["audio_bytes"] == len(again.audio) > 0


async def test_an_over_long_request_id_is_refused_and_not_echoed(speech_server):
    from voicewire.speech_protocol import MAX_REQUEST_ID_CHARS

    longest, too_long = "i" * MAX_REQUEST_ID_CHARS, "i" * (MAX_REQUEST_ID_CHARS + 1)
    async with connect(speech_server.ws_url) as ws:
        await ws.send(json.dumps({"text": "Hi.", "request_id": too_long}))
        refused = await next_control(ws)
        await ws.send(json.dumps({"type": "ping", "request_id": too_long}))
        refused_ping = await next_control(ws)
        await ws.send(json.dumps({"text": "Hi.", "request_id": longest}))
        reply = await collect_reply(ws)
    for error in (refused, refused_ping):
        assert error["type"] == "error" and error["code"] == "invalid_field"
        assert "request_id" in error["message"] and "request_id" not in error
    assert reply.start["request_id"] == reply.complete["request_id"] == longest
    assert reply.complete["status"] == "complete"
