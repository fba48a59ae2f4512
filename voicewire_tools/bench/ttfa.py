"""``voicewire bench ttfa``: time to first audio, voicewire against the seed's own pipeline.

    uv run voicewire bench ttfa [--trials 5] [--json PATH] [--plot PATH] [--url ws://...]

On the local stack (started on free ports unless ``--url`` names one), with the same replayed LLM
stream and the same engine, the four modes of ``voicewire_tools.compared_modes``, trials
interleaved so that drift hits them alike. Where the seed's modes still differ from the seed's
own code: the seed's container loop was strictly sequential (receive, synthesize, send,
receive the next); voicewire's server handles a session's requests one after the other too, and
with whole sentences and no early cut each request is one chunk, so the only remaining
difference is that voicewire's server reads the next request while it synthesizes (the seed's
read it after sending).

Two answers: the seed's 267-character four-sentence one and the default one. Targets: ``bidi``
at least 2x sooner to first audio than ``seed_bidi`` and at least 5x sooner than ``seed_batch``.
``--plot`` draws one turn per mode on a shared time axis.

``--front-door agentcore``: the seed's own deployment, an AgentCore Runtime app
(``functions.agentcore``), on the local stack. voicewire's ``bidi`` against the seed's bidi and
batch, each over ``/ws`` (voicewire's frames, binary audio) and over ``/invocations`` (the seed's
server-sent events, base64 audio in JSON), with the bytes each transport carries per second of
audio.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from voicewire.sse_turn import invocations_url, run_sse_turn
from voicewire.turn_client import ConnectionUrl, TurnResult, run_turn
from voicewire_tools.bench.machine import describe_machine, machine_line
from voicewire_tools.bench.report import turn_figures, write_json
from voicewire_tools.compared_modes import MODES
from voicewire_tools.local_stack.link_cost import summarize

ANSWERS = {  # the replayed recording each prompt selects (events/llm/README.md)
    "four_sentences": "Why does streaming make voice agents feel faster?",
    "default": "Tell me something about the weather.",
}
RECORDINGS = {  # every spoken recording: bench stalls runs them all
    "short": "Hello, who are you?",
    **ANSWERS,
    "long_markdown": "What are the steps of the release?",
}
TARGETS = (("seed_bidi", 2.0), ("seed_batch", 5.0))  # bidi at least this many times sooner
FRONT_DOORS = ("apigateway", "agentcore")  # voicewire bench ttfa --front-door
AGENTCORE_MODES = ("seed_batch", "seed_bidi", "bidi")
TRANSPORTS = ("ws", "sse")  # /ws (voicewire's frames), /invocations (the seed's events)
AUDIO_BYTES_PER_SECOND = 48_000  # 24 kHz 16-bit mono PCM


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument(
        "--answers", default=",".join(ANSWERS), help="which answers, of: " + ", ".join(RECORDINGS)
    )


Trials = dict[str, dict[str, list[TurnResult]]]  # answer -> mode -> results


async def run_trials(url: ConnectionUrl, stack: Any, answers: list[str], trials: int) -> Trials:
    modes = list(MODES) if stack is not None else ["batch", "bidi"]
    results: Trials = {answer: {mode: [] for mode in modes} for answer in answers}
    for trial in range(1, trials + 1):
        for answer in answers:
            for mode in modes:
                if stack is not None:
                    stack.use_baseline(MODES[mode].baseline)
                prompt = RECORDINGS[answer]
                message = {"action": "ask", "prompt": prompt, "mode": MODES[mode].ask_mode}
                result = await run_turn(url, message)
                if result.status != "complete":
                    raise RuntimeError(f"{mode} ended {result.status}: {result.errors}")
                results[answer][mode].append(result)
                first = result.end["timings"]["first_audio_ms"] if result.end else None
                print(
                    f"trial {trial}/{trials} {answer:<15} {mode:<11} first audio {first:.0f} ms",
                    flush=True,
                )
    if stack is not None:
        stack.use_baseline("voicewire")
    return results


async def run_agentcore_trials(url: str, stack: Any, answers: list[str], trials: int) -> Trials:
    """The AgentCore comparison: each of ``AGENTCORE_MODES`` over each of ``TRANSPORTS``,
    interleaved; rows named ``mode/transport``."""
    rows = [f"{mode}/{transport}" for mode in AGENTCORE_MODES for transport in TRANSPORTS]
    results: Trials = {answer: {row: [] for row in rows} for answer in answers}
    for trial in range(1, trials + 1):
        for answer in answers:
            for row in rows:
                mode, transport = row.split("/")
                stack.use_baseline(MODES[mode].baseline)
                prompt, ask_mode = RECORDINGS[answer], MODES[mode].ask_mode
                if transport == "ws":
                    message = {"action": "ask", "prompt": prompt, "mode": ask_mode}
                    result = await run_turn(url, message)
                else:  # the seed's payload, as its client posts it
                    payload = {"prompt": prompt, "mode": ask_mode}
                    result = await run_sse_turn(invocations_url(url), payload)
                if result.status != "complete":
                    raise RuntimeError(f"{row} ended {result.status}: {result.errors}")
                results[answer][row].append(result)
                first = result.end["timings"]["first_audio_ms"] if result.end else None
                print(
                    f"trial {trial}/{trials} {answer:<15} {row:<15} first audio {first:.0f} ms",
                    flush=True,
                )
    stack.use_baseline("voicewire")
    return results


def bytes_per_audio_second(turns: list[TurnResult]) -> dict[str, Any]:
    """What the transport carried per second of audio (its messages, not its framing)."""
    return summarize(
        [
            turn.bytes_received / (len(turn.audio) / AUDIO_BYTES_PER_SECOND)
            for turn in turns
            if turn.audio
        ]
    )


def report(results: Trials, machine: dict[str, Any], trials: int) -> dict[str, Any]:
    answers = {
        answer: {
            "prompt": RECORDINGS[answer],
            "modes": {mode: turn_figures(turns) for mode, turns in modes.items()},
        }
        for answer, modes in results.items()
    }
    for answer, modes in results.items():
        for mode, turns in modes.items():
            answers[answer]["modes"][mode]["bytes_per_audio_second"] = bytes_per_audio_second(turns)
    first = next(iter(answers.values()))
    return {"machine": machine, "trials": trials, "modes": first["modes"], "answers": answers}


def print_report(data: dict[str, Any]) -> bool:
    """The tables and the targets; whether every target was met."""
    print("\n" + machine_line(data["machine"]))
    if data.get("front_door") == "agentcore":
        print("front door: the AgentCore Runtime app (functions/agentcore), rows mode/transport")
    met = True
    for answer, content in data["answers"].items():
        modes = content["modes"]
        print(f"\n{answer} ({content['prompt']!r}), {data['trials']} trials, medians (min-max)")
        print(
            f"  {'mode':<15}{'first text':>14}{'first audio':>22}{'total':>22}{'bytes/audio s':>15}"
        )
        for mode, row in modes.items():
            cells = [
                f"{row[key]['median']:>7.0f} ({row[key]['min']:.0f}-{row[key]['max']:.0f})"
                if key in row
                else "-"
                for key in ("first_text_ms", "first_audio_ms", "total_ms")
            ]
            weight = row.get("bytes_per_audio_second", {}).get("median")
            weight_cell = f"{weight:,.0f}" if weight else "-"
            print(f"  {mode:<15}{cells[0]:>14}{cells[1]:>22}{cells[2]:>22}{weight_cell:>15}")
        for suffix in _row_suffixes(modes):
            bidi = modes[f"bidi{suffix}"]["first_audio_ms"]["median"]
            for baseline, target in TARGETS:
                if f"{baseline}{suffix}" not in modes:
                    continue
                ratio = modes[f"{baseline}{suffix}"]["first_audio_ms"]["median"] / bidi
                ok = ratio >= target
                met &= ok
                print(
                    f"  bidi{suffix} vs {baseline}{suffix}: {ratio:.2f}x sooner (target "
                    f"{target:.0f}x) {'met' if ok else 'MISSED'}"
                )
    return met


def _row_suffixes(modes: dict[str, Any]) -> list[str]:
    """``""`` for rows named by mode alone; ``/ws``, ``/sse`` for the AgentCore rows."""
    return [row.removeprefix("bidi") for row in modes if row.split("/")[0] == "bidi"]


def plot(results: Trials, path: Path) -> None:
    """One turn per mode (the last trial of the first answer) on a shared time axis."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display here
    import matplotlib.pyplot as plt

    answer, modes = next(iter(results.items()))
    figure, axis = plt.subplots(figsize=(11, 1.1 + 0.8 * len(modes)))
    for row, turns in enumerate(reversed(list(modes.values()))):
        events = turns[-1].events
        texts = [e.at_ms for e in events if e.kind == "text_delta"]
        # over SSE no chunk is shown: the seed's events have no sentence
        sentences = [e.at_ms for e in events if e.kind == "sentence"]
        audio = [e.at_ms for e in events if e.kind in ("audio", "audio_chunk")]
        axis.scatter(
            texts,
            [row + 0.25] * len(texts),
            marker="|",
            s=60,
            color="#888",
            label="text delta" if row == 0 else None,
        )
        axis.scatter(
            sentences,
            [row + 0.12] * len(sentences),
            marker="v",
            s=40,
            color="#2a6",
            label="chunk sent to speech" if row == 0 else None,
        )
        axis.scatter(
            audio,
            [row] * len(audio),
            marker="s",
            s=10,
            color="#36c",
            label="audio frame received" if row == 0 else None,
        )
        if audio:
            axis.plot([audio[0]] * 2, [row - 0.3, row + 0.4], color="#c33", linewidth=2)
            axis.annotate(
                f"{audio[0]:.0f} ms",
                (audio[0], row - 0.35),
                color="#c33",
                fontsize=8,
                ha="left",
                va="top",
            )
    axis.set_yticks(range(len(modes)), list(reversed(list(modes))))
    axis.set_xlabel("ms since the ask was sent (red: first audio)")
    axis.set_title(f"one turn per mode: {RECORDINGS[answer]!r}")
    axis.legend(loc="lower right", fontsize=8)
    axis.grid(axis="x", alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


@contextlib.contextmanager
def target(args: argparse.Namespace) -> Iterator[tuple[ConnectionUrl, Any]]:
    """The WebSocket URL and its stack: ``voicewire demo``'s own stack, or ``--url``."""
    from voicewire_tools.commands.demo import target as demo_target
    from voicewire_tools.commands.demo import ticketed

    with demo_target(args.url, args) as (url, stack):
        # --mint-tickets: a fresh connect ticket for each connection (each opens one).
        yield ticketed(url, getattr(args, "ticket_minter", None)), stack


@contextlib.contextmanager
def own_stack(args: argparse.Namespace, why: str) -> Iterator[tuple[str, Any, dict[str, Any]]]:
    """For a benchmark that changes its stack while it runs (``why``): ``--url`` refused, the
    stack started, its machine line printed; yields the URL, the stack and the machine."""
    from voicewire_tools.commands.demo import target as demo_target

    if args.url:
        raise ValueError(f"{args.benchmark} {why}: it needs its own stack")
    with demo_target(None, args) as (url, stack):
        machine = describe_machine(speech_info(stack))
        print(machine_line(machine), flush=True)
        yield url, stack, machine


def speech_info(stack: Any) -> dict[str, Any] | None:
    import httpx

    if stack is None:
        return None
    ping = f"http://{stack.options.host}:{stack.options.speech_port}/ping"
    return dict(httpx.get(ping, timeout=5).json())


def run(args: argparse.Namespace) -> dict[str, Any]:
    answers = [a.strip() for a in args.answers.split(",") if a.strip()]
    unknown = [a for a in answers if a not in RECORDINGS]
    if unknown or not answers:
        raise ValueError(f"unknown answers {unknown}; choose from {', '.join(RECORDINGS)}")
    agentcore = getattr(args, "front_door", "apigateway") == "agentcore"
    if agentcore and args.url:
        raise ValueError(
            "ttfa --front-door agentcore switches its stack to the seed's pipeline "
            "turn by turn: it needs its own stack, not --url"
        )
    with target(args) as (url, stack):
        if stack is None:
            print(
                "a stack given by --url cannot switch to the seed's pipeline: voicewire's "
                "modes only"
            )
        machine = describe_machine(speech_info(stack))
        print(machine_line(machine), flush=True)
        trials = run_agentcore_trials if agentcore else run_trials
        results = asyncio.run(trials(url, stack, answers, args.trials))
    data = report(results, machine, args.trials)
    data["front_door"] = "agentcore" if agentcore else "apigateway"
    data["targets_met"] = print_report(data)
    write_json(data, args.json)
    if args.plot:
        plot(results, Path(args.plot))
        print(f"timeline drawn in {args.plot}")
    return data
