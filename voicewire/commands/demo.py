"""``voicewire demo``: the seed's comparison, bidi against batch, same prompt, same engine."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from voicewire.turn_client import TurnResult, run_turn

DEFAULT_PROMPT = "Why does streaming make voice agents feel faster?"
MODES = ("bidi", "batch")
FIGURES = (
    ("first text", "first_text_ms"),
    ("first audio", "first_audio_ms"),
    ("total", "total_ms"),
)


def summarize(results: list[TurnResult]) -> dict[str, dict[str, float]]:
    summary: dict[str, dict[str, float]] = {}
    for _, key in FIGURES:
        values = [r.end["timings"][key] for r in results if r.end and r.end["timings"].get(key)]
        if values:
            summary[key] = {
                "median": statistics.median(values),
                "min": min(values),
                "max": max(values),
            }
    return summary


def print_table(mode: str, summary: dict[str, dict[str, float]], trials: int) -> None:
    print(f"\n{mode} ({trials} trials)          median       min       max")
    for label, key in FIGURES:
        if key in summary:
            row = summary[key]
            print(
                f"  {label:<18}{row['median']:>9.0f} ms{row['min']:>7.0f} ms{row['max']:>7.0f} ms"
            )


@contextlib.contextmanager
def target(url: str | None, args: argparse.Namespace) -> Iterator[str]:
    if url:
        yield url
        return
    from voicewire.commands.up import quiet_lambda_output, stack_options
    from voicewire.local_stack.stack import LocalStack

    quiet_lambda_output(args.verbose)
    stack = LocalStack(stack_options(args, 0), progress=lambda line: print(line, flush=True))
    stack.start()
    try:
        yield stack.ws_url
    finally:
        stack.stop()


async def run_trials(url: str, prompt: str, trials: int) -> dict[str, list[TurnResult]]:
    results: dict[str, list[TurnResult]] = {mode: [] for mode in MODES}
    for trial in range(trials):
        for mode in MODES:  # interleaved, so drift affects both modes alike
            result = await run_turn(url, {"action": "ask", "prompt": prompt, "mode": mode})
            if result.status != "complete":
                raise RuntimeError(
                    f"{mode} trial {trial + 1} ended {result.status}: {result.errors}"
                )
            results[mode].append(result)
            first_audio = result.end["timings"]["first_audio_ms"] if result.end else None
            print(f"trial {trial + 1} {mode:<5} first audio {first_audio:.0f} ms", flush=True)
    return results


def run(args: argparse.Namespace) -> None:
    out_dir = Path(args.out_dir)
    try:
        with target(args.url, args) as url:
            print(f"prompt: {args.prompt!r}; {args.trials} trials per mode against {url}")
            results = asyncio.run(run_trials(url, args.prompt, args.trials))
    except Exception as error:
        sys.exit(f"voicewire demo: {error}")
    report: dict[str, Any] = {"prompt": args.prompt, "trials": args.trials, "modes": {}}
    out_dir.mkdir(parents=True, exist_ok=True)
    for mode in MODES:
        summary = summarize(results[mode])
        report["modes"][mode] = summary
        print_table(mode, summary, args.trials)
        results[mode][-1].write_wav(out_dir / f"{mode}.wav")
    bidi = report["modes"]["bidi"]["first_audio_ms"]["median"]
    batch = report["modes"]["batch"]["first_audio_ms"]["median"]
    report["batch_over_bidi_first_audio"] = batch / bidi
    print(f"\nfirst audio, batch / bidi: {batch / bidi:.2f}x (the seed: 2.4x local, 3.5x deployed)")
    print(f"audio of the last trial of each mode: {out_dir}/bidi.wav, {out_dir}/batch.wav")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
        print(f"figures written to {args.json}")
