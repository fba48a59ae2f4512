"""``python -m functions.agentcore [--port 8080] [--host 0.0.0.0]``: the container's command.

AgentCore Runtime's container contract: port 8080 on every interface, ``/invocations``,
``/ping`` and ``/ws``. The settings come from the environment (``functions.settings``)."""

from __future__ import annotations

import argparse

from functions.agentcore.app import build_app


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m functions.agentcore")
    parser.add_argument("--port", type=int, default=8080)
    # Every interface: the SDK's own default (127.0.0.1 unless it detects Docker) would leave
    # the runtime's health checks and invocations outside the container.
    parser.add_argument("--host", default="0.0.0.0")
    args = parser.parse_args()
    build_app().run(port=args.port, host=args.host)


if __name__ == "__main__":
    main()
