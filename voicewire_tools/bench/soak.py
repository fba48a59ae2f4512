"""``voicewire bench soak``: a few clients in a loop for minutes; nothing lost, nothing growing.

    uv run voicewire bench soak [--minutes 10] [--clients 4] [--interval 10] [--json PATH]
                                [--plot PATH]

Starts its own local stack on free loopback ports and keeps ``--clients`` clients busy until the
time is up, each looping over three turns: an ``ask`` in bidi mode, an ``ask`` in batch mode and
a ``speak`` (the replayed LLM's recordings and short texts in turn, each client starting at a
different place in the cycle so that the kinds overlap). It measures:

- **frames**: every turn is checked as it ends: audio sequence numbers 0, 1, 2... without a gap,
  a repeat or a swap; the audio's frame count and bytes equal to its ``turn_end``'s
  ``audio_frames`` and ``audio_bytes``, and not empty; status ``complete``; no ``error`` frame.
  Any failure is kept with its client, turn and kind;
- **every process of the stack**, sampled every ``--interval`` seconds: resident memory (VmRSS
  in /proc/PID/status), open file descriptors (/proc/PID/fd) and threads, for this process (the
  gateway, the Lambda functions, the SageMaker runtime, moto's DynamoDB, and the soak's own
  clients, which keep only counts, never a turn's audio, once it is checked), the speech server
  and any process below either, found by walking /proc;
- after the warm-up, per process: the figures at the warm-up's end and at the end, the
  least-squares slope over the samples from the one to the other, and a verdict. The warm-up
  lasts a fifth of the run (``WARMUP_FRACTION``) or until every client has finished its first
  cycle of turn kinds, whichever is later: caches, connection pools and the kept speech sessions
  reach their size within a few turns, but the speech server's memory grows in steps while
  larger inputs than before arrive (seen: steps for the first 200 s of a ten-minute soak on a
  busy machine, then the same to the kilobyte for 400 s), and a busy machine may not run every
  kind of turn within a fifth of the run. **Flat** means the trend (the slope times that span)
  adds no more than 20 MB or 5% of the RSS at the warm-up's end, whichever is larger, and no
  more than 2 file descriptors or threads (``RSS_FLAT_MB``, ``RSS_FLAT_FRACTION``,
  ``COUNT_FLAT``). The trend, not the end minus the start: one sample's counts move with the
  connections and worker threads open at that instant (this process: 54-66 descriptors with 4
  clients), while a leak of one per turn adds dozens to hundreds over the run and shows in the
  slope.

Exit status: 1 if any frame was lost or misordered, any turn did not complete or any error frame
arrived, so that it can gate a change; the memory and descriptor figures are reported, never a
failure (a verdict of growth on one machine is a lead, not a proof).

``--url`` is refused: the point of a soak is the stack's processes, which a URL does not show,
and a frames-only loop against another stack is what ``voicewire bench load --url`` already
does. Everything stays on loopback: ``--host`` must be a loopback address, the LLM is the
replayed one (``--bedrock-model-id`` is refused) and DynamoDB moto's or one on this machine.
``--plot`` draws every process's RSS and file descriptors over the run.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import os
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from voicewire.speech_protocol import SAMPLE_RATE, SAMPLE_WIDTH
from voicewire.turn_client import TurnResult, run_turn
from voicewire_tools.bench.load import QUESTIONS, frame_problems
from voicewire_tools.bench.report import write_json
from voicewire_tools.bench.ttfa import own_stack

SPEAK_TEXTS = (
    "Hello there, how can I help?",
    "Your parcel arrives on Thursday.",
    "The meeting moved to half past ten.",
)
# The cycle each client loops over; each kind's messages come from ``turn_message``.
TURN_KINDS = ("ask bidi", "ask batch", "speak")
WARMUP_FRACTION = 0.2  # at least the first fifth of the run is warm-up (2 minutes of 10)
RSS_FLAT_MB = 20.0
RSS_FLAT_FRACTION = 0.05
COUNT_FLAT = 2  # file descriptors or threads more than this after the warm-up: growing
TURN_LIMIT_SECONDS = 180  # a turn that has not ended by then is a failure, not a hang


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--minutes", type=float, default=10.0, help="how long the clients loop")
    parser.add_argument("--clients", type=int, default=4, help="clients looping at once")
    parser.add_argument(
        "--interval", type=float, default=10.0, help="seconds between process samples"
    )


def turn_message(kind: str, index: int) -> dict[str, Any]:
    """The ``index``-th message of a kind: the questions and texts in turn."""
    if kind == "speak":
        return {"action": "speak", "text": SPEAK_TEXTS[index % len(SPEAK_TEXTS)]}
    mode = kind.removeprefix("ask ")
    return {"action": "ask", "prompt": QUESTIONS[index % len(QUESTIONS)], "mode": mode}


def turn_problems(result: TurnResult) -> list[str]:
    """Everything wrong with one turn: its frames against its ``turn_end``, its status, its error
    frames. Empty when the turn is whole."""
    problems = frame_problems(result)
    if result.end is not None and result.status != "complete":
        problems.append(f"turn ended {result.status}")
    if result.end is not None and not result.audio:
        problems.append("no audio")  # every kind of turn here speaks: silence is a failure
    for error in result.errors:
        problems.append(f"error frame {error.get('code')}: {error.get('message')}")
    return problems


# --- the processes ------------------------------------------------------------------------


@dataclass
class ProcessSample:
    at_s: float  # seconds since the soak started
    rss_mb: float
    fds: int
    threads: int


def read_process(pid: int) -> tuple[float, int, int] | None:
    """A process's resident memory (MB), open file descriptors and threads; None once it is
    gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    rss_kb = int(fields["VmRSS"].split()[0]) if "VmRSS" in fields else 0  # a zombie has none
    return rss_kb * 1024 / 1e6, fds, int(fields["Threads"])


def parent_pids() -> dict[int, int]:
    """Every process's parent, from /proc/PID/stat (the name may hold spaces and brackets, so
    the fields are read after its last ``)``)."""
    parents = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except (FileNotFoundError, ProcessLookupError):
            continue  # it ended while we looked
        parents[int(entry)] = int(stat.rpartition(")")[2].split()[1])
    return parents


def descendants(roots: set[int]) -> set[int]:
    """The processes below ``roots``, at any depth."""
    children: dict[int, list[int]] = {}
    for pid, parent in parent_pids().items():
        children.setdefault(parent, []).append(pid)
    found: set[int] = set()
    waiting = list(roots)
    while waiting:
        for child in children.get(waiting.pop(), []):
            if child not in found and child not in roots:
                found.add(child)
                waiting.append(child)
    return found


def process_name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except (FileNotFoundError, ProcessLookupError):
        return "?"


class ProcessSampler:
    """Samples every process of a stack: this one, the speech server, and all below them."""

    def __init__(self, stack: Any) -> None:
        self.names: dict[int, str] = {
            os.getpid(): "this process (gateway, functions, runtime, DynamoDB, clients)"
        }
        speech = getattr(stack, "_speech_process", None)  # the stack's subprocess, if it has one
        if speech is not None:
            self.names[speech.pid] = "speech server"
        self.samples: dict[int, list[ProcessSample]] = {}
        self.started = time.monotonic()

    @property
    def speech_pid(self) -> int | None:
        return next((pid for pid, name in self.names.items() if name == "speech server"), None)

    def sample(self) -> float:
        """One sample of every process now; returns when it was taken (seconds since start)."""
        at_s = round(time.monotonic() - self.started, 1)
        roots = set(self.names)
        for pid in sorted(roots | descendants(roots)):
            figures = read_process(pid)
            if figures is None:
                continue
            self.names.setdefault(pid, process_name(pid))
            rss_mb, fds, threads = figures
            self.samples.setdefault(pid, []).append(ProcessSample(at_s, rss_mb, fds, threads))
        return at_s


def slope_per_minute(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, value) points, per minute; 0 with fewer than two times."""
    if len({at for at, _ in points}) < 2:
        return 0.0
    mean_at = sum(at for at, _ in points) / len(points)
    mean_value = sum(value for _, value in points) / len(points)
    covariance = sum((at - mean_at) * (value - mean_value) for at, value in points)
    variance = sum((at - mean_at) ** 2 for at, _ in points)
    return covariance / variance * 60


def series_figures(points: list[tuple[float, float]], allowed: float) -> dict[str, Any]:
    """One quantity after the warm-up: where it started and ended, its trend, and whether it is
    flat (the trend's change over the span is at most ``allowed``)."""
    start, end = points[0], points[-1]
    slope = slope_per_minute(points)
    trend_change = slope * (end[0] - start[0]) / 60
    change = end[1] - start[1]
    return {
        "warmup_end": round(start[1], 1),
        "end": round(end[1], 1),
        "change": round(change, 1),
        "min": round(min(value for _, value in points), 1),
        "max": round(max(value for _, value in points), 1),
        "slope_per_minute": round(slope, 2),
        "trend_change": round(trend_change, 1),
        "allowed": round(allowed, 1),
        "flat": trend_change <= allowed,
    }


def process_figures(samples: list[ProcessSample], warmup_s: float) -> dict[str, Any] | None:
    """RSS, descriptors and threads of one process from its first sample at or after the
    warm-up's end on; None with fewer than two such samples (a short-lived process)."""
    after = [sample for sample in samples if sample.at_s >= warmup_s]
    if len(after) < 2:
        return None
    rss_allowed = max(RSS_FLAT_MB, RSS_FLAT_FRACTION * after[0].rss_mb)
    return {
        "rss_mb": series_figures([(s.at_s, s.rss_mb) for s in after], rss_allowed),
        "fds": series_figures([(s.at_s, s.fds) for s in after], COUNT_FLAT),
        "threads": series_figures([(s.at_s, s.threads) for s in after], COUNT_FLAT),
        "from_s": after[0].at_s,
        "to_s": after[-1].at_s,
    }


# --- the clients --------------------------------------------------------------------------


@dataclass
class Tally:
    """What the clients did, in counts only: a soak must not hold its own turns' audio."""

    started: float = field(default_factory=time.monotonic)
    turns: Counter[str] = field(default_factory=Counter)
    first_cycle_s: dict[int, float] = field(default_factory=dict)  # client -> when it ended
    turns_with_frame_problems: int = 0
    audio_frames: int = 0
    audio_bytes: int = 0
    failed_turns: list[dict[str, Any]] = field(default_factory=list)
    error_codes: Counter[str] = field(default_factory=Counter)

    def add(self, client: int, number: int, kind: str, result: TurnResult) -> None:
        self.turns[kind] += 1
        self.audio_frames += sum(1 for event in result.events if event.kind == "audio")
        self.audio_bytes += len(result.audio)
        self.error_codes.update(str(error.get("code")) for error in result.errors)
        self.turns_with_frame_problems += bool(frame_problems(result))
        problems = turn_problems(result)
        if problems:
            self.failed_turns.append(
                {"client": client, "turn": number, "kind": kind, "problems": problems}
            )

    def add_failure(self, client: int, number: int, kind: str, error: BaseException) -> None:
        """A turn that raised (a refused connection, no ``turn_end`` within the limit)."""
        self.turns[kind] += 1
        problem = f"{type(error).__name__}: {error}"
        self.failed_turns.append(
            {"client": client, "turn": number, "kind": kind, "problems": [problem]}
        )


async def client_loop(
    url: str, client: int, deadline: float, kinds: tuple[str, ...], tally: Tally
) -> None:
    """One client: turns one after another, the kinds in turn, until ``deadline`` passes."""
    number = 0
    while time.monotonic() < deadline:
        kind = kinds[(client + number) % len(kinds)]
        message = turn_message(kind, client + number // len(kinds))
        try:
            result = await run_turn(url, message, limit_seconds=TURN_LIMIT_SECONDS)
        except Exception as error:
            # Whatever ends a turn early is that turn's failure (a refused or dropped
            # connection, no turn_end in time, a frame that does not parse): counted, and the
            # client goes on, so that one bad turn does not end the soak.
            tally.add_failure(client, number, kind, error)
        else:
            tally.add(client, number, kind, result)
        number += 1
        if number == len(kinds):
            tally.first_cycle_s[client] = round(time.monotonic() - tally.started, 1)


async def soak(
    url: str,
    stack: Any,
    clients: int,
    seconds: float,
    interval_s: float,
    kinds: tuple[str, ...] = TURN_KINDS,
) -> dict[str, Any]:
    """``clients`` clients in a loop for ``seconds`` while every process of ``stack`` is sampled
    every ``interval_s``; the figures. ``kinds`` is the turn cycle (fewer kinds: a cheaper run)."""
    least_warmup_s = round(WARMUP_FRACTION * seconds, 1)
    # Samples on the interval's grid, and exactly at the warm-up's least end and when the time
    # is up, both while the clients are busy, so that the two figures compare like with like.
    schedule = sorted(
        {*(i * interval_s for i in range(int(seconds / interval_s) + 1)), least_warmup_s, seconds}
    )
    schedule = [at for at in schedule if at <= seconds]
    sampler = ProcessSampler(stack)
    tally = Tally(started=sampler.started)
    deadline = sampler.started + seconds
    loops = [
        asyncio.create_task(client_loop(url, client, deadline, kinds, tally))
        for client in range(clients)
    ]
    taken = []
    for at in schedule:
        await asyncio.sleep(max(0.0, sampler.started + at - time.monotonic()))
        taken.append(sampler.sample())
    await asyncio.gather(*loops)
    wall_s = time.monotonic() - sampler.started
    # A client that never finished its first cycle leaves no span after the warm-up to judge.
    cycles_done = [tally.first_cycle_s.get(client, seconds) for client in range(clients)]
    warmup_s = max(least_warmup_s, *cycles_done)
    processes = []
    for pid, samples in sampler.samples.items():
        processes.append(
            {
                "pid": pid,
                "name": sampler.names[pid],
                "samples": len(samples),
                "figures": process_figures(samples, warmup_s),
                "series": [[s.at_s, round(s.rss_mb, 1), s.fds, s.threads] for s in samples],
            }
        )
    return {
        "clients": clients,
        "seconds": seconds,
        "wall_seconds": round(wall_s, 1),
        "interval_s": interval_s,
        "warmup_s": warmup_s,
        "first_cycle_s": [tally.first_cycle_s.get(client) for client in range(clients)],
        "sample_times_s": taken,
        "turns": dict(tally.turns),
        "turns_total": sum(tally.turns.values()),
        "audio_frames": tally.audio_frames,
        "audio_bytes": tally.audio_bytes,
        "audio_seconds": round(tally.audio_bytes / SAMPLE_WIDTH / SAMPLE_RATE, 1),
        "turns_with_frame_problems": tally.turns_with_frame_problems,
        "failed_turns": tally.failed_turns,
        "error_codes": dict(tally.error_codes),
        "speech_server_pid": sampler.speech_pid,
        "processes": processes,
        "thresholds": {
            "warmup_fraction": WARMUP_FRACTION,
            "rss_mb": RSS_FLAT_MB,
            "rss_fraction": RSS_FLAT_FRACTION,
            "fds": COUNT_FLAT,
            "threads": COUNT_FLAT,
        },
    }


# --- the report ---------------------------------------------------------------------------


def is_clean(data: dict[str, Any]) -> bool:
    """The gate: every turn whole and complete, no error frame."""
    return not data["failed_turns"] and not data["error_codes"]


def print_report(data: dict[str, Any]) -> bool:
    turns = ", ".join(f"{count} {kind}" for kind, count in sorted(data["turns"].items()))
    print(
        f"\n{data['clients']} clients for {data['seconds'] / 60:.1f} min "
        f"({data['wall_seconds']:.0f} s with the last turns): {data['turns_total']} turns "
        f"({turns}), {data['audio_frames']} audio frames, {data['audio_bytes']:,} bytes, "
        f"{data['audio_seconds']:.0f} s of audio"
    )
    clean = is_clean(data)
    print(
        f"turns with lost or misordered frames: {data['turns_with_frame_problems']}; "
        f"turns failed or with error frames: {len(data['failed_turns'])}; "
        f"error frames: {data['error_codes'] or 'none'}"
    )
    for failed in data["failed_turns"][:10]:
        print(
            f"  client {failed['client']} turn {failed['turn']} ({failed['kind']}): "
            f"{'; '.join(failed['problems'])}"
        )
    if len(data["failed_turns"]) > 10:
        print(f"  ... and {len(data['failed_turns']) - 10} more (all in --json)")
    limits = data["thresholds"]
    cycles = [at for at in data["first_cycle_s"] if at is not None]
    print(
        f"\nwarm-up: {data['warmup_s']:.0f} s (a fifth of the run: "
        f"{limits['warmup_fraction'] * data['seconds']:.0f} s; every client's first cycle "
        f"done: {f'{max(cycles):.0f} s' if len(cycles) == data['clients'] else 'never'}, "
        f"whichever is later)"
    )
    print(
        f"every process from then to the end, {len(data['sample_times_s'])} samples every "
        f"{data['interval_s']:g} s; flat: the least-squares trend adds at most "
        f"{limits['rss_mb']:.0f} MB or {limits['rss_fraction']:.0%} of RSS, "
        f"{limits['fds']} fds, {limits['threads']} threads"
    )
    print(
        f"  {'pid':>8}  {'process':<15}{'RSS MB: warm-up':>16}{'end':>6}{'/min':>7}"
        f"{'trend':>7}{'fds: warm-up':>14}{'end':>5}{'max':>5}{'trend':>7}"
        f"{'threads: warm-up':>18}{'end':>5}{'trend':>7}  verdict"
    )
    for process in data["processes"]:
        figures = process["figures"]
        name = process["name"].split(" (")[0][:14]
        if figures is None:
            print(
                f"  {process['pid']:>8}  {name:<15}not enough samples after the warm-up "
                f"({process['samples']} in all)"
            )
            continue
        rss, fds, threads = figures["rss_mb"], figures["fds"], figures["threads"]
        growing = [
            label
            for label, series in (("RSS", rss), ("fds", fds), ("threads", threads))
            if not series["flat"]
        ]
        verdict = "flat" if not growing else "GROWING: " + ", ".join(growing)
        print(
            f"  {process['pid']:>8}  {name:<15}{rss['warmup_end']:>16.0f}{rss['end']:>6.0f}"
            f"{rss['slope_per_minute']:>7.2f}{rss['trend_change']:>+7.1f}"
            f"{fds['warmup_end']:>14.0f}{fds['end']:>5.0f}{fds['max']:>5.0f}"
            f"{fds['trend_change']:>+7.1f}{threads['warmup_end']:>18.0f}"
            f"{threads['end']:>5.0f}{threads['trend_change']:>+7.1f}  {verdict}"
        )
    print("nothing lost, misordered or failed:", "yes" if clean else "NO")
    return clean


def plot(data: dict[str, Any], path: Path) -> None:
    """RSS and open file descriptors of every process over the run; the warm-up shaded."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display here
    import matplotlib.pyplot as plt

    figure, (memory, descriptors) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    for process in data["processes"]:
        series = process["series"]
        minutes = [at / 60 for at, *_ in series]
        label = f"{process['name'].split(' (')[0]} ({process['pid']})"
        memory.plot(minutes, [rss for _, rss, _, _ in series], ".-", label=label)
        descriptors.plot(minutes, [fds for _, _, fds, _ in series], ".-", label=label)
    for axis, unit in ((memory, "RSS (MB)"), (descriptors, "open file descriptors")):
        axis.axvspan(0, data["warmup_s"] / 60, color="#ddd", label="warm-up")
        axis.set_ylabel(unit)
        axis.grid(alpha=0.3)
    memory.legend(fontsize=8)
    descriptors.set_xlabel(f"minutes ({data['clients']} clients looping)")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def run(args: argparse.Namespace) -> dict[str, Any]:
    # Loopback only: the replayed LLM, moto's DynamoDB or one on this machine, local ports.
    if not is_loopback(args.host):
        raise ValueError(f"soak runs on loopback only, not on {args.host}")
    if args.bedrock_model_id:
        raise ValueError("soak runs on loopback only: the replayed LLM, not Bedrock")
    dynamodb_host = urlparse(args.dynamodb_endpoint).hostname if args.dynamodb_endpoint else None
    if dynamodb_host is not None and not is_loopback(dynamodb_host):
        raise ValueError(f"soak runs on loopback only, not with DynamoDB on {dynamodb_host}")
    if args.clients < 1 or args.minutes <= 0 or args.interval <= 0:
        raise ValueError("--clients, --minutes and --interval must be positive")
    why = "samples the memory and file descriptors of its stack's processes"
    with own_stack(args, why) as (url, stack, machine):
        print(f"{args.clients} clients looping for {args.minutes:g} min...", flush=True)
        data = asyncio.run(soak(url, stack, args.clients, args.minutes * 60, args.interval))
    data = {"machine": machine, **data}
    data["clean"] = print_report(data)
    write_json(data, args.json)
    if args.plot:
        plot(data, Path(args.plot))
        print(f"RSS and file descriptors over the run drawn in {args.plot}")
    if not data["clean"]:
        sys.exit("voicewire bench soak: turns lost or misordered frames, failed or had errors")
    return data


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
