"""What AWS does that the happy path never shows: duplicate deliveries, Lambda's retries, a
worker failing at each stage, a turn cancelled while it is recorded, state reads failing, and a
custom domain in front of the API. Real handlers over moto's DynamoDB, Lambda and @connections
APIs and the real speech server; the failures are injected at the boto3 client's boundary."""

# ruff: noqa: F811  (the ``adapters`` fixture of test_handlers is imported, then requested)

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
import time

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from interleaving import Interleaving
from test_handlers import (  # noqa: F401  (adapters is a fixture)
    CONNECTION,
    FakeLambdaContext,
    accepted_job,
    adapters,
    posted,
    sample,
)

from functions.adapters.replay_llm import ReplayBedrockClient
from functions.adapters.turn_ledger import TurnLedger
from functions.handlers.connect import connect
from functions.handlers.messages import handle_message
from functions.worker.policy import WorkerPolicy
from voicewire.error_codes import ErrorCode


def run_worker(adapters, job: dict, request_id: str = "request-1", remaining_ms: int = 120_000):
    from functions.handlers import worker
    from functions.wiring import use_adapters

    context = FakeLambdaContext()
    context.aws_request_id = request_id
    context.get_remaining_time_in_millis = lambda: remaining_ms
    previous = use_adapters(adapters)
    try:
        return worker.handler(job, context)
    finally:
        use_adapters(previous)


def kinds(adapters) -> list[str]:
    return [frame["type"] for frame in posted(adapters)]


def client_error(code: str, status: int, operation: str) -> ClientError:
    error = {
        "Error": {"Code": code, "Message": code},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return ClientError(error, operation)


def assert_ended_once(adapters, job: dict, code: str) -> None:
    """One turn_start, then the error, then the turn_end as the last frame; the record failed."""
    frames = posted(adapters)
    assert kinds(adapters).count("turn_start") == 1
    errors = [frame for frame in frames if frame["type"] == "error"]
    assert [error["code"] for error in errors] == [code]
    assert errors[0]["turn_id"] == job["turn_id"]
    assert frames[-1]["type"] == "turn_end" and frames[-1]["status"] == "failed"
    turn = adapters.turns.get(CONNECTION, job["turn_id"])
    assert turn.status == "failed" and turn.error_code == code
    assert adapters.connections.get(CONNECTION).active_turn_id is None


# --- the message route ---------------------------------------------------------------------------


def test_the_callback_url_is_the_apis_own_behind_a_custom_domain(adapters):
    connect(sample("connect"), adapters)
    event = sample("ask_bidi")
    event["requestContext"]["domainName"] = "voice.example.com"  # a custom domain name
    handle_message(event, adapters)
    job = json.loads(adapters.lambda_client.calls[-1]["Payload"])
    assert job["callback_url"] == "https://abc123defg.execute-api.us-east-1.amazonaws.com/prod"


def test_a_worker_that_cannot_be_invoked_fails_its_turn_and_the_connection_stays(adapters):
    connect(sample("connect"), adapters)
    settings = adapters.settings
    adapters.settings = settings.changed(worker_function="no-such-function")
    handle_message(sample("ask_bidi"), adapters)
    assert kinds(adapters) == ["turn_start", "error", "turn_end"]
    error, end = posted(adapters)[1:]
    assert error["code"] == "worker_unavailable" and "ResourceNotFound" in error["message"]
    assert end["status"] == "failed"
    turn = adapters.turns.of_connection(CONNECTION)[0]
    assert turn.status == "failed" and turn.error_code == "worker_unavailable"
    assert adapters.connections.get(CONNECTION).active_turn_id is None
    adapters.settings = settings  # the function is back: the next ask runs
    handle_message(sample("ask_bidi", turn_id="again"), adapters)
    assert adapters.turns.status(CONNECTION, "again") == "running"


def test_a_cancel_handled_while_a_turn_is_recorded_keeps_it_cancelled(adapters):
    """API Gateway handles a connection's messages concurrently: the cancel can land between
    the route's writes. The turn must stay cancelled, and no worker may run it."""
    connect(sample("connect"), adapters)
    table = adapters.session_items
    plain = table.client

    def cancel_now():
        handle_message(sample("cancel"), dataclasses.replace(adapters, dynamodb=plain))

    table.client = Interleaving(plain, "turn_counter", then=cancel_now)
    handle_message(sample("ask_bidi", turn_id="t-race"), adapters)
    assert table.client.fired == 1
    assert adapters.lambda_client.calls == []  # no worker
    assert adapters.turns.status(CONNECTION, "t-race") == "cancelled"
    assert kinds(adapters) == ["turn_start", "turn_end"]
    assert posted(adapters)[-1]["status"] == "cancelled"


# --- the worker: duplicates and retries ----------------------------------------------------------


def test_a_duplicate_delivery_is_dropped_while_the_turn_runs(adapters):
    connect(sample("connect"), adapters)
    job = accepted_job(adapters, "speak")
    results: dict[str, dict] = {}
    workers = [
        threading.Thread(
            target=lambda rid=rid: results.update({rid: run_worker(adapters, job, rid)})
        )
        for rid in ("delivery-1", "delivery-2")
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    assert sorted(result["status"] for result in results.values()) == ["complete", "dropped"]
    assert kinds(adapters).count("turn_start") == 1 and kinds(adapters)[-1] == "turn_end"
    assert adapters.turns.status(CONNECTION, job["turn_id"]) == "complete"


def _forbid_audio(adapters):
    """@connections refuses audio frames (as PayloadTooLarge would), control frames pass."""
    real = adapters.posts._client.post_to_connection

    def post(**kwargs):
        if kwargs["Data"][:1] == b"\xa1":
            raise client_error("PayloadTooLargeException", 413, "PostToConnection")
        return real(**kwargs)

    adapters.posts._client.post_to_connection = post
    return "delivery_failed"


def _bedrock_unreachable(adapters):
    from conftest import free_port

    client = boto3.client(
        "bedrock-runtime",
        endpoint_url=f"http://127.0.0.1:{free_port()}",
        config=Config(retries={"total_max_attempts": 1}, connect_timeout=1),
    )
    adapters.llm_client = lambda: client
    return "llm_failed"


def _empty_model_id(adapters):
    # The settings refuse an empty model id (tests/unit/test_settings.py): a copy that skips their
    # validation stands for a parameter the SDK refuses before any request.
    adapters.settings = adapters.settings.model_copy(update={"bedrock_model_id": ""})
    client = boto3.client("bedrock-runtime")  # validates its parameters before any request
    adapters.llm_client = lambda: client
    return "llm_failed"


def _history_unreadable(adapters):
    connections = adapters.connections
    read = connections.get

    def fail_once(*_args, **_kwargs):
        connections.get = read
        raise client_error("ProvisionedThroughputExceededException", 400, "GetItem")

    connections.get = fail_once
    return "internal_error"


def _session_not_returned(adapters):
    async def fail(*_args, **_kwargs):
        raise RuntimeError("the kept session's bookkeeping broke")

    adapters.speech_sessions.release = fail
    return "internal_error"


@pytest.mark.parametrize(
    "failure",
    [
        _forbid_audio,
        _bedrock_unreachable,
        _empty_model_id,
        _history_unreadable,
        _session_not_returned,
    ],
    ids=lambda failure: failure.__name__.strip("_"),
)
def test_a_worker_failing_at_each_stage_ends_its_turn_once(adapters, failure, capsys):
    connect(sample("connect"), adapters)
    job = accepted_job(adapters, "ask_bidi", prompt="Hello, who are you?")
    code = failure(adapters)
    llm_calls = len(adapters.replay.requests)
    assert run_worker(adapters, job) == {"status": "failed"}  # returned: nothing to retry
    assert_ended_once(adapters, job, code)
    emf = capsys.readouterr().out
    assert '"Turns_failed"' in emf
    # Lambda's retry (same request id) or a late duplicate: dropped, nothing posted or asked.
    posts = len(adapters.posts.calls)
    for request_id in ("request-1", "request-2"):
        assert run_worker(adapters, job, request_id) == {"status": "dropped"}
    assert len(adapters.posts.calls) == posts
    assert len(adapters.replay.requests) <= llm_calls + 1  # the first run's, at most


def test_a_session_the_pool_cannot_take_back_is_closed_not_left_open(adapters):
    """Left open, it would hold its share of the engine until the server closed it idle (60 s:
    the next test's ``speech_server`` waited that long for it, 2026-12-07)."""
    handed_back = []

    async def fail(session, reusable):
        handed_back.append(session)
        raise RuntimeError("the kept session's bookkeeping broke")

    adapters.speech_sessions.release = fail
    connect(sample("connect"), adapters)
    job = accepted_job(adapters, "ask_bidi", prompt="Hello, who are you?")
    assert run_worker(adapters, job) == {"status": "failed"}
    assert_ended_once(adapters, job, "internal_error")
    [session] = handed_back
    assert not session.is_open


def test_a_turn_reaching_the_time_limit_ends_before_lambda_kills_it(adapters):
    connect(sample("connect"), adapters)
    adapters.llm_client = lambda: ReplayBedrockClient(pace=3.0)  # ~14 s of answer
    job = accepted_job(adapters, "ask_bidi", prompt="Tell me a story")
    started = time.monotonic()
    assert run_worker(adapters, job, remaining_ms=6_000) == {"status": "failed"}
    assert time.monotonic() - started < 6  # before Lambda's timeout
    assert_ended_once(adapters, job, "turn_timed_out")


def test_a_retry_after_the_worker_died_ends_the_turn_unspoken(adapters):
    """The worker was killed (out of memory, a timeout): its claim stopped being renewed.
    Lambda's retry must not speak the turn again, only end it."""
    connect(sample("connect"), adapters)
    job = accepted_job(adapters, "ask_bidi")
    adapters.turns.claim(CONNECTION, job["turn_id"], "dead", 30, now=time.time() - 90)
    assert run_worker(adapters, job, "retry") == {"status": "failed"}
    assert kinds(adapters) == ["error", "turn_end"]  # no second turn_start
    assert posted(adapters)[0]["code"] == "internal_error"
    assert adapters.replay.requests == []  # the model was not asked again
    assert adapters.turns.status(CONNECTION, job["turn_id"]) == "failed"


def test_a_job_that_reaches_its_worker_too_late_is_not_spoken(adapters):
    connect(sample("connect"), adapters)
    job = accepted_job(adapters, "speak")
    job["accepted_at"] -= 120  # waited in Lambda's queue (throttled) for two minutes
    assert run_worker(adapters, job) == {"status": "failed"}
    assert_ended_once(adapters, job, "turn_expired")
    assert adapters.posts.calls and all(call["Data"][:1] == b"{" for call in adapters.posts.calls)


# --- the cancel watcher ------------------------------------------------------------------------


class FlakyReads:
    """The real turn ledger, whose status reads fail ``failures`` times (throttling), or are
    slow."""

    def __init__(self, turns: TurnLedger, failures: int = 0, delay: float = 0.0):
        self.turns, self.failures, self.delay, self.reads = turns, failures, delay, 0
        self.answered_stale = threading.Event()  # a read has its status and is slow to return
        self.failed_all = threading.Event()  # every failure asked for has happened

    def __getattr__(self, name):
        return getattr(self.turns, name)

    def status(self, connection_id, turn_id):
        self.reads += 1
        if self.failures:
            self.failures -= 1
            if not self.failures:
                self.failed_all.set()
            raise client_error("ThrottlingException", 400, "GetItem")
        status = self.turns.status(connection_id, turn_id)
        if self.delay:
            self.answered_stale.set()
        time.sleep(self.delay)  # the answer is slow to come back: it may be stale on arrival
        return status


FAST_POLICY = WorkerPolicy(
    poll_seconds=0.02, poll_backoff_max_seconds=0.1, poll_failure_limit_seconds=0.6
)


def _watch(adapters, turns, job, during=None) -> tuple:
    from functions.worker.guards import TurnStop, watch_turn
    from functions.worker.job import WorkerJob

    async def watch():
        stop = TurnStop(asyncio.Event())
        watching = asyncio.create_task(
            watch_turn(turns, WorkerJob.model_validate(job), "request-1", stop, FAST_POLICY)
        )
        if during is not None:
            await during()
        async with asyncio.timeout(10):
            await stop.event.wait()
        await watching
        return stop

    return asyncio.run(watch())


def test_the_watcher_survives_failed_reads_and_still_sees_the_cancel(adapters):
    connect(sample("connect"), adapters)
    job = accepted_job(adapters, "ask_bidi")
    flaky = FlakyReads(adapters.turns, failures=4)

    async def cancel_after_the_failures():
        assert await asyncio.to_thread(flaky.failed_all.wait, 10)
        adapters.turns.cancel(CONNECTION, job["turn_id"])

    stop = _watch(adapters, flaky, job, cancel_after_the_failures)
    assert stop.failure is None  # a cancel, not a failure
    assert flaky.reads > 4


def test_the_watcher_stops_the_turn_when_state_stays_unreadable(adapters):
    connect(sample("connect"), adapters)
    job = accepted_job(adapters, "ask_bidi")
    stop = _watch(adapters, FlakyReads(adapters.turns, failures=10_000), job)
    assert stop.failure is not None and stop.failure.code == ErrorCode.STATE_UNAVAILABLE


def test_a_cancel_during_a_slow_poll_is_seen_at_the_next_one(adapters):
    connect(sample("connect"), adapters)
    job = accepted_job(adapters, "ask_bidi")
    slow = FlakyReads(adapters.turns, delay=0.4)

    async def cancel_mid_poll():
        # The first read has its answer ("running") and is still on its way back.
        assert await asyncio.to_thread(slow.answered_stale.wait, 10)
        adapters.turns.cancel(CONNECTION, job["turn_id"])

    stop = _watch(adapters, slow, job, cancel_mid_poll)
    assert stop.failure is None and slow.reads == 2  # the read in flight, then the next


def test_text_deltas_is_checked_and_handed_to_the_worker(adapters):
    connect(sample("connect"), adapters)
    handle_message(sample("ask_bidi", text_deltas="every-token"), adapters)
    (error,) = posted(adapters)
    assert error["code"] == "invalid_field" and "text_deltas" in error["message"]
    assert adapters.lambda_client.calls == []
    job = accepted_job(adapters, "ask_bidi", text_deltas="sentence")
    assert job["text_deltas"] == "sentence"


def test_a_turn_whose_record_cannot_be_written_is_still_told_and_not_retried(adapters, capsys):
    """DynamoDB fails as the worker records the end: the client still gets its turn_end, the
    failure is counted, and the invocation returns (a retry would end the turn twice)."""
    connect(sample("connect"), adapters)
    job = accepted_job(adapters, "speak")

    def unavailable(*_args, **_kwargs):
        raise client_error("InternalServerError", 500, "UpdateItem")

    adapters.turns.finish = unavailable
    assert run_worker(adapters, job) == {"status": "complete"}
    frames = posted(adapters)
    assert [f["type"] for f in frames].count("turn_start") == 1
    assert frames[-1]["type"] == "turn_end" and frames[-1]["status"] == "complete"
    assert '"TurnRecordsFailed"' in capsys.readouterr().out
