"""``POST /invocations`` over a real port: each format streamed, then decoded back."""

from __future__ import annotations

import base64
import io
import json
import time
from dataclasses import dataclass, field

import av
import httpx
import numpy as np
import pytest

from speech_server.chunk_plan import plan_chunks
from voicewire.sse import SseDecoder

TEXT = "Streaming speech, one chunk at a time. It works."


def decode(data: bytes) -> tuple[np.ndarray, int]:
    """Decode an encoded stream with FFmpeg (through PyAV): samples as float, sample rate."""
    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.audio[0]
        frames = [frame.to_ndarray().reshape(-1) for frame in container.decode(stream)]
        rate = stream.rate
    samples = np.concatenate(frames).astype(np.float64)
    if np.issubdtype(frames[0].dtype, np.integer):
        samples /= 32768
    return samples, rate


def stream_post(base_url: str, body: dict, **headers: str) -> tuple[httpx.Response, list[bytes]]:
    with (
        httpx.Client(base_url=base_url, timeout=120) as client,
        client.stream("POST", "/invocations", json=body, headers=headers) as response,
    ):
        chunks = list(response.iter_raw())
    return response, chunks


@pytest.fixture(scope="module")
def pcm_reference(shared_speech_server) -> bytes:
    response, chunks = stream_post(shared_speech_server.base_url, {"text": TEXT, "format": "pcm16"})
    assert response.status_code == 200
    return b"".join(chunks)


@dataclass
class EngineCall:
    text: str
    started: float  # time.perf_counter(): the server runs in this process, on another thread
    ended: float = 0.0


@dataclass
class TimedEngine:
    """The real engine, noting when each call starts and ends (a streamed call ends when its
    last piece is out)."""

    engine: object
    calls: list[EngineCall] = field(default_factory=list)

    def __post_init__(self) -> None:
        engine = self.engine
        self.name, self.sample_rate = engine.name, engine.sample_rate
        self.voices, self.default_voice = engine.voices, engine.default_voice

    def synthesize(self, text, voice, speed):
        call = EngineCall(text, time.perf_counter())
        self.calls.append(call)
        audio = self.engine.synthesize(text, voice, speed)
        call.ended = time.perf_counter()
        return audio

    def synthesize_stream(self, text, voice, speed):
        call = EngineCall(text, time.perf_counter())
        self.calls.append(call)
        yield from self.engine.synthesize_stream(text, voice, speed)
        call.ended = time.perf_counter()


def test_pcm16_audio_reaches_the_client_before_the_last_chunk_is_synthesized(
    onnx_engine, server_factory
):
    """Streamed, not buffered: the first bytes are at the client before the engine has even
    started on the request's last chunk, and the last chunk's audio follows after it ends."""
    text = TEXT + " Every time."
    plan = plan_chunks(text, fast_start=True)
    assert len(plan) >= 3  # the gap between first audio and the last chunk spans a whole chunk
    engine = TimedEngine(onnx_engine)
    server = server_factory(lambda: engine)
    arrivals: list[tuple[float, int]] = []
    with (
        httpx.Client(base_url=server.base_url, timeout=120) as client,
        client.stream("POST", "/invocations", json={"text": text, "format": "pcm16"}) as response,
    ):
        for piece in response.iter_raw():
            arrivals.append((time.perf_counter(), len(piece)))
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("audio/pcm")
    assert "content-length" not in response.headers  # chunked: audio leaves as it exists
    assert [call.text for call in engine.calls] == plan
    last_call = engine.calls[-1]
    first_arrival, _ = arrivals[0]
    assert first_arrival < last_call.started, (
        f"first audio {(first_arrival - last_call.started) * 1000:.0f} ms after the last "
        "chunk's synthesis started: the response was not streamed"
    )
    after_synthesis = [size for at, size in arrivals if at > last_call.ended]
    assert after_synthesis, "nothing arrived after the last chunk was synthesized"
    assert sum(size for _, size in arrivals) % 2 == 0  # whole samples


@pytest.mark.parametrize(
    ("audio_format", "media_type", "decoded_rate"),
    [
        ("wav", "audio/wav", 24_000),
        ("mp3", "audio/mpeg", 24_000),
        ("opus", "audio/ogg", 48_000),  # Opus decoders always output 48 kHz
    ],
)
def test_encoded_formats_decode_back_to_the_same_speech(
    speech_server, pcm_reference, audio_format, media_type, decoded_rate
):
    response, chunks = stream_post(speech_server.base_url, {"text": TEXT, "format": audio_format})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith(media_type)
    assert len(chunks) > 1
    samples, rate = decode(b"".join(chunks))
    assert rate == decoded_rate
    reference_seconds = len(pcm_reference) / 2 / 24_000
    # Codecs add a little priming and padding, never whole chunks.
    assert samples.size / rate == pytest.approx(reference_seconds, abs=0.1)
    assert np.sqrt(np.mean(samples**2)) > 0.02  # speech, not silence


def test_wav_is_the_default_and_announces_an_unknown_length(speech_server):
    response, chunks = stream_post(speech_server.base_url, {"text": "Hello."})
    data = b"".join(chunks)
    assert response.headers["content-type"] == "audio/wav"
    assert data[:4] == b"RIFF" and data[8:16] == b"WAVEfmt "
    assert data[4:8] == b"\xff\xff\xff\xff" and data[40:44] == b"\xff\xff\xff\xff"
    assert len(data) > 44 + 24_000  # at least half a second of speech after the header


def test_sse_events_reassemble_into_the_same_audio(speech_server, pcm_reference):
    response, chunks = stream_post(
        speech_server.base_url,
        {"text": TEXT, "format": "pcm16", "request_id": "sse-1"},
        accept="text/event-stream",
    )
    assert response.headers["content-type"].startswith("text/event-stream")
    decoder = SseDecoder()
    events = [event for chunk in chunks for event in decoder.feed(chunk)]
    assert decoder.pending_bytes == 0
    audio_events = [event for event in events if event["type"] == "audio"]
    assert [event["seq"] for event in audio_events] == list(range(len(audio_events)))
    audio = b"".join(base64.b64decode(event["data"]) for event in audio_events)
    complete = events[-1]
    assert complete["type"] == "synthesis_complete" and complete["request_id"] == "sse-1"
    assert complete["audio_bytes"] == len(audio)
    assert len(audio) == len(pcm_reference)  # same engine, same text, same samples
    payload = sum(len(chunk) for chunk in chunks)
    assert payload > 1.3 * len(audio)  # base64 inside JSON costs about a third more


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        (b"not json", 400, "invalid_json"),
        (b"\xff\xfe", 400, "invalid_utf8"),
        (b"[1]", 400, "not_an_object"),
        (json.dumps({}).encode(), 400, "missing_text"),
        (json.dumps({"text": " "}).encode(), 400, "missing_text"),
        (json.dumps({"text": "x" * 4001}).encode(), 413, "text_too_long"),
        (json.dumps({"text": "Hi.", "voice": "nobody"}).encode(), 400, "unknown_voice"),
        (json.dumps({"text": "Hi.", "speed": 9}).encode(), 400, "speed_out_of_range"),
        (json.dumps({"text": "Hi.", "format": "flac"}).encode(), 415, "unsupported_format"),
    ],
)
def test_bad_requests_get_a_4xx_json_error_with_a_stable_code(speech_server, body, status, code):
    response = httpx.post(f"{speech_server.base_url}/invocations", content=body, timeout=30)
    assert response.status_code == status
    assert response.json()["type"] == "error"
    assert response.json()["code"] == code
    assert response.json()["message"]


class BreakingEngine:
    """The real engine, failing on any chunk that says "breaks": a request whose first chunk is
    spoken and whose second one fails, after the response has started."""

    def __init__(self, engine):
        self._engine = engine
        self.name, self.sample_rate = engine.name, engine.sample_rate
        self.voices, self.default_voice = engine.voices, engine.default_voice

    def synthesize(self, text, voice, speed):
        if "breaks" in text:
            raise RuntimeError("internal detail that must not reach the client")
        return self._engine.synthesize(text, voice, speed)

    def synthesize_stream(self, text, voice, speed):
        if "breaks" in text:
            raise RuntimeError("internal detail that must not reach the client")
        yield from self._engine.synthesize_stream(text, voice, speed)


FIRST_CHUNK, BREAKING_TEXT = "First part,", "First part, then the engine breaks."


@pytest.fixture
def breaking_server(onnx_engine, server_factory):
    assert plan_chunks(BREAKING_TEXT, fast_start=True) == [FIRST_CHUNK, "then the engine breaks."]
    return server_factory(lambda: BreakingEngine(onnx_engine))


@pytest.mark.parametrize(("audio_format", "header_bytes"), [("pcm16", 0), ("wav", 44)])
def test_an_engine_failure_mid_body_aborts_the_transfer(
    breaking_server, audio_format, header_bytes
):
    """The status line (200) left with the first chunk's audio: the client must still be able to
    tell the body is incomplete, so the chunked transfer is aborted, never ended cleanly."""
    received: list[bytes] = []
    with (
        httpx.Client(base_url=breaking_server.base_url, timeout=120) as client,
        client.stream(
            "POST", "/invocations", json={"text": BREAKING_TEXT, "format": audio_format}
        ) as response,
        pytest.raises(httpx.RemoteProtocolError, match="incomplete chunked read"),
    ):
        for piece in response.iter_raw():
            received.append(piece)
    assert response.status_code == 200
    # Exactly the first chunk's audio came before the break: what the same engine says for it.
    _, alone = stream_post(breaking_server.base_url, {"text": FIRST_CHUNK, "format": "pcm16"})
    assert b"".join(received)[header_bytes:] == b"".join(alone)


def test_an_engine_failure_mid_stream_is_an_sse_synthesis_failed_event(breaking_server):
    response, chunks = stream_post(
        breaking_server.base_url,
        {"text": BREAKING_TEXT, "format": "pcm16", "request_id": "broken-1"},
        accept="text/event-stream",
    )
    assert response.status_code == 200
    decoder = SseDecoder()
    events = [event for chunk in chunks for event in decoder.feed(chunk)]
    assert decoder.pending_bytes == 0  # the stream ends on an event boundary
    *audio_events, failure = events
    assert [event["type"] for event in audio_events] == ["audio"] * len(audio_events)
    assert failure["type"] == "error" and failure["code"] == "synthesis_failed"
    assert failure["request_id"] == "broken-1"
    assert "internal detail" not in failure["message"]
    audio = b"".join(base64.b64decode(event["data"]) for event in audio_events)
    _, alone = stream_post(breaking_server.base_url, {"text": FIRST_CHUNK, "format": "pcm16"})
    assert audio == b"".join(alone)  # the first chunk's audio arrived, then the failure
