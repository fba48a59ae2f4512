"""``voicewire demo``: the seed's comparison, bidi against batch, same prompt, same engine.

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
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from voicewire.turn_client import ConnectionUrl, TurnResult, run_turn
from voicewire_tools.commands.deployment_check import with_query

DEFAULT_PROMPT = "Why does streaming make voice agents feel faster?"
MODES = ("bidi", "batch")
FIGURES = (
    ("first text", "first_text_ms"),
    ("first audio", "first_audio_ms"),
    ("total", "total_ms"),
)


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
        stack.stop()


def ticketed(url: str, minter: Callable[[], str | None] | None) -> ConnectionUrl:
    """``url``, or with a minter (a connect ticket opens one connection) a function giving
    ``url`` with a fresh ticket for each connection; a URL that carries a ticket is kept."""
    if minter is None or "token=" in url:
        return url
    return lambda: with_query(url, token=minter() or None)


Results = dict[str, dict[str, list[TurnResult]]]  # link -> mode -> trials


async def run_trials(
    url: ConnectionUrl, prompt: str, trials: int, links: tuple[str, ...], stack: Any
) -> Results:
    """``url``: the client link, or a function giving one per connection (a connect ticket
    opens one connection: ``agent-infra demo`` mints a ticket per turn)."""
    results: Results = {link: {mode: [] for mode in MODES} for link in links}
    for trial in range(trials):
        for link in links:  # interleaved, so drift affects every link and mode alike
            if stack is not None and stack.options.speech_link != link:
                await asyncio.to_thread(stack.use_speech_link, link)
            for mode in MODES:
                result = await run_turn(url, {"action": "ask", "prompt": prompt, "mode": mode})
                if result.status != "complete":
                    raise RuntimeError(
                        f"{mode} trial {trial + 1} ended {result.status}: {result.errors}"
                    )
                results[link][mode].append(result)
                first_audio = result.end["timings"]["first_audio_ms"] if result.end else None
                label = f"{link} {mode}" if len(links) > 1 else mode
                print(f"trial {trial + 1} {label:<15} first audio {first_audio:.0f} ms", flush=True)
    return results


def run(args: argparse.Namespace) -> None:
    out_dir = Path(args.out_dir)
    links: tuple[str, ...] = args.speech_link
    if args.url and len(links) > 1:
        sys.exit("voicewire demo: comparing speech links needs its own stack (leave out --url)")
    try:
        with target(args.url, args) as (url, stack):
            where = f"speech link {', '.join(links)}" if stack is not None else url
            print(f"prompt: {args.prompt!r}; {args.trials} trials per mode ({where})")
            urls = ticketed(url, getattr(args, "ticket_minter", None))  # agent-infra demo's
            results = asyncio.run(run_trials(urls, args.prompt, args.trials, links, stack))
            link_costs = _measure_links(stack, links) if len(links) > 1 else []
    except Exception as error:
        sys.exit(f"voicewire demo: {error}")
    # The first link's figures at the top level (the single-link report); every link's under
    # "links" when several are compared.
    report: dict[str, Any] = {"prompt": args.prompt, "trials": args.trials}
    out_dir.mkdir(parents=True, exist_ok=True)
    for link in links:
        modes = {mode: summarize(results[link][mode]) for mode in MODES}
        for mode in MODES:
            title = f"{link}: {mode}" if len(links) > 1 else mode
            print_table(title, modes[mode], args.trials)
        bidi = modes["bidi"]["first_audio_ms"]["median"]
        batch = modes["batch"]["first_audio_ms"]["median"]
        figures = {
            "speech_link": link if stack is not None else None,
            "modes": modes,
            "batch_over_bidi_first_audio": batch / bidi,
        }
        if link == links[0]:
            report.update(figures)
        if len(links) > 1:
            report.setdefault("links", {})[link] = figures
        prefix = f"{link}: " if len(links) > 1 else ""
        print(
            f"\n{prefix}first audio, batch / bidi: {batch / bidi:.2f}x "
            "(the seed: 2.4x local, 3.5x deployed)"
        )
    if link_costs:
        report["link_cost"] = {cost.link: cost.summary() for cost in link_costs}
        _print_link_comparison(report, link_costs)
    first = links[0]
    for mode in MODES:
        results[first][mode][-1].write_wav(out_dir / f"{mode}.wav")
    print(f"audio of the last {first} trial of each mode: {out_dir}/bidi.wav, {out_dir}/batch.wav")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
        print(f"figures written to {args.json}")


def _measure_links(stack: Any, links: tuple[str, ...]) -> list[Any]:
    from voicewire_tools.local_stack.link_cost import measure_links

    print("\nmeasuring each speech link alone (sessions, pings, a one-clause text)...", flush=True)
    return measure_links(stack, links)


def _print_link_comparison(report: dict[str, Any], costs: list[Any]) -> None:
    print("\nper turn (median first audio / total, ms)")
    for link, data in report["links"].items():
        bidi, batch = data["modes"]["bidi"], data["modes"]["batch"]
        print(
            f"  {link:<10} bidi {bidi['first_audio_ms']['median']:>6.0f} / "
            f"{bidi['total_ms']['median']:>6.0f}   batch {batch['first_audio_ms']['median']:>6.0f}"
            f" / {batch['total_ms']['median']:>6.0f}"
        )
    print("\nper session and per chunk (medians, ms)")
    print("  link        open session   message round trip   one-clause first audio")
    for cost in costs:
        summary = cost.summary()
        print(
            f"  {cost.link:<10}{summary['open_ms']['median']:>14.1f}"
            f"{summary['round_trip_ms']['median']:>21.1f}"
            f"{summary['first_audio_ms']['median']:>25.1f}"
        )
