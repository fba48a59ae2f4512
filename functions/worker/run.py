"""A worker job from claim to end: the Lambda host of one turn's run (``functions.lifecycle``).

The worker first *claims* its turn (a conditional write: Lambda may deliver the job twice or
retry it, and a turn is never spoken twice; see ``functions.worker.policy``) while it asks for
its speech session and reads the conversation history (the head start, so the claim's round
trip is not added to the first audio). Then the lifecycle's ``TurnRun`` speaks the turn under
the worker's guards (``functions.worker.guards``: a cancel seen in the record, the invocation's
deadline) and finishes it: the history kept as heard, the end recorded (with this worker's
claim: ``WorkerHost.record_end``), the client told, the metrics published
(``functions.worker.metrics``).

Whatever fails, the turn ends (``functions.worker.endings``): the client gets ``error`` +
``turn_end``, the record its status, CloudWatch its metric, and the job returns normally so that
Lambda has nothing to retry.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from functions.adapters.connections import ConnectionRecord, Connections
from functions.adapters.conversation_table import TableConversation
from functions.adapters.relay import Relay
from functions.adapters.speech_sessions import KeptSpeechSession, ReadySession, release_or_abort
from functions.adapters.turn_ledger import ClaimVerdict, TurnLedger
from functions.lifecycle.turn_run import TurnPlan, TurnRun, relay_counts
from functions.observability import logger
from functions.turn import TurnOutcome, TurnSpec
from functions.wiring import Adapters
from functions.worker.endings import (
    end_cancelled_before_start,
    end_told_late,
    end_unspoken,
    relay_for,
)
from functions.worker.guards import Invocation, TurnStop, stop_at_deadline, watch_turn
from functions.worker.job import WorkerJob
from functions.worker.metrics import publish_count, publish_turn_metrics
from functions.worker.policy import WORKER_POLICY, WorkerPolicy
from voicewire.client_protocol import EndedStatus
from voicewire.error_codes import ErrorCode


async def run_job(
    job: WorkerJob, adapters: Adapters, invocation: Invocation, policy: WorkerPolicy = WORKER_POLICY
) -> str:
    """Claim the turn, then run it, or end it unspoken, or drop a job that is not this
    worker's to run. Returns the turn's final status, or ``dropped``."""
    head = HeadStart.begin(job, adapters)
    try:
        claim = await asyncio.to_thread(
            adapters.turns.claim,
            job.connection_id,
            job.turn_id,
            invocation.request_id,
            policy.lease_seconds,
        )
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
                "job dropped",
                verdict=str(claim.verdict),
                turn_status=claim.status,
                claimed_by=claim.claimed_by,
            )
            publish_count("WorkerJobsDropped")
            return "dropped"
        case ClaimVerdict.ABANDONED:
            # Its worker died (a crash, a timeout) and this is Lambda's retry: end it, unspoken.
            return await end_unspoken(
                job,
                adapters,
                ErrorCode.INTERNAL_ERROR,
                "the turn's worker stopped before the turn ended",
                announce=False,
            )
        case ClaimVerdict.CLAIMED if claim.status != "running":
            return await end_cancelled_before_start(job, adapters, claim.status or "cancelled")
    if time.time() - job.accepted_at > policy.start_deadline_seconds:
        await head.discard(adapters.speech_sessions)
        return await end_unspoken(
            job,
            adapters,
            ErrorCode.TURN_EXPIRED,
            f"the turn's worker started more than {policy.start_deadline_seconds:g} s after "
            "the turn was accepted",
            announce=True,
        )
    try:
        return await run_claimed(job, adapters, invocation, policy, head)
    except Exception:  # whatever escaped the lifecycle (a bug): the turn still ends, and says so
        logger.exception("the worker failed")
        return await end_unspoken(
            job, adapters, ErrorCode.INTERNAL_ERROR, "the turn failed", announce=False
        )


@dataclass
class HeadStart:
    """What a turn needs that can start while its claim is being written, so the claim's
    round trip is not added to the first audio: the speech session (its set-up, or the check of
    a kept one, then runs while the turn starts and the LLM writes its first tokens) and, for
    an ask, the conversation history. A job that is not run gives the unused session back."""

    acquiring: asyncio.Task[ReadySession]
    reading: asyncio.Task[ConnectionRecord | None] | None  # the connection, for its history

    @classmethod
    def begin(cls, job: WorkerJob, adapters: Adapters) -> HeadStart:
        reading = None
        if job.mode != "speak":
            reading = asyncio.create_task(_history_after(job, adapters.turns, adapters.connections))
        return cls(asyncio.create_task(adapters.speech_sessions.acquire()), reading)

    async def discard(self, sessions: KeptSpeechSession) -> None:
        tasks = [self.acquiring] + ([self.reading] if self.reading is not None else [])
        await asyncio.gather(*tasks, return_exceptions=True)
        if self.acquiring.cancelled() or self.acquiring.exception() is not None:
            return
        try:  # best effort: the job is not run either way
            await release_or_abort(sessions, self.acquiring.result().session, reusable=True)
        except Exception as error:
            logger.warning("an unused speech session could not be given back", error=repr(error))


# How long a barge-in's turn waits for the turn it cancelled to keep its history (the old worker
# sees the cancel within its 100 ms poll, then writes): past it, the answer goes without.
REPLACED_HISTORY_WAIT_SECONDS = 1.5
REPLACED_HISTORY_POLL_SECONDS = 0.05


async def _history_after(
    job: WorkerJob, turns: TurnLedger, connections: Connections
) -> ConnectionRecord | None:
    """The connection record, read once the turn this one replaced has kept its history (its
    worker keeps it before it records the turn's end): the answer to a barge-in must know
    what the listener heard of the answer it cut. Bounded: a worker that died keeps nothing."""
    if job.replaces is not None:
        deadline = time.monotonic() + REPLACED_HISTORY_WAIT_SECONDS
        while time.monotonic() < deadline:
            turn = await asyncio.to_thread(turns.get, job.connection_id, job.replaces)
            if (
                turn is None
                or turn.end_recorded
                or turn.mode == "speak"  # a speak turn keeps no history
                or turn.claimed_by is None  # no worker took it: none will keep anything
            ):
                break
            await asyncio.sleep(REPLACED_HISTORY_POLL_SECONDS)
    return await asyncio.to_thread(connections.get, job.connection_id)


async def run_claimed(
    job: WorkerJob,
    adapters: Adapters,
    invocation: Invocation,
    policy: WorkerPolicy,
    head: HeadStart,
) -> str:
    """Run a claimed turn under its guards, then keep, record and tell how it ended
    (``functions.lifecycle.turn_run``)."""
    spec = TurnSpec(
        job.turn_id, job.turn, job.mode, job.accepted_at, job.voice, job.speed, job.word_timings
    )
    plan = TurnPlan(spec, prompt=(job.prompt or "") if job.mode != "speak" else None, text=job.text)
    run = TurnRun(plan, WorkerHost(job, adapters, invocation, head), relay_for(job, adapters))
    stop = TurnStop(asyncio.Event())
    guards = [
        asyncio.create_task(watch_turn(adapters.turns, job, invocation.request_id, stop, policy)),
        asyncio.create_task(stop_at_deadline(invocation, stop, policy)),
    ]
    try:
        await run.speak(head.acquiring, stop.event, lambda: stop.failure)
    finally:
        for guard in guards:
            guard.cancel()
        await asyncio.gather(*guards, return_exceptions=True)
    return await run.finish()


@dataclass
class WorkerHost:
    """The Lambda worker as the lifecycle's ``TurnHost``: state in DynamoDB (calls in threads),
    the end recorded with the worker's claim, metrics in CloudWatch."""

    job: WorkerJob
    adapters: Adapters
    invocation: Invocation
    head: HeadStart

    @property
    def state(self) -> TableConversation:
        return self.adapters.conversation(self.job.connection_id)

    async def offload[T](self, call: Callable[..., T], *args: Any) -> T:
        return await asyncio.to_thread(call, *args)

    async def history(self) -> list[dict[str, Any]]:
        """The history the head start read (after the turn this one replaced kept its own)."""
        connection = await self.head.reading if self.head.reading is not None else None
        return connection.history if connection else []

    async def record_end(self, outcome: TurnOutcome, relay: Relay) -> EndedStatus:
        """Recorded before the client hears of it: a client may leave on its turn_end, and the
        $disconnect must then find the turn ended, not running (it would cancel it)."""
        job = self.job
        error_code = outcome.error.code.value if outcome.error is not None else None
        try:
            return await asyncio.to_thread(
                self.adapters.turns.finish,
                job.connection_id,
                job.turn_id,
                status=outcome.status,
                timings=outcome.timings,
                counts=relay_counts(relay),
                stop_reason=outcome.stop_reason,
                claimant=self.invocation.request_id,
                error_code=error_code,
            )
        except Exception:
            # Only the record is missing. Retrying the invocation cannot help (the turn would be
            # ended twice), so say so loudly and go on.
            logger.exception("the turn's end could not be recorded", status=outcome.status)
            publish_count("TurnRecordsFailed")
            return outcome.status

    async def client_gone(self) -> None:
        await asyncio.to_thread(self.adapters.connections.mark_gone, self.job.connection_id)

    def count(self, metric: str) -> None:
        publish_count(metric)

    def ended(self, final: EndedStatus, outcome: TurnOutcome, ready: ReadySession | None) -> None:
        publish_turn_metrics(final, outcome.timings, ready)
