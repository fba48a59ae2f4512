"""``voicewire bench words``: the word timings held against the audio, and what they cost.

    uv run voicewire bench words [--trials 5] [--json PATH]

In this process, on the CPU engine the server runs (``--voice``, default af_heart), for a few
texts (sentences, numbers and abbreviations espeak-ng expands, a chunk over one 510-phoneme
batch), through the server's own synthesis path (``Synthesizer.pcm_frames`` with
``word_timings``):

- the timings' words against the text's words (every written word, once, in order);
- at each silence of the audio (120 ms or more, measured on the PCM), how far the word before it
  ends and the word after it starts from the silence's edges; the last word's end from the
  audio's last loud sample. Target: within 100 ms;
- the recognizer's check (PocketSphinx, its model from PyPI): of the words it hears that are
  words of the text, the share whose middle lies in that word's span, against the share in a
  neighbouring word's span (chance, the timings moved by one word);
- first audio with and without timings: a fast start's first frame, ``--trials`` times each,
  interleaved. Target: no measurable cost (the difference within the trials' own spread).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

import numpy as np

from voicewire_tools.bench.machine import describe_machine, machine_line
from voicewire_tools.bench.report import write_json
from voicewire_tools.bench.word_timing_check import boundary_errors, recognizer_agreement

RUNS_TURNS = False  # no stack: --url does not apply
SAMPLE_RATE = 24_000
TEXTS = {
    "sentences": "Hello there, my friend. The plan ships on Monday. Then we measure it again.",
    "expanded": "The price is $29.99 today. Call Dr. Smith at noon, about v1.2.3.",
    "long chunk": " ".join(
        ["Streaming speech keeps the listener waiting less than ever before."] * 9
    ),
}
BOUNDARY_TARGET_MS = 100.0
FIRST_AUDIO_TEXT = "Your parcel arrives on Thursday, before noon."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--trials", type=int, default=5)


def run(args: argparse.Namespace) -> dict[str, Any]:
    from speech_server.engines.onnx_engine import KokoroOnnxEngine
    from speech_server.settings import EngineSettings
    from speech_server.synthesis import Synthesizer

    voice = args.voice or "af_heart"
    engine = KokoroOnnxEngine.from_settings(EngineSettings(voice=voice))
    figures: dict[str, Any] = {
        "machine": describe_machine({"engine": "onnx", "default_voice": voice})
        | {"graph": engine.graph}
    }
    print(machine_line(figures["machine"]))
    synthesizer = Synthesizer(engine)
    passed = True
    try:
        figures["texts"] = {}
        for name, text in TEXTS.items():
            audio, words, _ = asyncio.run(_speak(synthesizer, text, voice, timed=True))
            figures["texts"][name] = row = _checked(text, audio, words)
            passed &= row["words_match"] and row["worst_ms"] <= BOUNDARY_TARGET_MS
            if row["worst_ms"] > BOUNDARY_TARGET_MS:
                print(f"  {name}: a word boundary {row['worst_ms']:.0f} ms from its silence")
            print(
                f"{name:>10}: {len(words)} words, match {row['words_match']}, silences "
                f"{row['silences']}: end {row['median_end_ms']:+.0f} ms (worst "
                f"{row['worst_end_ms']:+.0f}), start {row['median_start_ms']:+.0f} ms (worst "
                f"{row['worst_start_ms']:+.0f}); last word's end {row['last_end_ms']:+.0f} ms; "
                f"recognizer {row['recognized']} words, {row['inside_share']:.0%} inside "
                f"against {row['shifted_share']:.0%} in a neighbour's span"
            )
        figures["first_audio"] = cost = asyncio.run(
            _first_audio_cost(synthesizer, voice, args.trials)
        )
        print(
            f"first audio ({FIRST_AUDIO_TEXT!r}, fast start, {args.trials} trials): "
            f"{cost['with_ms']:.0f} ms with timings against {cost['without_ms']:.0f} ms "
            f"without (difference {cost['difference_ms']:+.0f} ms; the trials' own spread "
            f"{cost['spread_ms']:.0f} ms)"
        )
        for name, row in figures["texts"].items():
            if row["far"]:
                print(f"  {name}: farther than {BOUNDARY_TARGET_MS:.0f} ms: {row['far']}")
    finally:
        synthesizer.close()
    write_json(figures, getattr(args, "json", None))
    if not passed:
        raise RuntimeError("a check failed (see above)")
    return figures


async def _speak(
    synthesizer: Any, text: str, voice: str, *, timed: bool
) -> tuple[np.ndarray, list[Any], float | None]:
    from speech_server.synthesis import WordsAhead

    audio, words = bytearray(), []
    started, first = time.perf_counter(), None
    frames = synthesizer.pcm_frames(text, voice, 1.0, fast_start=True, word_timings=timed)
    async for item in frames:
        if isinstance(item, WordsAhead):
            words += item.words
            continue
        if first is None:
            first = (time.perf_counter() - started) * 1000
        audio += item.pcm
    pcm = np.frombuffer(bytes(audio), "<i2").astype(np.float32) / 32767
    return pcm, words, first


def _checked(text: str, audio: np.ndarray, words: list[Any]) -> dict[str, Any]:
    errors = boundary_errors(audio, words)
    agreement = recognizer_agreement(audio, words)

    def ms(samples: float) -> float:
        return round(samples / SAMPLE_RATE * 1000, 1)

    ends = [ms(e) for e in errors.ends] or [0.0]
    starts = [ms(s) for s in errors.starts] or [0.0]
    worst = max(abs(v) for v in [*ends, *starts, ms(errors.last_end)])
    far = [
        (words[i].text, ms(e))
        for e, i in zip(errors.ends, errors.end_words, strict=True)
        if abs(ms(e)) > BOUNDARY_TARGET_MS
    ]
    return {
        "words_match": [word.text for word in words] == text.split(),
        "silences": len(errors.ends),
        "median_end_ms": statistics.median(ends),
        "worst_end_ms": max(ends, key=abs),
        "median_start_ms": statistics.median(starts),
        "worst_start_ms": max(starts, key=abs),
        "last_end_ms": ms(errors.last_end),
        "worst_ms": worst,
        "far": far,
        "recognized": agreement.heard,
        "inside_share": round(agreement.inside_share, 3),
        "shifted_share": round(agreement.shifted_share, 3),
    }


async def _first_audio_cost(synthesizer: Any, voice: str, trials: int) -> dict[str, float]:
    await _speak(synthesizer, FIRST_AUDIO_TEXT, voice, timed=True)  # warm both paths
    with_timings, without = [], []
    for _ in range(trials):  # interleaved: the machine's drift falls on both
        without.append((await _speak(synthesizer, FIRST_AUDIO_TEXT, voice, timed=False))[2])
        with_timings.append((await _speak(synthesizer, FIRST_AUDIO_TEXT, voice, timed=True))[2])
    spread = statistics.pstdev(without) if len(without) > 1 else 0.0
    return {
        "with_ms": round(statistics.median(with_timings), 1),
        "without_ms": round(statistics.median(without), 1),
        "difference_ms": round(statistics.median(with_timings) - statistics.median(without), 1),
        "spread_ms": round(spread, 1),
    }
