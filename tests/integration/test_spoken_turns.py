"""Spoken questions end to end on the local stack with its real offline recognizer (Whisper
tiny.en behind the local Transcribe endpoint): a question Kokoro-82M speaks in a voice the agent
never answers with is heard, asked on the same connection and answered aloud, with the voice
benchmark's figures (``voicewire bench voice``'s pieces); silence asks nothing; the command line
asks a recording."""

from __future__ import annotations

import math
import subprocess
import sys
import wave
from pathlib import Path

import numpy as np
import pytest
from required_tools import needs_modules

from voicewire.speech_in.end_of_turn import EndOfTurn
from voicewire.speech_in.spoken_question import NothingHeard, SpokenQuestion
from voicewire.turn_client import run_turn
from voicewire.voice_catalog import PREFERRED_VOICE
from voicewire_tools.bench import voice
from voicewire_tools.bench.speech_in import word_error_rate
from voicewire_tools.local_stack.stack import LocalStack, StackOptions

pytestmark = [
    pytest.mark.model,
    needs_modules("faster_whisper", "ctranslate2", install="uv sync --inexact --extra speech-in"),
]
ROOT = Path(__file__).resolve().parents[2]
QUESTION, VOICE = "What time is it in Tokyo?", "am_michael"
assert VOICE != PREFERRED_VOICE


@pytest.fixture(scope="module")
def hearing_stack():
    options = StackOptions(port=0, speech_port=0, runtime_port=0, listen=True)
    local = LocalStack(options, progress=lambda line: None)
    local.start()
    local.transcribe.endpoint.recognizer.wait(120)
    yield local
    local.stop()


@pytest.fixture(scope="module")
def question_pcm(onnx_engine) -> bytes:
    return voice.question_pcm(np.asarray(onnx_engine.synthesize(QUESTION, VOICE, 1.0)))


async def test_a_spoken_question_is_heard_asked_and_answered_aloud(hearing_stack, question_pcm):
    result = await voice.ask_aloud(hearing_stack.ws_url, question_pcm, EndOfTurn(), 1.0)
    figures = voice.turn_figures(result)
    assert result.status == "complete" and result.audio
    assert word_error_rate(QUESTION, figures["transcript"]) <= 0.2, figures["transcript"]
    kinds = [event.kind for event in result.events]
    # Heard, decided, then asked: the turn starts after the client's end of turn.
    assert kinds.index("listen") < kinds.index("heard") < kinds.index("end_of_turn")
    assert kinds.index("end_of_turn") < kinds.index("turn_start") < kinds.index("turn_end")
    # On one clock: the speaker stopped before the final result, which came before the decision
    # (a finished question: it waited the rule's 250 ms), before the first audio.
    assert figures["final_ms"] > 0 and figures["end_of_turn_ms"] >= EndOfTurn().complete_ms - 10
    assert figures["voice_to_voice_ms"] > figures["final_ms"] + figures["end_of_turn_ms"]
    assert all(not math.isnan(figures[p]) for p in ("first_text_ms", "first_chunk_ms", "rest_ms"))


async def test_silence_asks_nothing_and_the_connection_stays_usable(hearing_stack):
    silence = voice.question_pcm(np.zeros(24_000, np.float32))
    with pytest.raises(NothingHeard, match="nothing was recognized"):
        await run_turn(
            hearing_stack.ws_url,
            {"action": "ask"},
            prepare=SpokenQuestion(silence, voice.RATE, pace=0),
        )
    typed = await run_turn(hearing_stack.ws_url, {"action": "speak", "text": "Still here."})
    assert typed.status == "complete"


def test_voicewire_ask_audio_asks_a_recording(hearing_stack, question_pcm, tmp_path):
    recording = tmp_path / "question.wav"
    with wave.open(str(recording), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(voice.RATE)
        out.writeframes(question_pcm)
    command = ["ask", "--url", hearing_stack.ws_url, "--audio", str(recording), "--pace", "2"]
    result = subprocess.run(
        [sys.executable, "-m", "voicewire_tools.cli", *command, "--out", str(tmp_path / "a.wav")],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr + result.stdout
    finals = [line for line in result.stdout.splitlines() if "heard       final:" in line]
    assert finals and "tokyo" in finals[-1].lower()
    assert "voice to voice: " in result.stdout


def test_the_voice_bench_needs_its_own_stack():
    from voicewire_tools.cli import main

    with pytest.raises(SystemExit, match="needs its own stack"):
        main(["bench", "voice", "--url", "ws://127.0.0.1:9/ws"])
    with pytest.raises(SystemExit, match="--questions must be 1 to 20"):
        main(["bench", "voice", "--questions", "0"])
