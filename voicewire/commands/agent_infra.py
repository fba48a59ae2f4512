"""``agent-infra``: the agent side of a deployment (the WebSocket API and its functions).

    uv run agent-infra check --url wss://abc123.execute-api.eu-west-1.amazonaws.com/prod \\
        [--token TOKEN] [--json report.json]

``check`` verifies from outside, in a few seconds, what only a real deployment can show
(``voicewire.commands.deployment_check``). It works against the local stack too
(``--url ws://127.0.0.1:8000/ws``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agent-infra", description="The agent side of a voicewire deployment."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    check = commands.add_parser(
        "check",
        help="check a deployed WebSocket API: audio frame type, first audio, bidi vs batch",
    )
    check.add_argument("--url", required=True, help="the API's wss:// URL (the stage URL)")
    check.add_argument("--token", help="a connection token, if the API requires one")
    check.add_argument("--prompt", help="the question for the ask turns")
    check.add_argument("--json", help="also write the report to this file")
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    from voicewire.commands.deployment_check import ASK_PROMPT, CheckFailed, check, render

    try:
        report = asyncio.run(check(args.url, args.token, args.prompt or ASK_PROMPT))
    except CheckFailed as error:
        sys.exit(f"agent-infra check: {error}")
    print(render(report))
    if args.json:
        with open(args.json, "w") as out:
            json.dump(asdict(report) | {"batch_over_bidi": report.batch_over_bidi}, out, indent=2)
    if not report.ok:
        sys.exit(1)


if __name__ == "__main__":
    main()
