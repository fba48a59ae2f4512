"""``voicewire bench posts``: what a turn posts to ``@connections``, and what slow posts cost.

    uv run voicewire bench posts [--trials 3] [--latency-ms 0,30] [--prompt TEXT] [--json PATH]

Starts the local stack on free ports (it needs its own: it slows the gateway's posts) and runs
``ask`` bidi turns over the client link (by default the default recording: ~250 model deltas
over 4.6 s; ``--prompt`` picks another by its words),
with every ``@connections`` post given the
latency a signed HTTPS round trip has on AWS (tens of ms). It prints, per latency and per
``text_deltas`` setting, the posts per turn by kind (text_delta, sentence, audio, other) and the
first audio as the turn reports it. Before the relay's text lane, every delta was its own post,
in the same lane as the audio: 250 text posts per turn.

Benchmarks print figures; they are not tests. Medians, on this machine.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
from typing import Any

from voicewire.turn_client import run_turn
from voicewire_tools.bench.report import write_json
from voicewire_tools.bench.ttfa import own_stack
from voicewire_tools.local_stack.stack import LocalStack

PROMPT = "Tell me a story"


async def measure(
    stack: LocalStack, latency_ms: float, text_deltas: str, trials: int, prompt: str = PROMPT
) -> dict:
    stack.gateway.post_faults.latency_seconds = latency_ms / 1000
    rows = []
    for _ in range(trials):
        message = {"action": "ask", "prompt": prompt, "text_deltas": text_deltas}
        result = await run_turn(stack.ws_url, message)
        counts: dict[str, int] = {}
        for event in result.events:
            kind = event.kind if event.kind in ("text_delta", "sentence", "audio") else "other"
            counts[kind] = counts.get(kind, 0) + 1
        rows.append(
            {
                **counts,
                "audio_bytes": result.end["audio_bytes"],
                "first_audio_ms": result.end["timings"]["first_audio_ms"],
            }
        )
    keys = sorted({key for row in rows for key in row})
    return {key: statistics.median(row.get(key, 0) for row in rows) for key in keys}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--latency-ms", default="0,30", help="post latencies, comma-separated")
    parser.add_argument("--prompt", default=PROMPT, help="the question (the replay answers by it)")


def run(args: argparse.Namespace) -> dict[str, Any]:
    with own_stack(args, "slows the gateway's posts") as (_, stack, machine):
        rows = asyncio.run(measure_all(stack, args.latency_ms, args.trials, args.prompt))
    data = {"machine": machine, "trials": args.trials, "rows": rows}
    write_json(data, args.json)
    return data


async def measure_all(
    stack: LocalStack, latencies: str, trials: int, prompt: str = PROMPT
) -> list[dict[str, Any]]:
    report: list[dict[str, Any]] = []
    await run_turn(stack.ws_url, {"action": "speak", "text": "Warm up."})
    try:
        for latency in (float(value) for value in latencies.split(",")):
            for text_deltas in ("live", "sentence"):
                figures = await measure(stack, latency, text_deltas, trials, prompt)
                report.append({"latency_ms": latency, "text_deltas": text_deltas, **figures})
                print(
                    f"posts {latency:>4.0f} ms, text_deltas={text_deltas:<8}: "
                    f"text_delta {figures.get('text_delta', 0):>4.0f}  "
                    f"sentence {figures.get('sentence', 0):>3.0f}  "
                    f"audio {figures.get('audio', 0):>4.0f}  "
                    f"other {figures.get('other', 0):>2.0f}  "
                    f"first audio {figures['first_audio_ms']:>6.0f} ms",
                    flush=True,
                )
    finally:
        stack.gateway.post_faults.latency_seconds = 0.0
    return report
