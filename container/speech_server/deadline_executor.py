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

A request's steps follow one another as a ``StepChain``: each step, as it ends on the thread,
queues the request's next one with its new deadline before the thread picks again. Sent back
through the event loop instead, the next step reached the queue a moment after the thread had
already taken another session's: the local load run (4 clients) showed a new answer's first
audio, already made, wait 0.3-1.1 s behind another session's later chunk due seconds later.

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


class StepChain[T]:
    """One request's steps on a ``DeadlineExecutor``, each queued by the one before.

    ``step`` makes the next result (None: the request is done); ``deadline`` says when the next
    step is due, asked as it is queued (after ``step`` has added its audio to the listener's
    clock). Each result goes to ``deliver`` (an exception ends the chain), at most ``room``
    of them not yet ``taken`` by the consumer: past that the chain waits, and ``taken`` queues
    its next step. ``close`` stops it: a step still queued never runs, and one already running
    delivers nothing. ``deliver`` and ``step`` run on the executor's thread."""

    def __init__(
        self,
        executor: DeadlineExecutor,
        step: Callable[[], T | None],
        deadline: Callable[[], float],
        deliver: Callable[[T | BaseException | None], None],
        room: int = 1,
    ) -> None:
        self._executor = executor
        self._step = step
        self._deadline = deadline
        self._deliver = deliver
        self._room = max(1, room)
        self._lock = threading.Lock()
        self._untaken = 0
        self._waiting_for_room = False
        self._closed = False
        self._queued: Future[None] | None = None

    def start(self) -> None:
        with self._lock:
            self._queue_next()

    def taken(self) -> None:
        """The consumer took a delivered result: room for one more."""
        with self._lock:
            self._untaken -= 1
            if self._waiting_for_room and not self._closed:
                self._waiting_for_room = False
                self._queue_next()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._queued is not None:
                self._queued.cancel()

    def _queue_next(self) -> None:  # with the lock held
        self._queued = self._executor.submit(self._deadline(), self._run)

    def _run(self) -> None:
        try:
            result: T | BaseException | None = self._step()
        except Exception as error:  # the consumer reports it; the chain ends
            result = error
        with self._lock:
            if self._closed:
                return
            self._untaken += 1
            self._deliver(result)
            if result is None or isinstance(result, BaseException):
                return
            if self._untaken >= self._room:
                self._waiting_for_room = True
            else:
                self._queue_next()
