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
import threading
from collections.abc import Iterator
from types import FrameType

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_commands: list[str] = []  # the commands under stop_on_signals, innermost last
# How often a main thread with nothing to do wakes to run a pending signal's handler.
SIGNAL_POLL_SECONDS = 0.2


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


def wait_for_stop() -> None:
    """Block the main thread until a stop signal raises KeyboardInterrupt in it.

    Not one endless ``Event().wait()``: the kernel hands a process's signal to any of its
    threads, and when that is a server's thread, CPython only marks the signal pending for the
    main thread, whose blocked lock wait is not interrupted. The handler then never ran, and
    ``voicewire up`` ignored Ctrl-C for good (seen 1 stop in 4 while a turn spoke). Short waits
    let the main thread run the pending handler within SIGNAL_POLL_SECONDS."""
    never = threading.Event()
    while not never.wait(SIGNAL_POLL_SECONDS):
        pass
