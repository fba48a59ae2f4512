"""``voicewire demo``: voicewire against the pipeline the seed describes, on one stack.

    uv run voicewire demo [--modes bidi,seed_bidi,seed_batch] [--trials 5] [--prompt ...]
        [--json PATH] [--out-dir demo-audio] [--url ws://...] [--speech-link LINK[,LINK]]

The same question, the same replayed LLM stream (or, with ``--llm local``, the local model's
greedy answer) and the same engine, the modes of
``voicewire_tools.compared_modes`` with the trials interleaved so that drift hits every mode
alike; its last line says how much sooner voicewire's bidi spoke than each other mode. The seed's
modes switch the demo's own stack to the seed's pipeline: against a stack named by ``--url`` (a
deployment, through ``agent-infra demo``) only voicewire's own bidi and batch can run.

With ``--speech-link sagemaker,websocket`` it also sets the deployed speech link (the SDK's
HTTP/2 client through the local SageMaker runtime) beside a direct WebSocket, on one stack with
the trials interleaved: per turn (first audio, total) and per chunk (a session's set-up, one
message's round trip through the framing).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from voicewire.turn_client import ConnectionUrl, TurnResult, run_turn
from voicewire_tools.commands.deployment_check import with_query
from voicewire_tools.compared_modes import MODES, SEED_MODES, parse_modes
from voicewire_tools.stop_signals import stop_on_signals, stopping

DEFAULT_PROMPT = "Why does streaming make voice agents feel faster?"
OWN_STACK_MODES = ("bidi", "seed_bidi", "seed_batch")
URL_MODES = ("bidi", "batch")  # a stack the demo did not start cannot switch to the seed's
# A turn of the default question on this project's 2-core machines takes 5.6-6.9 s from ask to
# its last audio (docs/results.md, an Intel Xeon), 9-12 s on a slower day: the start-up
# estimate, refined after the first trial.
TYPICAL_TURN_SECONDS = 8.0
FIGURES = (
    ("first text", "first_text_ms"),
    ("first audio", "first_audio_ms"),
    ("total", "total_ms"),
)


def add_arguments(parser: argparse.ArgumentParser, own_stack: bool = True) -> None:
    """The demo's options; ``own_stack=False`` for ``agent-infra demo``, which always names the
    deployed API's URL and so has no local stack to configure."""
    parser.add_argument("--prompt", default=DEFAULT_PROMPT)
    parser.add_argument("--trials", type=int, default=5, help="trials per mode (default 5)")
    parser.add_argument(
        "--modes",
        type=_modes_argument,
        default=None,
        metavar="MODE[,MODE]",
        help="which pipelines, of: bidi, batch (voicewire's), seed_bidi, seed_batch (the "
        f"seed's); default {','.join(OWN_STACK_MODES)} (with --url: {','.join(URL_MODES)})",
    )
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--out-dir", default="demo-audio", help="where each mode's audio goes")
    if not own_stack:
        parser.add_argument("--url", required=True, help="the API's wss:// URL (the stage URL)")
        return
    from voicewire_tools.commands.up import add_stack_arguments

    parser.add_argument("--url", help="a running stack's WebSocket URL (default: start one)")
    parser.add_argument(
        "--speech-link",
        type=speech_links,
        default=("sagemaker",),
        metavar="LINK[,LINK]",
        help="sagemaker (default), websocket, or both to compare them side by side: "
        "sagemaker,websocket (its own stack only)",
    )
    add_stack_arguments(parser)
    # Its own stack takes free ports, beside a running `up`.
    parser.set_defaults(speech_port=0, runtime_port=0)


def speech_links(value: str) -> tuple[str, ...]:
    links = tuple(link.strip() for link in value.split(",") if link.strip())
    unknown = [link for link in links if link not in ("sagemaker", "websocket")]
    if not links or unknown:
        raise argparse.ArgumentTypeError(
            f"expected sagemaker, websocket or both (comma-separated), not {value!r}"
        )
    return tuple(dict.fromkeys(links))


def _modes_argument(value: str) -> tuple[str, ...]:
    try:
        return parse_modes(value)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def chosen_modes(args: argparse.Namespace) -> tuple[str, ...]:
    """The modes to run: the ones asked for, voicewire's bidi first (every ratio is against
    it), or the defaults for where the demo runs. A ``ValueError`` says what cannot run."""
    given = getattr(args, "modes", None)
    modes = given or (URL_MODES if args.url else OWN_STACK_MODES)
    if args.url and (seed := [mode for mode in modes if mode in SEED_MODES]):
        raise ValueError(
            f"{', '.join(seed)} switch the demo's own stack to the seed's pipeline, which a "
            "stack given by --url cannot do: leave out --url, or choose from bidi, batch"
        )
    if "bidi" not in modes:
        raise ValueError("the demo compares with voicewire's bidi: --modes must include bidi")
    return ("bidi", *(mode for mode in modes if mode != "bidi"))


def summarize(results: list[TurnResult]) -> dict[str, dict[str, Any]]:
    from voicewire_tools.bench.report import turn_figures

    return turn_figures(results)


def print_table(title: str, summary: dict[str, dict[str, float]], trials: int) -> None:
    print(f"\n{title} ({trials} trials)".ljust(34) + "median       min       max")
    for label, key in FIGURES:
        if key in summary:
            row = summary[key]
            print(
                f"  {label:<18}{row['median']:>9.0f} ms{row['min']:>7.0f} ms{row['max']:>7.0f} ms"
            )


@contextlib.contextmanager
def target(url: str | None, args: argparse.Namespace) -> Iterator[tuple[str, Any]]:
    """The WebSocket URL to use, and the stack behind it when the demo started its own."""
    if url:
        yield url, None
        return
    from voicewire_tools.commands.up import quiet_lambda_output, stack_options
    from voicewire_tools.local_stack.stack import LocalStack

    quiet_lambda_output(args.verbose)
    stack = LocalStack(stack_options(args, 0), progress=lambda line: print(line, flush=True))
    stack.start()
    try:
        yield stack.ws_url, stack
    finally:
        stopping()  # under stop_on_signals, a second Ctrl-C now ends the process at once
        stack.stop()


def ticketed(url: str, minter: Callable[[], str | None] | None) -> ConnectionUrl:
    """``url``, or with a minter (a connect ticket opens one connection) a function giving
    ``url`` with a fresh ticket for each connection; a URL that carries a ticket is kept."""
    if minter is None or "token=" in url:
        return url
    return lambda: with_query(url, token=minter() or None)


Results = dict[str, dict[str, list[TurnResult]]]  # link -> mode -> trials


async def run_trials(
    url: ConnectionUrl,
    prompt: str,
    trials: int,
    links: tuple[str, ...],
    stack: Any,
    modes: tuple[str, ...] = URL_MODES,
) -> Results:
    """``url``: the client link, or a function giving one per connection (a connect ticket
    opens one connection: ``agent-infra demo`` mints a ticket per turn)."""
    results: Results = {link: {mode: [] for mode in modes} for link in links}
    started = time.monotonic()
    for trial in range(trials):
        for link in links:  # interleaved, so drift affects every link and mode alike
            if stack is not None and stack.options.speech_link != link:
                await asyncio.to_thread(stack.use_speech_link, link)
            for mode in modes:
                if stack is not None:
                    stack.use_baseline(MODES[mode].baseline)
                message = {"action": "ask", "prompt": prompt, "mode": MODES[mode].ask_mode}
                result = await run_turn(url, message)
                if result.status != "complete":
                    raise RuntimeError(
                        f"{mode} trial {trial + 1} ended {result.status}: {result.errors}"
                    )
                results[link][mode].append(result)
                first_audio = result.end["timings"]["first_audio_ms"] if result.end else None
                label = f"{link} {mode}" if len(links) > 1 else mode
                print(f"trial {trial + 1} {label:<21} first audio {first_audio:.0f} ms", flush=True)
        if trial == 0 and trials > 1:
            spent = time.monotonic() - started
            print(
                f"(a trial takes {spent:.0f} s here: about {_duration(spent * (trials - 1))} "
                "to go)",
                flush=True,
            )
    if stack is not None:
        stack.use_baseline("voicewire")
    return results


def announce(args: argparse.Namespace, modes: tuple[str, ...], links: tuple[str, ...]) -> None:
    """What the demo is about to do and how long it takes, before anything starts."""
    others = [MODES[mode].title for mode in modes if mode != "bidi"]
    turns = args.trials * len(modes) * len(links)
    print(
        f"voicewire demo: voicewire's bidi against {_sentence(others)}: the same question, "
        "LLM stream and engine, trials interleaved"
    )
    per_link = f" x {len(links)} speech links" if len(links) > 1 else ""
    after = (
        ""
        if args.url
        else (
            ", after the stack starts (a minute or two the first time, while the model is "
            "assembled: its progress is shown)"
        )
    )
    expected = _duration(turns * TYPICAL_TURN_SECONDS)
    trials = f"{args.trials} trial" + ("s" if args.trials != 1 else "")
    print(
        f"  {trials} x {len(modes)} modes{per_link} = {turns} turns, about "
        f"{expected} on a 2-core machine{after}",
        flush=True,
    )


def headline(modes: dict[str, dict[str, Any]]) -> tuple[str, dict[str, float]]:
    """The last line: how much sooner voicewire's bidi spoke than each other mode (medians of
    first audio), and those ratios."""
    bidi = modes["bidi"]["first_audio_ms"]["median"]
    ratios = {
        mode: figures["first_audio_ms"]["median"] / bidi
        for mode, figures in modes.items()
        if mode != "bidi"
    }
    parts = [
        f"{ratio:.2f}x sooner than {MODES[mode].title} "
        f"({modes[mode]['first_audio_ms']['median']:.0f} ms)"
        for mode, ratio in ratios.items()
    ]
    return f"voicewire's bidi spoke after {bidi:.0f} ms: {_sentence(parts)}", ratios


def run(args: argparse.Namespace) -> None:
    out_dir = Path(args.out_dir)
    links: tuple[str, ...] = getattr(args, "speech_link", ("sagemaker",))
    if args.url and len(links) > 1:
        sys.exit("voicewire demo: comparing speech links needs its own stack (leave out --url)")
    try:
        modes = chosen_modes(args)
    except ValueError as error:
        sys.exit(f"voicewire demo: {error}")
    announce(args, modes, links)
    try:
        with stop_on_signals("voicewire demo"), target(args.url, args) as (url, stack):
            where = f"speech link {', '.join(links)}" if stack is not None else str(url)
            print(f"prompt: {args.prompt!r} ({where})", flush=True)
            urls = ticketed(url, getattr(args, "ticket_minter", None))  # agent-infra demo's
            results = asyncio.run(run_trials(urls, args.prompt, args.trials, links, stack, modes))
            link_costs = _measure_links(stack, links) if len(links) > 1 else []
    except KeyboardInterrupt:
        print("\nvoicewire demo: stopped", file=sys.stderr, flush=True)
        sys.exit(130)
    except Exception as error:
        sys.exit(f"voicewire demo: {error}")
    # The first link's figures at the top level (the single-link report); every link's under
    # "links" when several are compared.
    report: dict[str, Any] = {"prompt": args.prompt, "trials": args.trials}
    out_dir.mkdir(parents=True, exist_ok=True)
    lines = []
    for link in links:
        figures_of = {mode: summarize(results[link][mode]) for mode in modes}
        for mode in modes:
            title = f"{link}: {mode}" if len(links) > 1 else mode
            print_table(title, figures_of[mode], args.trials)
        line, ratios = headline(figures_of)
        figures = {
            "speech_link": link if stack is not None else None,
            "modes": figures_of,
            "bidi_sooner_than": ratios,
        }
        if link == links[0]:
            report.update(figures)
        if len(links) > 1:
            report.setdefault("links", {})[link] = figures
        lines.append((f"{link}: " if len(links) > 1 else "") + line)
    if link_costs:
        report["link_cost"] = {cost.link: cost.summary() for cost in link_costs}
        _print_link_comparison(report, link_costs)
    first = links[0]
    for mode in modes:
        results[first][mode][-1].write_wav(out_dir / f"{mode}.wav")
    wavs = ", ".join(f"{out_dir}/{mode}.wav" for mode in modes)
    print(f"\naudio of the last {first} trial of each mode: {wavs}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
        print(f"figures written to {args.json}")
    print("\n" + "\n".join(lines))


def _sentence(parts: list[str]) -> str:
    if len(parts) <= 1:
        return "".join(parts)
    return ", ".join(parts[:-1]) + " and " + parts[-1]


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min"


def _measure_links(stack: Any, links: tuple[str, ...]) -> list[Any]:
    from voicewire_tools.local_stack.link_cost import measure_links

    print("\nmeasuring each speech link alone (sessions, pings, a one-clause text)...", flush=True)
    return measure_links(stack, links)


def _print_link_comparison(report: dict[str, Any], costs: list[Any]) -> None:
    print("\nper turn (median first audio / total, ms)")
    for link, data in report["links"].items():
        cells = "   ".join(
            f"{mode} {figures['first_audio_ms']['median']:>6.0f} / "
            f"{figures['total_ms']['median']:>6.0f}"
            for mode, figures in data["modes"].items()
        )
        print(f"  {link:<10} {cells}")
    print("\nper session and per chunk (medians, ms)")
    print("  link        open session   message round trip   one-clause first audio")
    for cost in costs:
        summary = cost.summary()
        print(
            f"  {cost.link:<10}{summary['open_ms']['median']:>14.1f}"
            f"{summary['round_trip_ms']['median']:>21.1f}"
            f"{summary['first_audio_ms']['median']:>25.1f}"
        )
