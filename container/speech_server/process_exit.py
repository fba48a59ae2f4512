"""How the speech server's process ends when it is asked to, at any moment.

uvicorn owns SIGTERM and SIGINT only while it serves (``speech_server.server``: the first signal
drains). Before that (the imports, the GPU check: a second or two) and after it, a signal would
otherwise raise KeyboardInterrupt wherever the main thread is, and print a traceback from inside
an import. And the model loads on a thread of its own (a few seconds, longer while the model is
first assembled): a process that ends while onnxruntime is initializing a session aborts in C++
("terminate called without an active exception") as the interpreter tears down. So: one line,
and an exit that skips the teardown.

Kept free of heavy imports: ``__main__`` installs it before importing the server.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType

MODEL_LOAD_THREAD = "model-load"  # speech_server.app names its loading thread so
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
# The local stack starts the server in a session of its own (a terminal's Ctrl-C reaches the
# stack, which stops the server in order) and names itself here: the server stops if it is
# left alone (the stack killed), instead of holding its port forever.
PARENT_ENV = "VOICEWIRE_STOP_WITH_PARENT"


def exit_now(status: int = 0, line: str | None = None) -> None:
    """End the process at once: flush what was written, skip the interpreter's teardown."""
    if line:
        print(line, file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def stop_outside_serving() -> None:
    """Until uvicorn takes the signals over (and once it gives them back): a stop request ends
    the process with one line."""

    def stop(signum: int, frame: FrameType | None) -> None:
        exit_now(0, f"speech server: stopped ({signal.Signals(signum).name})")

    for signum in STOP_SIGNALS:
        signal.signal(signum, stop)


def end_by_signal_after_serving(serving_began: Callable[[], bool]) -> None:
    """Installed just before uvicorn takes the signals, and put back by uvicorn when it gives
    them back. Until ``serving_began()`` (a signal in the moment before uvicorn installs its
    handlers) a stop is the one-line stop above. After it, a signal is one uvicorn recorded (a
    second one, its forced exit) and raises again, or one that came after the server stopped;
    the process ends by that signal, as a forced exit always has (a clean drain raises none)."""

    def end(signum: int, frame: FrameType | None) -> None:
        if not serving_began():
            exit_now(0, f"speech server: stopped ({signal.Signals(signum).name})")
        sys.stderr.flush()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    for signum in STOP_SIGNALS:
        signal.signal(signum, end)


def model_still_loading() -> bool:
    return any(t.name == MODEL_LOAD_THREAD and t.is_alive() for t in threading.enumerate())


def finish(status: int = 0) -> None:
    """After the server stopped: exit at once if the model is still loading (its thread would
    abort the process at teardown), else return for an ordinary exit."""
    if model_still_loading():
        exit_now(status, "speech server: stopped while the model was loading")


def stop_with_parent(poll_seconds: float = 0.5) -> None:
    """When ``VOICEWIRE_STOP_WITH_PARENT`` names the process that started this one: once that
    process is gone, stop as a SIGTERM would (drain, then exit)."""
    expected = os.environ.get(PARENT_ENV)
    if not expected:
        return

    def watch() -> None:
        while os.getppid() == int(expected):
            time.sleep(poll_seconds)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()
