"""One event loop per Lambda execution environment, kept from one invocation to the next.

``asyncio.run`` makes a new loop for every invocation and closes it at the end, and with it every
connection opened on it: a speech session kept warm for the next turn would be dead on arrival.
So the worker runs its coroutines on this loop instead, on a thread of its own that lives as long
as the environment. Between invocations Lambda freezes the whole process, this thread included;
nothing runs then, which is why a kept session is checked before it is used again
(``functions.adapters.speech_sessions``).

Lambda runs one invocation at a time per environment; the local stack runs several workers at
once in one process, and they share this loop as coroutines, which is just as safe.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None


def environment_loop() -> asyncio.AbstractEventLoop:
    """The environment's loop, started on first use."""
    global _loop
    with _lock:
        if _loop is None or _loop.is_closed():
            loop = asyncio.new_event_loop()
            ready = threading.Event()

            def run() -> None:
                asyncio.set_event_loop(loop)
                loop.call_soon(ready.set)
                loop.run_forever()

            threading.Thread(target=run, name="environment-loop", daemon=True).start()
            ready.wait()
            _loop = loop
        return _loop


def run_in_environment[T](coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` on the environment's loop and wait for its result (or exception)."""
    loop = environment_loop()
    if _running_loop() is loop:
        raise RuntimeError("run_in_environment called from the environment loop itself")
    return asyncio.run_coroutine_threadsafe(coroutine, loop).result()


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
