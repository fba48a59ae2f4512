"""The worker: one invocation per turn, holding the LLM stream and the speech session.

Invoked asynchronously by the message route. It first *claims* its turn (a conditional write:
Lambda may deliver the job twice or retry it, and a turn is never spoken twice; see
``functions.worker_policy``), asks for its speech session at once (a kept one or a new one,
``functions.adapters.speech_sessions``), runs the turn (``functions.turn``), watches the turn's
record for a cancel (the cancel route, a barge-in, a disconnect write it) while renewing its
claim, records how the turn ended, keeps the conversation history, and publishes the turn's
timings as CloudWatch metrics (EMF).

Whatever fails, the turn ends: the client gets ``error`` + ``turn_end``, the record its status,
CloudWatch its metric, and the invocation returns normally so Lambda has nothing to retry. It
runs on the execution environment's event loop, which outlives the invocation, so that a session
kept for the next turn stays usable.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from functions.adapters.llm import converse_request
from functions.adapters.relay import ConnectionGone, Relay, RelayError
from functions.adapters.session_store import ClaimVerdict, SessionStore
from functions.adapters.speech_sessions import KeptSpeechSession, ReadySession
from functions.environment_loop import run_in_environment
from functions.observability import logger, metrics
from functions.settings import Settings
from functions.turn import TurnOutcome, TurnRunner, TurnSpec
from functions.wiring import Adapters, current_adapters
from functions.worker_job import WorkerJob
from functions.worker_policy import WORKER_POLICY, WorkerPolicy
from voicewire.client_protocol import ClientError, Timings, TurnEnd, TurnStart
from voicewire.error_codes import ErrorCode
from voicewire.speech_link import SpeechSession, sagemaker_client

# While Lambda initializes the environment, not on the first turn's critical path: importing
# the SageMaker SDK and awscrt takes ~0.7 s, building boto3's session ~0.1 s.
sagemaker_client.shared_boto3_session()


@dataclass
class Invocation:
    """What the worker knows of its own invocation."""

    request_id: str  # the claimant's name in the turn's record
    deadline: float  # time.monotonic() at which Lambda would stop the invocation


@dataclass
class TurnStop:
    """Why the turn must stop: a cancel (no failure) or a failure the worker detected."""

    event: asyncio.Event
    failure: ClientError | None = None

    def fail(self, code: ErrorCode, message: str) -> None:
        if not self.event.is_set():
            self.failure = ClientError(code=code, message=message)
            self.event.set()


async def watch_turn(
    store: SessionStore,
    job: WorkerJob,
    claimant: str,
    stop: TurnStop,
    policy: WorkerPolicy = WORKER_POLICY,
) -> None:
    """Until the turn stops: poll its status (strongly consistent) and renew the claim.

    A failed read (throttling, 5xx, network, a credentials refresh) does not end the watch: it
    backs off and tries again; only when reads have failed for ``poll_failure_limit_seconds``
    does it stop the turn, which could otherwise no longer be cancelled."""
    failing_since: float | None = None
    backoff = policy.poll_seconds
    renew_at = time.monotonic() + policy.heartbeat_seconds
    while not stop.event.is_set():
        try:
            if time.monotonic() >= renew_at:
                held = await asyncio.to_thread(
                    store.renew_claim, job.connection_id, job.turn_id, claimant,
                    policy.lease_seconds,
                )  # fmt: skip
                renew_at = time.monotonic() + policy.heartbeat_seconds
                status = "running" if held else "not-held"
            else:
                status = await asyncio.to_thread(store.turn_status, job.connection_id, job.turn_id)
        except Exception as error:
            now = time.monotonic()
            failing_since = failing_since or now
            logger.warning("turn watch failed; retrying", error=repr(error), backoff_s=backoff)
            if now - failing_since >= policy.poll_failure_limit_seconds:
                stop.fail(
                    ErrorCode.STATE_UNAVAILABLE,
                    "the session state could not be read, so a cancel could not be seen",
                )
                return
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, policy.poll_backoff_max_seconds)
            continue
        failing_since, backoff = None, policy.poll_seconds
        if status != "running":
            stop.event.set()
            return
        await asyncio.sleep(policy.poll_seconds)


async def stop_at_deadline(
    invocation: Invocation, stop: TurnStop, policy: WorkerPolicy = WORKER_POLICY
) -> None:
    """End the turn before Lambda's timeout would kill the invocation mid-sentence."""
    await asyncio.sleep(
        max(0.0, invocation.deadline - policy.stop_margin_seconds - time.monotonic())
    )
    stop.fail(ErrorCode.TURN_TIMED_OUT, "the turn reached the worker's time limit")


async def run_job(
    job: WorkerJob, adapters: Adapters, invocation: Invocation, policy: WorkerPolicy = WORKER_POLICY
) -> str:
    """Claim the turn, then run it, or end it unspoken, or drop a job that is not this
    worker's to run. Returns the turn's final status, or ``dropped``."""
    store = adapters.store
    head = HeadStart.begin(job, adapters)
    try:
        claim = await asyncio.to_thread(
            store.claim_turn, job.connection_id, job.turn_id, invocation.request_id,
            policy.lease_seconds,
        )  # fmt: skip
    except Exception:  # Lambda retries the job; nothing of it was used
        await head.discard(adapters.speech_sessions)
        raise
    if claim.verdict != ClaimVerdict.CLAIMED or claim.status != "running":
        await head.discard(adapters.speech_sessions)
    match claim.verdict:
        case ClaimVerdict.ENDED if (
            claim.claimed_by == invocation.request_id and not claim.end_recorded
        ):
            # Lambda's retry of this invocation, whose attempt died mid-turn; the turn was then
            # cancelled (a cancel, a barge-in, a disconnect), which only writes the record:
            # nobody told the client. Its turn_end, once (no second turn_start, nothing spoken).
            return await end_told_late(job, adapters, invocation.request_id, claim.status)
        case ClaimVerdict.HELD | ClaimVerdict.ENDED | ClaimVerdict.UNKNOWN:
            # A second delivery of a job, or a retry of one that ended: never speak twice.
            logger.warning(
                "job dropped", verdict=str(claim.verdict), turn_status=claim.status,
                claimed_by=claim.claimed_by,
            )  # fmt: skip
            _publish_count("WorkerJobsDropped")
            return "dropped"
        case ClaimVerdict.ABANDONED:
            # Its worker died (a crash, a timeout) and this is Lambda's retry: end it, unspoken.
            return await end_unspoken(
                job, adapters, ErrorCode.INTERNAL_ERROR,
                "the turn's worker stopped before the turn ended", announce=False,
            )  # fmt: skip
        case ClaimVerdict.CLAIMED if claim.status != "running":
            # Cancelled (a cancel, a barge-in, a disconnect) before any worker took it.
            status = claim.status or "cancelled"
            await _tell(_relay_for(job, adapters), [_turn_start(job), _turn_end(job, status)])
            _publish_metrics(job, status, _elapsed(job), None)
            return status
    if time.time() - job.accepted_at > policy.start_deadline_seconds:
        await head.discard(adapters.speech_sessions)
        return await end_unspoken(
            job, adapters, ErrorCode.TURN_EXPIRED,
            f"the turn's worker started more than {policy.start_deadline_seconds:g} s after "
            "the turn was accepted", announce=True,
        )  # fmt: skip
    try:
        return await run_claimed(job, adapters, invocation, policy, head)
    except Exception as failure:  # whatever escaped: the turn still ends, and says why
        started = not isinstance(failure, _NotStarted)
        logger.exception("the worker failed", started=started)
        return await end_unspoken(
            job, adapters, ErrorCode.INTERNAL_ERROR,
            "the turn failed" if started else "the turn could not start", announce=not started,
        )  # fmt: skip


class _NotStarted(Exception):
    """The turn failed before its first frame was posted."""


@dataclass
class HeadStart:
    """What a turn needs that can start while its claim is being written, so the claim's
    round trip is not added to the first audio: the speech session (its set-up, or the check of
    a kept one, then runs while the turn starts and the LLM writes its first tokens) and, for
    an ask, the conversation history. A job that is not run gives the unused session back."""

    acquiring: asyncio.Task[ReadySession]
    reading: asyncio.Task[Any] | None  # the connection record, for its history

    @classmethod
    def begin(cls, job: WorkerJob, adapters: Adapters) -> HeadStart:
        store = adapters.store
        reading = None
        if job.mode != "speak":
            reading = asyncio.create_task(
                asyncio.to_thread(store.get_connection, job.connection_id)
            )
        return cls(asyncio.create_task(adapters.speech_sessions.acquire()), reading)

    async def discard(self, sessions: KeptSpeechSession) -> None:
        tasks = [self.acquiring] + ([self.reading] if self.reading is not None else [])
        await asyncio.gather(*tasks, return_exceptions=True)
        if self.acquiring.cancelled() or self.acquiring.exception() is not None:
            return
        try:  # best effort: the job is not run either way
            await sessions.release(self.acquiring.result().session, reusable=True)
        except Exception as error:
            logger.warning("an unused speech session could not be given back", error=repr(error))


def seed_baseline(settings: Settings) -> dict[str, Any]:
    """The seed's pipeline for ``voicewire bench``'s baseline modes; nothing otherwise."""
    if settings.baseline != "seed":
        return {}
    from voicewire.seed_chunker import SeedSentenceChunker

    return {"chunker_factory": SeedSentenceChunker, "fast_start": False}


async def run_claimed(
    job: WorkerJob,
    adapters: Adapters,
    invocation: Invocation,
    policy: WorkerPolicy,
    head: HeadStart,
) -> str:
    sessions = adapters.speech_sessions
    acquiring = head.acquiring
    speech = asyncio.create_task(_session_of(acquiring), name="speech-session-ready")
    store = adapters.store
    relay = _relay_for(job, adapters)
    stop = TurnStop(asyncio.Event())
    guards = [
        asyncio.create_task(watch_turn(store, job, invocation.request_id, stop, policy)),
        asyncio.create_task(stop_at_deadline(invocation, stop, policy)),
    ]
    outcome: TurnOutcome | None = None
    runner: TurnRunner | None = None
    try:
        try:
            llm_request = None
            if head.reading is not None:
                connection = await head.reading
                history = connection.history if connection else []
                settings = adapters.settings
                llm_request = converse_request(
                    settings.bedrock_model_id, history, job.prompt or "",
                    settings.system_prompt, settings.max_output_tokens,
                )  # fmt: skip
            llm = adapters.llm_client() if llm_request else None
        except Exception as error:
            raise _NotStarted from error
        spec = TurnSpec(job.turn_id, job.turn, job.mode, job.accepted_at, job.voice, job.speed)
        runner = TurnRunner(
            spec, relay, speech, stop.event, llm=llm, llm_request=llm_request, text=job.text,
            stop_failure=lambda: stop.failure,
            speech_timeout=adapters.settings.speech_chunk_timeout_seconds,
            max_speech_seconds=adapters.settings.max_speech_seconds_per_turn,
            **seed_baseline(adapters.settings),
        )  # fmt: skip
        outcome = await runner.run(tell_end=False)
    finally:
        for guard in guards:
            guard.cancel()
        await asyncio.gather(*guards, return_exceptions=True)
        ready = await _hand_back(sessions, acquiring, speech, outcome, runner)
    counts = {
        "audio_bytes": relay.audio_bytes,
        "audio_frames": relay.audio_frames,
        "frames": relay.frames,
        "bytes_sent": relay.bytes_sent,
    }
    error_code = outcome.error.code.value if outcome.error is not None else None
    try:
        # Recorded before the client hears of it: a client may leave on its turn_end, and the
        # $disconnect must then find the turn ended, not running (it would cancel it).
        final: str = await asyncio.to_thread(
            store.finish_turn, job.connection_id, job.turn_id, outcome.status, outcome.timings,
            counts, outcome.stop_reason, invocation.request_id, error_code,
        )  # fmt: skip
    except Exception:
        # The client was told; only the record is missing. Retrying the invocation cannot
        # help (the turn would be ended twice), so say so loudly and go on.
        logger.exception("the turn's end could not be recorded", status=outcome.status)
        _publish_count("TurnRecordsFailed")
        final = outcome.status
    if final != outcome.status:  # cancelled while it ended: the record has the last word
        outcome.status = final  # type: ignore[assignment]
    await runner.tell_end(outcome)
    await relay.close()
    await _leave_behind(job, store, outcome, final)
    _publish_metrics(job, final, outcome.timings, ready)
    logger.info(
        "turn ended",
        status=final,
        error_code=error_code,
        timings=outcome.timings.model_dump(),
        speech_session=ready.origin if ready else None,
        speech_session_ready_ms=ready.ready_ms if ready else None,
        **counts,
    )
    return final


async def _leave_behind(
    job: WorkerJob, store: SessionStore, outcome: TurnOutcome, final: str
) -> None:
    """What a turn leaves for later: a connection known gone, the exchange in the history."""
    try:
        if outcome.gone:
            await asyncio.to_thread(store.mark_gone, job.connection_id)
        if job.mode != "speak" and final == "complete" and outcome.answer.strip():
            await asyncio.to_thread(
                store.append_history, job.connection_id, job.prompt or "", outcome.answer
            )
    except Exception:  # the turn itself is over and told; the next one has less context
        logger.exception("the turn's history could not be kept")
        _publish_count("HistoryWritesFailed")


async def end_unspoken(
    job: WorkerJob, adapters: Adapters, code: ErrorCode, message: str, announce: bool
) -> str:
    """End a turn that will not be spoken: record it ``failed``, tell the client (``turn_start``
    first if nobody did yet), publish the metric. Raises if the record cannot be written, so
    that Lambda's retry ends the turn later."""
    store = adapters.store
    record_error: Exception | None = None
    try:
        failed = await asyncio.to_thread(store.fail_turn, job.connection_id, job.turn_id, code)
    except Exception as error:
        record_error, failed = error, True
    if not failed:  # it ended meanwhile (a cancel): whoever ended it told the client
        logger.info("turn already ended", error_code=str(code))
        return await asyncio.to_thread(store.turn_status, job.connection_id, job.turn_id) or ""
    status = "failed"
    frames: list[TurnStart | ClientError | TurnEnd] = [_turn_start(job)] if announce else []
    frames.append(ClientError(code=code, message=message, turn_id=job.turn_id))
    frames.append(_turn_end(job, status))
    await _tell(_relay_for(job, adapters), frames)
    _publish_metrics(job, status, _elapsed(job), None)
    logger.warning("turn ended unspoken", status=status, error_code=str(code), reason=message)
    if record_error is not None:
        raise record_error
    return status


async def end_told_late(
    job: WorkerJob, adapters: Adapters, claimant: str, status: str | None
) -> str:
    """Record the end of a turn whose worker died and that was cancelled meanwhile (so a further
    retry drops the job), then post its ``turn_end``: the client may be gone or have moved on to
    a newer turn, and a client ignores a turn_end for a turn it already saw end."""
    final = await asyncio.to_thread(
        adapters.store.finish_turn, job.connection_id, job.turn_id,
        status or "cancelled", _elapsed(job), {}, None, claimant,
    )  # fmt: skip  # type: ignore[arg-type]
    await _tell(_relay_for(job, adapters), [_turn_end(job, final)])
    _publish_metrics(job, final, _elapsed(job), None)
    logger.warning("a dead worker's cancelled turn told its end", status=final)
    return final


def _relay_for(job: WorkerJob, adapters: Adapters) -> Relay:
    return Relay(
        adapters.management_client(job.callback_url), job.connection_id, job.turn, job.audio,
        text_flush="sentence" if job.text_deltas == "sentence" else "interval",
    )  # fmt: skip


async def _tell(relay: Relay, frames: list[Any]) -> None:
    """Post control frames, best effort: a client that left or cannot be reached is logged."""
    try:
        for frame in frames:
            await relay.control(frame)
    except (ConnectionGone, RelayError) as error:
        logger.info("could not tell the client", reason=repr(error))
    finally:
        await relay.close()


def _elapsed(job: WorkerJob) -> Timings:
    return Timings(total_ms=round((time.time() - job.accepted_at) * 1000, 1))


def _turn_start(job: WorkerJob) -> TurnStart:
    return TurnStart(turn_id=job.turn_id, turn=job.turn, mode=job.mode)


def _turn_end(job: WorkerJob, status: str) -> TurnEnd:
    return TurnEnd(
        turn_id=job.turn_id, status=status, timings=_elapsed(job), audio_bytes=0, audio_frames=0
    )  # type: ignore[arg-type]


async def _session_of(acquiring: asyncio.Task[ReadySession]) -> SpeechSession:
    return (await acquiring).session


async def _hand_back(
    sessions: KeptSpeechSession,
    acquiring: asyncio.Task[ReadySession],
    speech: asyncio.Task[SpeechSession],
    outcome: TurnOutcome | None,
    runner: TurnRunner | None,
) -> ReadySession | None:
    """Keep the session for the next turn if this one left it clean, else close it. Returns how
    the session was obtained, if it was.

    An opening still under way when the turn ends (a turn cancelled early) is waited for, not
    called off: the client already has its turn_end, the wait is bounded by the open timeout,
    the session is clean and the next turn can use it; and cancelling the CRT client mid-connect
    makes awscrt resolve a cancelled future from its own thread."""
    await asyncio.gather(acquiring, speech, return_exceptions=True)
    if acquiring.cancelled() or acquiring.exception() is not None:
        return None
    ready = acquiring.result()
    completed = outcome is not None and outcome.status == "complete"
    unused = runner is not None and not runner.used_speech
    await sessions.release(ready.session, reusable=completed or unused)
    return ready


def _publish_metrics(
    job: WorkerJob, status: str, timings: Timings, ready: ReadySession | None
) -> None:
    metrics.add_metric(name=f"Turns_{status}", unit=MetricUnit.Count, value=1)
    for name, value in (
        ("TimeToFirstAudio", timings.first_audio_ms),
        ("TimeToFirstText", timings.first_text_ms),
        ("TurnTotal", timings.total_ms),
    ):
        if value is not None:
            metrics.add_metric(name=name, unit=MetricUnit.Milliseconds, value=value)
    if ready is not None:
        metrics.add_metric(
            name="SpeechSessionReady", unit=MetricUnit.Milliseconds, value=ready.ready_ms
        )
        metrics.add_metric(name=f"SpeechSessions_{ready.origin}", unit=MetricUnit.Count, value=1)


def _publish_count(name: str) -> None:
    metrics.add_metric(name=name, unit=MetricUnit.Count, value=1)


@metrics.log_metrics
@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    job = WorkerJob.model_validate(event)
    logger.append_keys(connection_id=job.connection_id, turn_id=job.turn_id)
    # Dimensions are per invocation: a warm environment must not carry the last turn's mode.
    metrics.clear_metrics()
    metrics.add_dimension(name="mode", value=job.mode)
    invocation = Invocation(
        request_id=context.aws_request_id,
        deadline=time.monotonic() + context.get_remaining_time_in_millis() / 1000,
    )
    # Not asyncio.run: the environment's loop outlives the invocation, and so can its session.
    status = run_in_environment(run_job(job, current_adapters(), invocation))
    return {"status": status}
