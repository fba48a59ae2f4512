"""The synthesis thread's queue: earliest deadline first, each step once, cancel honoured."""

from __future__ import annotations

import threading

import pytest

from speech_server.deadline_executor import DeadlineExecutor


@pytest.fixture
def executor():
    executor = DeadlineExecutor(thread_name_prefix="test-deadline")
    yield executor
    executor.shutdown(wait=True)


def blocked(executor: DeadlineExecutor) -> threading.Event:
    """The worker held on a gate, so that what is submitted next queues up."""
    gate, started = threading.Event(), threading.Event()

    def hold() -> None:
        started.set()
        gate.wait(5)

    executor.submit(0.0, hold)
    assert started.wait(5)
    return gate


def test_queued_steps_run_earliest_deadline_first_ties_in_arrival_order(executor):
    gate = blocked(executor)
    ran: list[str] = []
    futures = [
        executor.submit(deadline, ran.append, name)
        for deadline, name in [(30.0, "later"), (10.0, "first"), (20.0, "b"), (20.0, "c")]
    ]
    assert executor.waiting() == 4
    gate.set()
    for future in futures:
        future.result(5)
    assert ran == ["first", "b", "c", "later"]
    assert executor.waiting() == 0


def test_a_step_cancelled_while_it_waits_never_runs(executor):
    gate = blocked(executor)
    ran: list[str] = []
    cancelled = executor.submit(1.0, ran.append, "cancelled")
    kept = executor.submit(2.0, ran.append, "kept")
    assert cancelled.cancel()
    gate.set()
    kept.result(5)
    assert ran == ["kept"] and cancelled.cancelled()


def test_a_steps_error_reaches_its_caller_and_the_thread_goes_on(executor):
    def fails() -> None:
        raise ValueError("engine said no")

    with pytest.raises(ValueError, match="engine said no"):
        executor.submit(0.0, fails).result(5)
    assert executor.submit(0.0, lambda: 42).result(5) == 42


def test_shutdown_cancels_what_still_waits(executor):
    gate = blocked(executor)
    waiting = executor.submit(1.0, lambda: None)
    executor.shutdown(wait=False)
    gate.set()
    assert waiting.cancelled()
