"""``voicewire bench load``: K clients at once, each a three-turn conversation.

    uv run voicewire bench load [--clients 1,4,8,16] [--turns 3] [--json PATH] [--plot PATH]

On the local stack (one speech server, as one endpoint instance), K clients connect together and
each asks ``--turns`` questions in a row (bidi, the replayed LLM's recordings in turn). Per K:

- first audio p50 / p95 over every turn, and the silences after it (as ``stalls`` counts them);
- errors (any ``error`` frame, any turn not ``complete``);
- audio seconds delivered per wall second, the whole stack's throughput;
- peak memory (RSS) of the stack: this process and the speech server's;
- lost or misordered frames: each turn's audio sequence numbers must run 0, 1, 2... without a
  gap and their bytes must add up to its ``turn_end``'s ``audio_bytes`` and ``audio_frames``.

On 2 cores the engine saturates beyond a client or two: first audio then grows with K (turns
queue for the one synthesis thread), which this shows, while nothing may be lost.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections import Counter
from pathlib import Path
from typing import Any

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
    parser.add_argument("--clients", default="1,4,8,16", help="comma-separated client counts")
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
    first_audio = sorted(r.first("audio") for r in results if r.first("audio") is not None)
    stalls = [sum(playback_gaps(r)) for r in results]
    problems = [p for r in results for p in frame_problems(r)]
    errors = sum(len(r.errors) for r in results) + sum(r.status != "complete" for r in results)
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
        "errors": errors,
        "error_codes": dict(codes),
        "statuses": dict(statuses),
        "frame_problems": problems,
        "audio_seconds_per_wall_second": round(audio_seconds / wall, 2),
        "peak_rss_mb": peak or None,
        "wall_seconds": round(wall, 1),
    }


def print_report(data: dict[str, Any]) -> bool:
    print("\n" + machine_line(data["machine"]))
    print(f"\n{data['turns_per_client']} bidi turns per client, one after another")
    print(
        f"  {'clients':>7}{'turns':>7}{'first audio p50':>17}{'p95':>10}{'stalls':>10}"
        f"{'errors':>8}{'lost/misordered':>17}{'audio s/s':>11}{'peak RSS':>11}"
    )
    clean = True
    for row in data["loads"]:
        clean &= row["errors"] == 0 and not row["frame_problems"]
        first, rate = row["first_audio_ms"], row["audio_seconds_per_wall_second"]
        stalls = row["stall_ms"]["total"] / 1000
        print(
            f"  {row['clients']:>7}{row['turns']:>7}{first['p50'] / 1000:>15.2f} s"
            f"{first['p95'] / 1000:>8.2f} s{stalls:>8.1f} s"
            f"{row['errors']:>8}{len(row['frame_problems']):>17}"
            f"{rate:>11.2f}{row['peak_rss_mb'] or 0:>8.0f} MB"
        )
        if row["error_codes"] or set(row["statuses"]) - {"complete"}:
            print(f"  {'':>7}  errors: {row['error_codes']}, turns ended: {row['statuses']}")
    print("nothing lost, misordered or failed:", "yes" if clean else "NO")
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
