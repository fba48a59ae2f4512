"""How the long-running commands (``voicewire up``, ``demo``, the benches) stop: Ctrl-C, SIGTERM
(``kill``, a supervisor) and SIGHUP (a closed terminal) all raise KeyboardInterrupt in the main
thread, where the command stops its stack in order; a second signal while it stops ends the
process at once, with one line (its speech server then stops by itself: it watches its parent,
``speech_server.process_exit``)."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Iterator
from types import FrameType

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_commands: list[str] = []  # the commands under stop_on_signals, innermost last


@contextlib.contextmanager
def stop_on_signals(command: str) -> Iterator[None]:
    """While the command runs, a stop signal is a KeyboardInterrupt; the handlers it found are
    put back after (the command may run inside another program: a test, a notebook)."""

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    for signum in STOP_SIGNALS:
        signal.signal(signum, interrupt)
    _commands.append(command)
    try:
        yield
    finally:
        _commands.pop()
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def stopping() -> None:
    """The command has begun to stop: from now on a signal does not interrupt the stop (a
    traceback from the middle of it), it ends the process at once. Outside stop_on_signals,
    nothing changes."""
    if not _commands:
        return
    command = _commands[-1]

    def at_once(signum: int, frame: FrameType | None) -> None:
        print(f"{command}: stopped at once", file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(130)

    for signum in STOP_SIGNALS:
        signal.signal(signum, at_once)
