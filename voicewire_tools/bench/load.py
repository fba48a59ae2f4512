"""``voicewire bench load``: K clients at once, each a three-turn conversation.

    uv run voicewire bench load [--clients 1,2,4,8,16] [--turns 3] [--json PATH] [--plot PATH]

On the local stack (one speech server, as one endpoint instance), K clients connect together and
each asks ``--turns`` questions in a row (bidi, the replayed LLM's recordings in turn). Per K:

- first audio p50 / p95 over every turn, and the silences after it (as ``stalls`` counts them);
- errors (any ``error`` frame, any turn not ``complete``);
- audio seconds delivered per wall second, the whole stack's throughput;
- peak memory (RSS) of the stack: this process and the speech server's;
- lost or misordered frames: each turn's audio sequence numbers must run 0, 1, 2... without a
  gap and their bytes must add up to its ``turn_end``'s ``audio_bytes`` and ``audio_frames``.

- turns refused early: a new answer the speech engine could not speak in time is refused at its
  first text with ``speech_busy`` (``speech_server.engine_share``), and how soon the client
  knew; every other error counts as one.

On 2 cores the engine saturates beyond a client or two. Its synthesis thread serves first the
listener who hears nothing yet (``speech_server.deadline_executor``), and past what it can speak
in time it refuses new answers: the targets (issue 43) are a 4-client p95 first audio within
1.5x the single client's p50, and at 16 clients no turn timed out (each spoke or was refused).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections import Counter
from pathlib import Path
from typing import Any

from voicewire.error_codes import ErrorCode
from voicewire.speech_protocol import SAMPLE_RATE, SAMPLE_WIDTH
from voicewire.turn_client import ConnectionUrl, TurnResult, run_turn
from voicewire_tools.bench.machine import describe_machine, machine_line
from voicewire_tools.bench.report import write_json
from voicewire_tools.bench.stalls import playback_gaps
from voicewire_tools.bench.ttfa import speech_info, target

QUESTIONS = (
    "Why does streaming make voice agents feel faster?",
    "Tell me something about the weather.",
    "Hello, who are you?",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--clients", default="1,2,4,8,16", help="comma-separated client counts")
    parser.add_argument("--turns", type=int, default=3, help="turns per client, one after another")


def frame_problems(result: TurnResult) -> list[str]:
    """What is wrong with a turn's audio frames against its ``turn_end``: empty when nothing."""
    problems = []
    seqs = [event.data["seq"] for event in result.events if event.kind == "audio"]
    if seqs != list(range(len(seqs))):
        problems.append(f"sequence numbers {seqs[:5]}... are not 0, 1, 2...")
    if result.end is None:
        return [*problems, "no turn_end"]
    if result.end["audio_frames"] != len(seqs):
        problems.append(f"{len(seqs)} frames, turn_end says {result.end['audio_frames']}")
    if result.end["audio_bytes"] != len(result.audio):
        problems.append(f"{len(result.audio)} bytes, turn_end says {result.end['audio_bytes']}")
    return problems


async def conversation(
    url: ConnectionUrl, turns: int, client: int, questions: tuple[str, ...] | None = None
) -> list[TurnResult]:
    """One client's turns, one after another; ``questions`` (default ``QUESTIONS``, read at
    call time) cycled from the client's own offset, so clients at once ask different ones."""
    questions = questions or QUESTIONS
    results = []
    for turn in range(turns):
        question = questions[(client + turn) % len(questions)]
        results.append(await run_turn(url, {"action": "ask", "prompt": question, "mode": "bidi"}))
    return results


def peak_rss_mb(stack: Any) -> float | None:
    """The stack's resident memory now: this process plus the speech server's."""
    import os

    def rss(pid: int) -> int:
        status = Path(f"/proc/{pid}/status")
        if not status.is_file():
            return 0
        for line in status.read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0

    speech = getattr(stack, "_speech_process", None)
    total = rss(os.getpid()) + (rss(speech.pid) if speech is not None else 0)
    return round(total / 1e6, 1) if total else None


async def one_load(
    url: ConnectionUrl,
    stack: Any,
    clients: int,
    turns: int,
    questions: tuple[str, ...] | None = None,
) -> dict[str, Any]:
    peak = peak_rss_mb(stack) or 0.0
    sampling = True

    async def sample_memory() -> None:
        nonlocal peak
        while sampling:
            peak = max(peak, peak_rss_mb(stack) or 0.0)
            await asyncio.sleep(0.5)

    sampler = asyncio.create_task(sample_memory())
    started = time.perf_counter()
    conversations = await asyncio.gather(
        *(conversation(url, turns, client, questions) for client in range(clients))
    )
    wall = time.perf_counter() - started
    sampling = False
    await sampler
    results = [result for turns_of_one in conversations for result in turns_of_one]
    refused = [r for r in results if refused_early(r)]
    served = [r for r in results if not refused_early(r)]
    first_audio = sorted(r.first("audio") for r in served if r.first("audio") is not None)
    refused_after = sorted(r.first("error") for r in refused if r.first("error") is not None)
    stalls = [sum(playback_gaps(r)) for r in served]
    problems = [p for r in served for p in frame_problems(r)]
    errors = sum(len(r.errors) for r in served) + sum(r.status != "complete" for r in served)
    codes = Counter(str(e.get("code")) for r in results for e in r.errors)
    statuses = Counter(r.status for r in results)
    audio_seconds = sum(len(r.audio) for r in results) / SAMPLE_WIDTH / SAMPLE_RATE
    return {
        "clients": clients,
        "turns": len(results),
        "first_audio_ms": {
            "p50": statistics.median(first_audio) if first_audio else None,
            "p95": first_audio[max(0, round(0.95 * len(first_audio)) - 1)] if first_audio else None,
        },
        "stall_ms": {"total": round(sum(stalls), 1), "max": round(max(stalls, default=0), 1)},
        "refused": len(refused),
        "refused_after_ms": {
            "p50": statistics.median(refused_after) if refused_after else None,
            "max": refused_after[-1] if refused_after else None,
        },
        "timed_out": codes.get(ErrorCode.TURN_TIMED_OUT, 0),
        "errors": errors,
        "error_codes": dict(codes),
        "statuses": dict(statuses),
        "frame_problems": problems,
        "audio_seconds_per_wall_second": round(audio_seconds / wall, 2),
        "peak_rss_mb": peak or None,
        "wall_seconds": round(wall, 1),
    }


def refused_early(result: TurnResult) -> bool:
    """A turn the speech engine refused at its first text (``speech_busy``), before any audio."""
    return not result.audio and any(e.get("code") == ErrorCode.SPEECH_BUSY for e in result.errors)


def _seconds(ms: float | None) -> str:
    return "-" if ms is None else f"{ms / 1000:.2f} s"


def print_report(data: dict[str, Any]) -> bool:
    print("\n" + machine_line(data["machine"]))
    print(f"\n{data['turns_per_client']} bidi turns per client, one after another")
    print(
        f"  {'clients':>7}{'turns':>7}{'first audio p50':>17}{'p95':>10}{'stalls':>10}"
        f"{'refused':>9}{'after':>9}{'timed out':>11}{'errors':>8}{'lost/misordered':>17}"
        f"{'audio s/s':>11}{'peak RSS':>11}"
    )
    clean = True
    for row in data["loads"]:
        clean &= row["errors"] == 0 and not row["frame_problems"]
        first, rate = row["first_audio_ms"], row["audio_seconds_per_wall_second"]
        stalls = row["stall_ms"]["total"] / 1000
        print(
            f"  {row['clients']:>7}{row['turns']:>7}{_seconds(first['p50']):>17}"
            f"{_seconds(first['p95']):>10}{stalls:>8.1f} s{row['refused']:>9}"
            f"{_seconds(row['refused_after_ms']['p50']):>9}{row['timed_out']:>11}"
            f"{row['errors']:>8}{len(row['frame_problems']):>17}"
            f"{rate:>11.2f}{row['peak_rss_mb'] or 0:>8.0f} MB"
        )
        if row["error_codes"] or set(row["statuses"]) - {"complete"}:
            print(f"  {'':>7}  errors: {row['error_codes']}, turns ended: {row['statuses']}")
    print("nothing lost, misordered or failed (refusals aside):", "yes" if clean else "NO")
    by_clients = {row["clients"]: row for row in data["loads"]}
    one, four = by_clients.get(1), by_clients.get(4)
    if one and four and one["first_audio_ms"]["p50"] and four["first_audio_ms"]["p95"]:
        ratio = four["first_audio_ms"]["p95"] / one["first_audio_ms"]["p50"]
        verdict = "met" if ratio <= 1.5 else "missed"
        print(f"4 clients' p95 first audio / 1 client's p50: {ratio:.2f}x (target 1.5x: {verdict})")
    if sixteen := by_clients.get(16):
        verdict = "met" if sixteen["timed_out"] == 0 else "missed"
        print(
            f"16 clients: {sixteen['timed_out']} turns timed out, {sixteen['refused']} refused "
            f"early (target: none timed out: {verdict})"
        )
    return clean


def plot(data: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    clients = [row["clients"] for row in data["loads"]]
    figure, axis = plt.subplots(figsize=(7, 4))
    for key, style in (("p50", "o-"), ("p95", "s--")):
        axis.plot(
            clients,
            [row["first_audio_ms"][key] for row in data["loads"]],
            style,
            label=f"first audio {key}",
        )
    axis.set_xlabel("concurrent clients (one speech server, 2 cores)")
    axis.set_ylabel("ms")
    axis.set_xticks(clients)
    axis.grid(alpha=0.3)
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def run(args: argparse.Namespace) -> dict[str, Any]:
    counts = [int(part) for part in args.clients.split(",") if part.strip()]
    with target(args) as (url, stack):
        machine = describe_machine(speech_info(stack))
        print(machine_line(machine), flush=True)
        loads = []
        for clients in counts:
            print(f"{clients} clients x {args.turns} turns...", flush=True)
            loads.append(asyncio.run(one_load(url, stack, clients, args.turns)))
    data = {"machine": machine, "turns_per_client": args.turns, "loads": loads}
    data["clean"] = print_report(data)
    write_json(data, args.json)
    if args.plot:
        plot(data, Path(args.plot))
        print(f"first audio against clients drawn in {args.plot}")
    return data
