"""``voicewire bench tools``: what a tool call costs the listener.

    uv run voicewire bench tools [--trials 2] [--latencies 0,1000,3000] [--json PATH]

On its own local stack, for a tool that answers after each latency (``--tool-latency-ms``), it
asks in bidi and in batch:

- *with a preamble*: "What time is it in Paris?" (the replay's ``tool_time``: "Let me check the
  clock.", then ``current_time``, then the answer from its result);
- *without one*, with the filler (``tool_quiet``: the call with nothing said before it; "One
  moment." after 1.2 s), and without the filler (``VOICEWIRE_TOOL_FILLER_SECONDS=0``).

Per case, medians over the trials: the first audio (ms from the ask), the longest silence after
the first audio (frames played back to back from their arrival, as ``bench stalls`` plays them),
and the time from the tool's result (``tool_end``) to the answer's first chunk cut for speech
and, where nothing was said before the result, to its first audio.

The seed's pipeline is not run: it sends no ``toolConfig`` and reads only text deltas, so its
model cannot call a tool. Given one, its regex chunker would hold the preamble until the model's
message ended, say nothing while the tool runs (no flush at the call, no filler) and start the
answer only at its first whole sentence.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
from dataclasses import dataclass
from typing import Any

from voicewire.turn_client import TurnResult, run_turn
from voicewire_tools.bench.report import write_json
from voicewire_tools.bench.stalls import playback_gaps
from voicewire_tools.bench.ttfa import own_stack

RUNS_TURNS = True
MODES = ("bidi", "batch")


@dataclass(frozen=True)
class Case:
    name: str
    prompt: str
    filler_seconds: float  # 0: no filler


CASES = (
    Case("preamble", "What time is it in Paris?", 1.2),
    Case("no preamble, filler", "[no-preamble] What time is it?", 1.2),
    Case("no preamble, no filler", "[no-preamble] What time is it?", 0.0),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--trials", type=int, default=2)
    parser.add_argument(
        "--latencies", default="0,1000,3000", help="the tool's latencies, ms, comma-separated"
    )


def measure(result: TurnResult) -> dict[str, float | None]:
    """First audio, the longest silence after it, and from the tool's result (``tool_end``) to
    the answer's first chunk cut for speech and, where nothing was spoken before the result (no
    preamble, no filler), to the answer's first audio. After a preamble, the frames that arrive
    after the result may still be the preamble's: the silence says what the listener heard."""
    first = result.first("audio")
    ended = result.first("tool_end")
    before = [e for e in result.events if ended is not None and e.at_ms <= ended]
    spoke_before = any(e.kind == "sentence" for e in before)
    sentence = next(
        (e.at_ms for e in result.events if e.kind == "sentence" and ended and e.at_ms > ended),
        None,
    )
    audio = next(
        (e.at_ms for e in result.events if e.kind == "audio" and ended and e.at_ms > ended), None
    )
    gaps = playback_gaps(result)
    return {
        "first_audio_ms": first,
        # What the turn decided to say while the tool ran (a preamble, a filler), by order of
        # frames rather than by time: the sentences posted before the tool's result.
        "sentences_before_result": sum(e.kind == "sentence" for e in before),
        "longest_silence_ms": max(gaps, default=0.0),
        "result_to_sentence_ms": sentence - ended if sentence and ended is not None else None,
        "result_to_audio_ms": (
            audio - ended if audio and ended is not None and not spoke_before else None
        ),
    }


def median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


async def run_cases(
    url: str, stack: Any, latencies: list[float], trials: int, modes: tuple[str, ...] = MODES
) -> list[dict]:
    """Each case in each of ``modes`` at each tool latency, ``trials`` times."""
    rows = []
    base = stack.adapters.settings
    try:
        for latency in latencies:
            for case in CASES:
                for mode in modes:
                    stack.adapters.settings = base.changed(
                        tool_latency_ms=latency, tool_filler_seconds=case.filler_seconds
                    )
                    figures = []
                    for trial in range(1, trials + 1):
                        message = {"action": "ask", "prompt": case.prompt, "mode": mode}
                        result = await run_turn(url, message)
                        if result.status != "complete":
                            raise RuntimeError(f"{case.name} {mode} ended {result.status}")
                        figures.append(measure(result))
                        print(
                            f"tool {latency:.0f} ms, {case.name}, {mode}, trial {trial}/{trials}"
                            f": {figures[-1]}",
                            flush=True,
                        )
                    rows.append(
                        {
                            "tool_ms": latency,
                            "case": case.name,
                            "mode": mode,
                            "trials": figures,
                            **{key: median([f[key] for f in figures]) for key in figures[0]},
                        }
                    )
    finally:
        stack.adapters.settings = base
    return rows


def print_report(rows: list[dict]) -> None:
    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value:.0f}"

    print(
        f"\n{'tool':>6} | {'case':<24} | {'mode':<5} | first audio | longest silence | "
        "tool result -> answer's first chunk | -> its audio"
    )
    for row in rows:
        print(
            f"{row['tool_ms']:5.0f}ms | {row['case']:<24} | {row['mode']:<5} | "
            f"{ms(row['first_audio_ms']):>8} ms | {ms(row['longest_silence_ms']):>12} ms | "
            f"{ms(row['result_to_sentence_ms']):>6} ms | {ms(row['result_to_audio_ms']):>6} ms"
        )
    print("\nthe seed's pipeline: not run, it has no tool handling (see the module's docstring)")


def run(args: argparse.Namespace) -> dict[str, Any]:
    latencies = [float(part) for part in args.latencies.split(",") if part.strip()]
    with own_stack(args, "changes the tools' latency and filler between turns") as (
        url,
        stack,
        machine,
    ):
        rows = asyncio.run(run_cases(url, stack, latencies, args.trials))
    print_report(rows)
    data = {"machine": machine, "rows": rows}
    write_json(data, args.json)
    return data
