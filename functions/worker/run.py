"""A worker job from claim to end: the orchestration around one turn (``functions.turn``).

The worker first *claims* its turn (a conditional write: Lambda may deliver the job twice or
retry it, and a turn is never spoken twice; see ``functions.worker.policy``) while it asks for
its speech session and reads the conversation history (the head start, so the claim's round
trip is not added to the first audio). Then it runs the turn with its guards
(``functions.worker.guards``: a cancel seen in the record, the invocation's deadline), records how
the turn ended, keeps the session for the next turn if the turn left it clean, keeps the
exchange in the history as the conversation's rules say (``functions.conversation``: as heard,
when it was cut), and publishes the turn's metrics (``functions.worker.metrics``).

Whatever fails, the turn ends (``functions.worker.endings``): the client gets ``error`` +
``turn_end``, the record its status, CloudWatch its metric, and the job returns normally so that
Lambda has nothing to retry.

Where the features land: the agent (its request, history and tools) is built in
``functions.turn.assembly`` (shared with the AgentCore front door);
what the turn says and streams is ``functions.turn``'s ``TurnRunner``.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from functions.adapters.connections import ConnectionRecord, Connections
from functions.adapters.conversation_table import TableConversation
from functions.adapters.relay import Relay
from functions.adapters.speech_sessions import KeptSpeechSession, ReadySession
from functions.adapters.turn_ledger import ClaimVerdict, TurnLedger
from functions.agent.events import AgentTurn
from functions.conversation import rules
from functions.conversation.heard import Heard, heard_of
from functions.conversation.history import SpokenExchange
from functions.observability import logger
from functions.turn import TurnOutcome, TurnRunner, TurnSpec
from functions.turn.assembly import answering_agent, hand_back, session_of, turn_runner
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
    except Exception as failure:  # whatever escaped: the turn still ends, and says why
        started = not isinstance(failure, _NotStarted)
        logger.exception("the worker failed", started=started)
        return await end_unspoken(
            job,
            adapters,
            ErrorCode.INTERNAL_ERROR,
            "the turn failed" if started else "the turn could not start",
            announce=not started,
        )


class _NotStarted(Exception):
    """The turn failed before its first frame was posted."""


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
            await sessions.release(self.acquiring.result().session, reusable=True)
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
    """Run a claimed turn under its guards, then record and keep how it ended, then tell."""
    acquiring = head.acquiring
    speech = asyncio.create_task(session_of(acquiring), name="speech-session-ready")
    relay = relay_for(job, adapters)
    stop = TurnStop(asyncio.Event())
    guards = [
        asyncio.create_task(watch_turn(adapters.turns, job, invocation.request_id, stop, policy)),
        asyncio.create_task(stop_at_deadline(invocation, stop, policy)),
    ]
    outcome: TurnOutcome | None = None
    runner: TurnRunner | None = None
    try:
        try:
            agent = await _agent(job, adapters, head)
        except Exception as error:
            raise _NotStarted from error
        spec = TurnSpec(
            job.turn_id,
            job.turn,
            job.mode,
            job.accepted_at,
            job.voice,
            job.speed,
            job.word_timings,
        )
        runner = turn_runner(
            spec,
            relay,
            speech,
            stop.event,
            adapters.settings,
            agent=agent,
            text=job.text,
            stop_failure=lambda: stop.failure,
            chunking=adapters.chunking,
        )
        outcome = await runner.run(tell_end=False)
    finally:
        for guard in guards:
            guard.cancel()
        await asyncio.gather(*guards, return_exceptions=True)
        ready = await hand_back(adapters.speech_sessions, acquiring, speech, outcome, runner)
    # The history before the turn's end is recorded (a barge-in's turn waits for that end to
    # read it) and before the turn_end (a client may ask again the moment it hears the end).
    conversation = adapters.conversation(job.connection_id)
    heard = await _leave_behind(job, adapters.connections, conversation, outcome)
    final = await _record_end(job, adapters.turns, invocation, outcome, relay)
    if final != outcome.status:  # cancelled while it ended: the record has the last word
        outcome.status = final  # type: ignore[assignment]
        if heard is None and final == "cancelled" and job.mode != "speak":
            # The cancel came after the history was kept whole: cut it now, as the route would.
            heard = await _heard(job, conversation, outcome)
            await _cut_late(job, conversation, heard)
    await runner.tell_end(outcome)
    await relay.close()
    publish_turn_metrics(final, outcome.timings, ready)
    logger.info(
        "turn ended",
        status=final,
        error_code=outcome.error.code.value if outcome.error is not None else None,
        timings=outcome.timings.model_dump(),
        speech_session=ready.origin if ready else None,
        speech_session_ready_ms=ready.ready_ms if ready else None,
        # A cut turn: how much of it the history keeps, and whether the client said so or the
        # worker estimated it (time since its first audio frame, at most the audio sent).
        heard_ms=heard.ms if heard else None,
        heard_from=heard.source if heard else None,
        **_relay_counts(relay),
    )
    return final


async def _agent(job: WorkerJob, adapters: Adapters, head: HeadStart) -> AgentTurn | None:
    """The agent that answers an ask (the settings' ``agent``), over the history the head start
    read; None to speak a given text."""
    if head.reading is None:
        return None
    connection = await head.reading
    history = connection.history if connection else []
    return answering_agent(adapters, history, job.prompt or "")


def _relay_counts(relay: Relay) -> dict[str, int]:
    return {
        "audio_bytes": relay.audio_bytes,
        "audio_frames": relay.audio_frames,
        "frames": relay.frames,
        "bytes_sent": relay.bytes_sent,
    }


async def _record_end(
    job: WorkerJob,
    turns: TurnLedger,
    invocation: Invocation,
    outcome: TurnOutcome,
    relay: Relay,
) -> str:
    """Record how the turn ended; returns the record's final status.

    Recorded before the client hears of it: a client may leave on its turn_end, and the
    $disconnect must then find the turn ended, not running (it would cancel it)."""
    error_code = outcome.error.code.value if outcome.error is not None else None
    try:
        return await asyncio.to_thread(
            turns.finish,
            job.connection_id,
            job.turn_id,
            status=outcome.status,
            timings=outcome.timings,
            counts=_relay_counts(relay),
            stop_reason=outcome.stop_reason,
            claimant=invocation.request_id,
            error_code=error_code,
        )
    except Exception:
        # The client was told; only the record is missing. Retrying the invocation cannot
        # help (the turn would be ended twice), so say so loudly and go on.
        logger.exception("the turn's end could not be recorded", status=outcome.status)
        publish_count("TurnRecordsFailed")
        return outcome.status


async def _heard(job: WorkerJob, conversation: TableConversation, outcome: TurnOutcome) -> Heard:
    """What the client said it heard (written on the turn's record with the cancel), else the
    worker's estimate; never more than the audio the turn sent (``heard_of``)."""
    given = await asyncio.to_thread(conversation.heard_ms, job.turn_id)
    return heard_of(given, outcome.audio_ms, outcome.heard_estimate_ms)


async def _leave_behind(
    job: WorkerJob,
    connections: Connections,
    conversation: TableConversation,
    outcome: TurnOutcome,
) -> Heard | None:
    """What a turn leaves for later: a connection known gone, the exchange in the history
    (``rules.keep_exchange``: a complete answer with its tool calls and its words, a cut one as
    heard, a failed one only if it called tools). Returns what was heard of a turn cut short
    (None: not cut)."""
    heard: Heard | None = None
    try:
        if outcome.gone:
            await asyncio.to_thread(connections.mark_gone, job.connection_id)
        if job.mode == "speak":
            return None
        if outcome.status == "cancelled":
            heard = await _heard(job, conversation, outcome)
        spoken = SpokenExchange(job.turn_id, job.turn, 0, outcome.words)
        await asyncio.to_thread(
            rules.keep_exchange, conversation, job.prompt or "", outcome, spoken, heard
        )
    except Exception:  # the turn itself is over and told; the next one has less context
        logger.exception("the turn's history could not be kept")
        publish_count("HistoryWritesFailed")
    return heard


async def _cut_late(job: WorkerJob, conversation: TableConversation, heard: Heard) -> None:
    try:
        await asyncio.to_thread(rules.cut_heard, conversation, heard.ms, job.turn_id)
    except Exception:
        logger.exception("the turn's history could not be cut to what was heard")
        publish_count("HistoryWritesFailed")
