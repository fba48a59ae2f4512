"""What a turn posts to ``@connections``, and what slow posts cost its first audio.

    uv run python bench/posts_per_turn.py [--trials 3] [--latency-ms 0,30] [--json out.json]

Starts the local stack on free ports and runs ``ask`` bidi turns over the client link (the
default recording: ~250 model deltas over 4.6 s), with every ``@connections`` post given the
latency a signed HTTPS round trip has on AWS (tens of ms). It prints, per latency and per
``text_deltas`` setting, the posts per turn by kind (text_delta, sentence, audio, other) and the
first audio as the turn reports it. Before the relay's text lane, every delta was its own post,
in the same lane as the audio: 250 text posts per turn.

Benchmarks print figures; they are not tests. Medians, on this machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from voicewire.turn_client import run_turn  # noqa: E402
from voicewire_tools.local_stack.stack import LocalStack, StackOptions  # noqa: E402

PROMPT = "Tell me a story"


async def measure(stack: LocalStack, latency_ms: float, text_deltas: str, trials: int) -> dict:
    stack.gateway.post_faults.latency_seconds = latency_ms / 1000
    rows = []
    for _ in range(trials):
        message = {"action": "ask", "prompt": PROMPT, "text_deltas": text_deltas}
        result = await run_turn(stack.ws_url, message)
        counts: dict[str, int] = {}
        for event in result.events:
            kind = event.kind if event.kind in ("text_delta", "sentence", "audio") else "other"
            counts[kind] = counts.get(kind, 0) + 1
        rows.append({**counts, "first_audio_ms": result.end["timings"]["first_audio_ms"]})
    keys = sorted({key for row in rows for key in row})
    return {key: statistics.median(row.get(key, 0) for row in rows) for key in keys}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--latency-ms", default="0,30")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")
    os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
    options = StackOptions(port=0, speech_port=0, runtime_port=0)
    report: list[dict[str, Any]] = []
    with LocalStack(options, progress=lambda line: print(line, file=sys.stderr)) as stack:
        await run_turn(stack.ws_url, {"action": "speak", "text": "Warm up."})
        for latency in (float(value) for value in args.latency_ms.split(",")):
            for text_deltas in ("live", "sentence"):
                figures = await measure(stack, latency, text_deltas, args.trials)
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
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
