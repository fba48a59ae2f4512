"""``listen`` on both front doors of the local stack: the answer is a presigned URL of the local
Transcribe streaming endpoint, which accepts it (and nothing forged), transcribes what is
streamed there, and the final transcript asked on the same connection is answered as a typed
question is.

The recognizer behind the endpoint is the protocol's test double here (it hears a fixed
sentence, ``tests/recognizer_double.py``): what is checked is the path, not recognition
(``test_whisper_recognizer.py`` checks the real recognizer)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from botocore.exceptions import ClientError
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from functions.access.listen_signer import ListenSigner, current_listen_signer, use_listen_signer
from tests.recognizer_double import FixedWordsRecognizer
from voicewire.speech_in.transcribe_events import (
    TranscriptEvent,
    audio_event,
    end_of_stream,
    read_result,
)
from voicewire_tools.local_stack.speech_recognizer import RecognizerInBackground
from voicewire_tools.local_stack.stack import LocalStack, StackOptions
from voicewire_tools.local_stack.transcribe_streaming import (
    LocalTranscribeStreaming,
    start_transcribe_streaming,
)

ROOT = Path(__file__).resolve().parents[2]
RATE = 16_000
CHUNK = b"\x00\x01" * (RATE // 10)  # 100 ms of 16-bit mono samples


@pytest.fixture(scope="module", params=["apigateway", "agentcore"])
def listening_stack(request):
    options = StackOptions(
        port=0,
        speech_port=0,
        runtime_port=0,
        async_retry_delays=(0.2, 0.4),
        front_door=request.param,
        listen=True,
        recognizer=FixedWordsRecognizer(),
    )
    local = LocalStack(options, progress=lambda line: None)
    local.start()
    yield local
    local.stop()


async def answer(ws, message: dict) -> dict:
    await ws.send(json.dumps(message))
    while True:
        frame = await asyncio.wait_for(ws.recv(), 15)
        if isinstance(frame, str):
            return json.loads(frame)


async def transcribed(url: str) -> list[tuple[bool, str]]:
    """Stream 2 s of audio to ``url`` as a microphone would (100 ms at a time), then the end;
    every result as (is_partial, transcript)."""
    async with connect(url) as transcribe:
        for _ in range(20):
            await transcribe.send(audio_event(CHUNK))
        await transcribe.send(end_of_stream())
        events = [read_result(frame) async for frame in transcribe]
    assert all(isinstance(event, TranscriptEvent) for event in events), events
    return [
        (result.is_partial, result.alternatives[0].transcript)
        for event in events
        for result in event.transcript.results
    ]


async def test_a_spoken_question_is_transcribed_then_answered(listening_stack):
    async with connect(listening_stack.ws_url, max_size=None) as ws:
        offer = await answer(ws, {"action": "listen"})
        assert offer["type"] == "listen", offer
        assert (offer["language_code"], offer["sample_rate"]) == ("en-US", RATE)
        assert (offer["media_encoding"], offer["expires_in_s"]) == ("pcm", 15)
        url = urlsplit(offer["url"])
        assert (url.scheme, url.port) == ("ws", listening_stack.transcribe.port)
        assert url.path == "/stream-transcription-websocket"
        query = parse_qs(url.query)
        assert query["X-Amz-Credential"][0].startswith(
            listening_stack.listen_credentials.access_key_id + "/"
        )
        assert query["X-Amz-Credential"][0].endswith("/transcribe/aws4_request")
        assert query["enable-partial-results-stabilization"] == ["true"]

        results = await transcribed(offer["url"])
        assert results[-1] == (False, "What time is it in Paris?")
        assert all(partial for partial, _ in results[:-1]) and len(results) > 2

        # The final transcript is the user's turn, through the same path as a typed ask.
        await ws.send(json.dumps({"action": "ask", "prompt": results[-1][1]}))
        frames = []
        while not frames or frames[-1].get("type") != "turn_end":
            frame = await asyncio.wait_for(ws.recv(), 60)
            if isinstance(frame, str):
                frames.append(json.loads(frame))
        history = await answer(ws, {"action": "history"})
    assert frames[0]["type"] == "turn_start" and frames[-1]["status"] == "complete"
    assert history["messages"][0] == {
        "role": "user",
        "text": "What time is it in Paris?",
        "interrupted": False,
    }


async def test_a_language_not_offered_is_refused_and_the_connection_stays(listening_stack):
    async with connect(listening_stack.ws_url, max_size=None) as ws:
        refused = await answer(ws, {"action": "listen", "language_code": "fr-FR"})
        bad_rate = await answer(ws, {"action": "listen", "sample_rate": 96_000})
        voices = await answer(ws, {"action": "voices"})
    assert (refused["type"], refused["code"]) == ("error", "unsupported_language")
    assert "en-US" in refused["message"]
    assert (bad_rate["type"], bad_rate["code"]) == ("error", "invalid_field")
    assert voices["type"] == "voices"


async def test_a_url_changed_after_signing_is_refused_by_the_endpoint(listening_stack):
    async with connect(listening_stack.ws_url, max_size=None) as ws:
        offer = await answer(ws, {"action": "listen"})
    # Another sample rate than the one signed: the signature no longer matches, as on AWS.
    forged = offer["url"].replace("sample-rate=16000", "sample-rate=8000")
    with pytest.raises(InvalidStatus) as refused:
        async with connect(forged):
            pass
    assert refused.value.response.status_code == 403


async def test_a_listen_flood_is_refused_too_many_listens_and_the_connection_stays(
    listening_stack,
):
    """Each URL opens a stream the account pays for and that counts against its few concurrent
    streams: one connection gets 20 a clock minute. (41 asked: a minute that turns while
    asking admits 20 more, so the refusal still comes.)"""
    async with connect(listening_stack.ws_url, max_size=None) as ws:
        answers = []
        for _ in range(41):
            answers.append(await answer(ws, {"action": "listen"}))
            if answers[-1]["type"] == "error":
                break
        voices = await answer(ws, {"action": "voices"})
        refused = answers[-1]
        assert (refused["type"], refused["code"]) == ("error", "too_many_listens"), refused
        assert "at most 20 listens a minute" in refused["message"]
        assert len(answers) > 20 and all(a["type"] == "listen" for a in answers[:-1])
        # The conversation is usable: typing still works.
        assert voices["type"] == "voices"
    async with connect(listening_stack.ws_url, max_size=None) as other:
        # Another connection has its own window.
        assert (await answer(other, {"action": "listen"}))["type"] == "listen"


@pytest.fixture
def sts_refusing(listening_stack):
    """The front doors' signer whose credentials AWS refuses (AssumeRole while a new trust policy
    propagates), then the stack's own again."""

    from functions.access.listen_signer import (
        use_listen_signer,
    )

    def refused():
        raise ClientError(
            {"Error": {"Code": "AccessDenied", "Message": "not authorized: sts:AssumeRole"}},
            "AssumeRole",
        )

    working = current_listen_signer()
    use_listen_signer(ListenSigner(working.settings, refused))
    yield working
    use_listen_signer(working)


async def test_aws_refusing_the_signing_credentials_is_listen_failed_and_the_connection_stays(
    listening_stack, sts_refusing
):
    async with connect(listening_stack.ws_url, max_size=None) as ws:
        failed = await answer(ws, {"action": "listen"})
        assert (failed["type"], failed["code"]) == ("error", "listen_failed"), failed
        assert "AccessDenied" in failed["message"] and "type your question" in failed["message"]
        assert (await answer(ws, {"action": "voices"}))["type"] == "voices"
        use_listen_signer(sts_refusing)  # the role assumable again: the same connection listens
        assert (await answer(ws, {"action": "listen"}))["type"] == "listen"


def write_tone(path, seconds: float = 2.0, rate: int = 22_050) -> None:
    """A WAV at another rate than Transcribe's usual 16 kHz (``ask --audio`` resamples it); its
    content does not matter to the recognizer double."""
    import wave

    import numpy as np

    t = np.arange(int(seconds * rate)) / rate
    samples = (np.sin(2 * np.pi * 220 * t) * 8000).astype("<i2")
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(samples.tobytes())


def ask_audio(stack, *arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "voicewire_tools.cli", "ask", "--url", stack.ws_url, *arguments],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
    )


def test_ask_audio_streams_a_recording_and_prints_the_timeline(listening_stack, tmp_path):
    recording = tmp_path / "question.wav"
    write_tone(recording)
    result = ask_audio(
        listening_stack, "--audio", str(recording), "--pace", "0", "--out", str(tmp_path / "a.wav")
    )
    assert result.returncode == 0, result.stderr + result.stdout
    lines = result.stdout.splitlines()
    kinds = [line.split()[2] for line in lines if " ms  " in line]
    assert kinds[0] == "listen" and "heard" in kinds and "end_of_speech" in kinds
    assert kinds.index("end_of_speech") < kinds.index("turn_start") < kinds.index("turn_end")
    assert any("final: 'What time is it in Paris?'" in line for line in lines)
    assert "X-Amz-Signature" not in result.stdout  # the URL is a credential: never printed
    assert any(line.startswith("voice to voice: ") for line in lines)
    assert (tmp_path / "a.wav").stat().st_size > 44


def test_ask_audio_pace_0_is_twice_real_time_and_a_faster_pace_is_refused(
    listening_stack, tmp_path
):
    """Transcribe refuses audio sent in a burst (the local endpoint as AWS does): ``--pace 0``
    streams at 2x, the fastest it takes, and says so; more is refused before anything is sent."""
    recording = tmp_path / "long-question.wav"
    write_tone(recording, seconds=6.0)
    out = str(tmp_path / "a.wav")
    fast = ask_audio(listening_stack, "--audio", str(recording), "--pace", "0", "--out", out)
    assert fast.returncode == 0, fast.stderr + fast.stdout  # sent at once: "too big"
    assert "final: 'What time is it in Paris?'" in fast.stdout
    faster = ask_audio(listening_stack, "--audio", str(recording), "--pace", "5")
    assert faster.returncode != 0
    assert "Transcribe refuses audio sent in a burst" in faster.stderr


def test_ask_audio_says_what_is_wrong_with_a_file_that_is_not_audio(listening_stack, tmp_path):
    bogus = tmp_path / "question.wav"
    bogus.write_text("not audio at all")
    result = ask_audio(listening_stack, "--audio", str(bogus))
    assert result.returncode != 0
    assert "cannot be read as audio" in result.stderr
    both = ask_audio(listening_stack, "What time is it?", "--audio", str(bogus))
    assert both.returncode != 0 and "no PROMPT" in both.stderr


def test_a_stack_stopping_waits_for_its_recognizer_still_loading():
    """``voicewire up`` stopped a moment after it started: the recognizer may still be inside
    CTranslate2's constructor, and a process exiting then aborts ("terminate called without an
    active exception", seen in CI). The stack's stop waits for the load to end first."""
    release, ended = threading.Event(), threading.Event()

    def load() -> FixedWordsRecognizer:
        release.wait(10)
        ended.set()
        return FixedWordsRecognizer()

    loading = RecognizerInBackground(load, FixedWordsRecognizer.languages)
    stack = LocalStack(StackOptions(), progress=lambda line: None)
    stack.transcribe = start_transcribe_streaming(LocalTranscribeStreaming.accepting(loading, []))
    threading.Timer(0.5, release.set).start()
    stack.stop()
    assert ended.is_set()
    assert stack.transcribe is None
