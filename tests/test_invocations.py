"""``POST /invocations`` over a real port: each format streamed, then decoded back."""

from __future__ import annotations

import base64
import io
import json

import av
import httpx
import numpy as np
import pytest

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
def pcm_reference(speech_server) -> bytes:
    response, chunks = stream_post(speech_server.base_url, {"text": TEXT, "format": "pcm16"})
    assert response.status_code == 200
    return b"".join(chunks)


def test_pcm16_is_streamed_in_several_chunks(speech_server, pcm_reference):
    response, chunks = stream_post(speech_server.base_url, {"text": TEXT, "format": "pcm16"})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("audio/pcm")
    assert "content-length" not in response.headers  # chunked: audio leaves as it exists
    assert len(chunks) > 1
    seconds = len(pcm_reference) / 2 / 24_000
    assert 2.0 < seconds < 7.0


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
