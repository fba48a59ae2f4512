"""The synthesis thread's queue: earliest deadline first, each step once, cancel honoured; a
request's steps chained, each queued by the one before as it ends."""

from __future__ import annotations

import threading

import pytest

from speech_server.deadline_executor import DeadlineExecutor, StepChain


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


def chain_of(
    executor: DeadlineExecutor, names: list[str], ran: list[str], room: int = 5
) -> tuple[StepChain[str], list[object], threading.Event]:
    """A chain whose steps log their names, then end (None), every step due at once."""
    left = iter(names)
    delivered: list[object] = []
    ended = threading.Event()

    def step() -> str | None:
        name = next(left, None)
        ran.append(name or "end")
        if name == "boom":
            raise ValueError("engine said no")
        return name

    def deliver(result: object) -> None:
        delivered.append(result)
        if result is None or isinstance(result, BaseException):
            ended.set()

    return StepChain(executor, step, lambda: 0.0, deliver, room=room), delivered, ended


def test_a_chains_next_step_is_queued_before_the_thread_picks_again(executor):
    """Another session's step, due later, waits for the whole chain: its next step does not
    go back through the caller (where it reached the queue after the thread had picked)."""
    gate = blocked(executor)
    ran: list[str] = []
    other = executor.submit(10.0, ran.append, "other session")
    chain, delivered, ended = chain_of(executor, ["window", "rest"], ran)
    chain.start()
    gate.set()
    other.result(5)
    assert ended.wait(5)
    assert ran == ["window", "rest", "end", "other session"]
    assert delivered == ["window", "rest", None]


def test_a_chain_waits_for_room_and_goes_on_when_its_result_is_taken(executor):
    ran: list[str] = []
    chain, delivered, ended = chain_of(executor, ["one", "two"], ran, room=1)
    chain.start()
    executor.submit(1.0, lambda: None).result(5)  # the thread has had its chance to go on
    assert delivered == ["one"] and ran == ["one"]
    chain.taken()
    executor.submit(1.0, lambda: None).result(5)
    assert delivered == ["one", "two"]
    chain.taken()
    assert ended.wait(5) and delivered == ["one", "two", None]


def test_a_closed_chain_runs_no_queued_step(executor):
    gate = blocked(executor)
    ran: list[str] = []
    chain, delivered, _ = chain_of(executor, ["never"], ran)
    chain.start()
    chain.close()
    gate.set()
    executor.submit(1.0, lambda: None).result(5)
    assert ran == [] and delivered == []


def test_a_steps_error_is_delivered_and_ends_the_chain(executor):
    ran: list[str] = []
    chain, delivered, ended = chain_of(executor, ["boom", "after"], ran)
    chain.start()
    assert ended.wait(5)
    executor.submit(1.0, lambda: None).result(5)
    assert ran == ["boom"]
    assert len(delivered) == 1 and isinstance(delivered[0], ValueError)
