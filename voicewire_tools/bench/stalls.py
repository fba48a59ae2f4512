"""``voicewire bench stalls``: silences a listener would hear once the answer has started.

    uv run voicewire bench stalls [--trials 3] [--answers short,default,...] [--json PATH]
                                  [--url ws://...]

Runs the four modes of ``ttfa`` on every spoken recording (``ttfa.RECORDINGS``: the greeting,
the default answer, the seed's four sentences, the markdown plan) and plays each turn's audio at
real time from the frames' arrival: a frame that arrives after the one before it has finished
playing leaves a gap. Reports per recording and mode the total of those gaps (median over
trials, and the worst), how many there were, and the chunk schedule that produced them (when each
chunk was sent to speech). Target: zero for every recording in voicewire's modes (``bidi``,
``batch``); the seed's modes are measured beside them, as the seed would have played.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
from typing import Any

from voicewire.speech_protocol import SAMPLE_RATE, SAMPLE_WIDTH
from voicewire.turn_client import TurnResult
from voicewire_tools.bench.machine import describe_machine, machine_line
from voicewire_tools.bench.report import write_json
from voicewire_tools.bench.ttfa import RECORDINGS, run_trials, speech_info, target

AUDIBLE_GAP_MS = 1.0  # scheduling noise below this is not a silence anyone hears
TARGET_MODES = ("bidi", "batch")  # voicewire's own; the seed's are shown beside them


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument(
        "--answers",
        default=",".join(RECORDINGS),
        help="which recordings, of: " + ", ".join(RECORDINGS),
    )


def playback_gaps(result: TurnResult) -> list[float]:
    """The silences (ms) after the first audio, playing frames back to back from arrival."""
    gaps: list[float] = []
    playing_until: float | None = None
    for event in result.events:
        if event.kind != "audio":
            continue
        duration = event.data["bytes"] / SAMPLE_WIDTH / SAMPLE_RATE * 1000
        if playing_until is None:
            playing_until = event.at_ms + duration
            continue
        if event.at_ms > playing_until + AUDIBLE_GAP_MS:
            gaps.append(event.at_ms - playing_until)
            playing_until = event.at_ms
        playing_until += duration
    return gaps


def chunk_schedule(result: TurnResult) -> list[dict[str, Any]]:
    return [
        {"at_ms": e.at_ms, "words": len(e.data["text"].split())}
        for e in result.events
        if e.kind == "sentence"
    ]


def report(results: dict[str, list[TurnResult]], machine: dict[str, Any]) -> dict[str, Any]:
    modes = {}
    for mode, turns in results.items():
        totals = [sum(playback_gaps(turn)) for turn in turns]
        modes[mode] = {
            "stall_ms": {
                "median": statistics.median(totals),
                "max": max(totals),
                "values": [round(total, 1) for total in totals],
            },
            "gaps": [len(playback_gaps(turn)) for turn in turns],
            "chunks": chunk_schedule(turns[-1]),
        }
    return {"machine": machine, "trials": len(next(iter(results.values()))), "modes": modes}


def print_report(data: dict[str, Any]) -> bool:
    """The table per recording; whether voicewire's modes had no silence in any of them."""
    print("\n" + machine_line(data["machine"]))
    clean = True
    for answer, figures in data["answers"].items():
        print(f"\n{answer}: silences after the first audio, {figures['trials']} trials")
        print(
            f"  {'mode':<11}{'stall median':>14}{'worst':>10}{'gaps':>14}   chunks sent (ms: words)"
        )
        for mode, row in figures["modes"].items():
            stall = row["stall_ms"]
            if mode in TARGET_MODES:
                clean &= stall["max"] == 0
            chunks = ", ".join(f"{c['at_ms']:.0f}: {c['words']}" for c in row["chunks"])
            print(
                f"  {mode:<11}{stall['median']:>11.0f} ms{stall['max']:>7.0f} ms"
                f"{row['gaps']!s:>14}   {chunks}"
            )
    modes = ", ".join(TARGET_MODES)
    print(f"\ntarget (zero for every recording in {modes}):", "met" if clean else "MISSED")
    return clean


def run(args: argparse.Namespace) -> dict[str, Any]:
    answers = [name.strip() for name in args.answers.split(",") if name.strip()]
    unknown = sorted(set(answers) - set(RECORDINGS))
    if unknown:
        raise SystemExit(f"no recording named {', '.join(unknown)}; known: {', '.join(RECORDINGS)}")
    with target(args) as (url, stack):
        machine = describe_machine(speech_info(stack))
        print(machine_line(machine), flush=True)
        trials = asyncio.run(run_trials(url, stack, answers, args.trials))
    data = {
        "machine": machine,
        "answers": {answer: report(trials[answer], machine) for answer in answers},
    }
    for figures in data["answers"].values():
        figures.pop("machine")
    data["target_met"] = print_report(data)
    write_json(data, args.json)
    return data
