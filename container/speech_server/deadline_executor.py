"""The synthesis thread's queue, earliest deadline first: whose listener runs out of audio soonest.

The engine serves one synthesis step at a time for every session on the server (``synthesis``:
two at once would only make both slower). In arrival order, a new answer's first chunk waited
behind other sessions' later chunks whose listeners still had seconds of audio queued: the local
load run (16 clients, one 2-core CPU server) ended 30 of 48 turns ``turn_timed_out``. Here each
step carries its *deadline*, the moment its listener would hear a gap without it:

- a session with audio queued: when that audio runs out (``PlaybackClock``), in the future;
- a listener that hears nothing yet (a new answer) or whose audio already ran out: when it
  began to wait, in the past, so it goes first, the longest-waiting first.

Steps are not pre-empted: a step is one vocoder window or one chunk, so a step that arrives
urgent waits for at most the one running. Ties (and equal deadlines) keep arrival order.

Why our own: ``concurrent.futures`` and asyncio have no priority executor. This one keeps a
single ``ThreadPoolExecutor`` worker (its thread, its shutdown and its exit at interpreter end)
and puts a heap in front of it: each submission adds one entry and one task, and each task runs
whichever entry is earliest when the thread gets to it.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any


@dataclass(order=True)
class _Entry:
    deadline: float
    order: int
    future: Future[Any] = field(compare=False)
    call: Callable[[], Any] = field(compare=False)


class DeadlineExecutor:
    """One worker thread; ``submit(deadline, fn, *args)`` runs earliest deadline first."""

    def __init__(self, thread_name_prefix: str = "synthesis") -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=thread_name_prefix)
        self._heap: list[_Entry] = []
        self._lock = threading.Lock()
        self._order = itertools.count()

    def submit[T](self, deadline: float, fn: Callable[..., T], *args: Any) -> Future[T]:
        future: Future[T] = Future()
        with self._lock:
            heapq.heappush(
                self._heap, _Entry(deadline, next(self._order), future, lambda: fn(*args))
            )
        self._executor.submit(self._run_earliest)
        return future

    def waiting(self) -> int:
        """Steps queued and not started."""
        with self._lock:
            return sum(1 for entry in self._heap if not entry.future.cancelled())

    def shutdown(self, *, wait: bool = False, cancel_futures: bool = True) -> None:
        if cancel_futures:
            with self._lock:
                for entry in self._heap:
                    entry.future.cancel()
        self._executor.shutdown(wait=wait, cancel_futures=cancel_futures)

    def _run_earliest(self) -> None:
        with self._lock:
            entry = heapq.heappop(self._heap)
        if not entry.future.set_running_or_notify_cancel():
            return  # cancelled while it waited (its request was cancelled)
        try:
            result = entry.call()
        except BaseException as error:
            entry.future.set_exception(error)
        else:
            entry.future.set_result(result)
