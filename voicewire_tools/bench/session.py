"""``voicewire bench session``: what a speech session costs, and what keeping it warm gains.

    uv run voicewire bench session [--trials 10] [--sessions 10] [--json PATH]

Starts the local stack on free ports (it needs its own: it turns the kept sessions on and off;
speech link ``sagemaker``: the SDK's CRT client through the local SageMaker runtime and its
sidecar, the deployed code path) and measures:

1. **The link alone** (``voicewire_tools.local_stack.link_cost``), for the ``sagemaker`` and
   the direct ``websocket`` link, ``--sessions`` sessions each, interleaved: opening a session, one
   message's round trip (a ``ping`` answered by the container), and a one-clause text's first
   audio (engine time plus the link).
2. **Whole turns with and without the warm session**, ``--trials`` pairs interleaved, over the
   client link as a browser sees them: ``speak`` turns (no LLM: the session's set-up is on the
   critical path unless it is kept) and ``ask`` bidi turns (the set-up overlaps the LLM's first
   tokens either way), first audio as the turn reports it (from the turn's acceptance).

Benchmarks print figures; they are not tests. Medians with min and max, on this machine.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
from typing import Any

from voicewire.turn_client import run_turn
from voicewire_tools.bench.report import write_json
from voicewire_tools.bench.ttfa import own_stack
from voicewire_tools.local_stack.link_cost import measure_links, summarize
from voicewire_tools.local_stack.stack import LocalStack

SPEAK = {"action": "speak", "text": "Hello there, how can I help?"}
ASK = {"action": "ask", "prompt": "Why does streaming make voice agents feel faster?"}


async def turn_first_audio(stack: LocalStack, message: dict[str, Any]) -> float:
    result = await run_turn(stack.ws_url, message)
    if result.status != "complete" or result.end is None:
        raise RuntimeError(f"turn ended {result.status}: {result.errors}")
    await asyncio.to_thread(stack.functions.wait, 30)  # the worker hands its session back
    return float(result.end["timings"]["first_audio_ms"])


async def warm_against_cold(stack: LocalStack, trials: int) -> dict[str, dict[str, Any]]:
    figures: dict[str, list[float]] = {
        f"{kind} {mode}": [] for kind in ("speak", "ask") for mode in ("warm", "new")
    }
    for trial in range(trials):
        for kind, message in (("speak", SPEAK), ("ask", ASK)):
            for mode in ("warm", "new"):
                await asyncio.to_thread(stack.keep_speech_sessions, mode == "warm")
                if mode == "warm":
                    await turn_first_audio(stack, message)  # leaves a session kept
                value = await turn_first_audio(stack, message)
                figures[f"{kind} {mode}"].append(value)
                print(f"trial {trial + 1} {kind:<5} {mode:<4} first audio {value:.0f} ms")
    return {name: summarize(values) for name, values in figures.items()}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--sessions", type=int, default=10)


def run(args: argparse.Namespace) -> dict[str, Any]:
    with own_stack(args, "turns the kept speech sessions on and off") as (_, stack, machine):
        print(f"\n1. the link alone: {args.sessions} sessions per link", flush=True)
        costs = measure_links(stack, ("sagemaker", "websocket"), sessions=args.sessions)
        print(f"\n2. whole turns, warm session against a new one: {args.trials} pairs", flush=True)
        try:
            turns = asyncio.run(warm_against_cold(stack, args.trials))
        finally:
            stack.keep_speech_sessions(True)
    report = {
        "machine": machine,
        "link": {cost.link: cost.summary() for cost in costs},
        "turns": turns,
    }
    print("\nthe link alone (ms)            median      min      max")
    for cost in costs:
        for name, row in cost.summary().items():
            label = f"{cost.link} {name.removesuffix('_ms').replace('_', ' ')}"
            print(f"  {label:<28}{row['median']:>7.1f}{row['min']:>9.1f}{row['max']:>9.1f}")
    print("\nfirst audio of a turn (ms)     median      min      max")
    for name, row in turns.items():
        print(f"  {name:<28}{row['median']:>7.0f}{row['min']:>9.0f}{row['max']:>9.0f}")
    for kind in ("speak", "ask"):
        gain = turns[f"{kind} new"]["median"] - turns[f"{kind} warm"]["median"]
        print(f"  warm session gain, {kind}: {gain:.0f} ms (median against median)")
    if len(turns["speak new"]["values"]) > 1:
        print(
            "  (medians of different turns: the engine's own time varies by about "
            f"{statistics.pstdev(turns['speak new']['values']):.0f} ms from turn to turn)"
        )
    write_json(report, args.json)
    return report
