"""The worker: one invocation per turn, holding the LLM stream and the speech session.

Invoked asynchronously by the message route. It asks for its speech session at once (a kept one
or a new one, ``functions.adapters.speech_sessions``), runs the turn (``functions.turn``),
watches the turn's record for a cancel (the cancel route, a barge-in, a disconnect write it),
records how the turn ended, keeps the conversation history, and publishes the turn's timings as
CloudWatch metrics (EMF). It runs on the execution environment's event loop, which outlives the
invocation, so that a session kept for the next turn stays usable.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from functions.adapters.llm import converse_request
from functions.adapters.relay import Relay
from functions.adapters.session_store import SessionStore
from functions.adapters.speech_sessions import KeptSpeechSession, ReadySession
from functions.environment_loop import run_in_environment
from functions.observability import logger, metrics
from functions.turn import TurnOutcome, TurnRunner, TurnSpec
from functions.wiring import Adapters, current_adapters
from functions.worker_job import WorkerJob
from voicewire.client_protocol import Timings
from voicewire.speech_link import SpeechSession, sagemaker_client

CANCEL_POLL_SECONDS = 0.1

# While Lambda initializes the environment, not on the first turn's critical path: importing
# the SageMaker SDK and awscrt takes ~0.7 s, building boto3's session ~0.1 s.
sagemaker_client.shared_boto3_session()


async def watch_for_cancel(store: SessionStore, job: WorkerJob, cancelled: asyncio.Event) -> None:
    """Poll the turn's status (strongly consistent) until it is no longer running."""
    while not cancelled.is_set():
        status = await asyncio.to_thread(store.turn_status, job.connection_id, job.turn_id)
        if status != "running":
            cancelled.set()
            return
        await asyncio.sleep(CANCEL_POLL_SECONDS)


async def run_job(job: WorkerJob, adapters: Adapters) -> TurnOutcome:
    # The speech session first: its set-up (or the check of a kept one) runs while the turn
    # starts and the LLM writes its first tokens.
    sessions = adapters.speech_sessions
    acquiring = asyncio.create_task(sessions.acquire(), name="speech-session")
    speech = asyncio.create_task(_session_of(acquiring), name="speech-session-ready")
    store = adapters.store
    relay = Relay(
        adapters.management_client(job.callback_url), job.connection_id, job.turn, job.audio
    )
    cancelled = asyncio.Event()
    watcher = asyncio.create_task(watch_for_cancel(store, job, cancelled))
    outcome: TurnOutcome | None = None
    runner: TurnRunner | None = None
    try:
        llm_request = None
        if job.mode != "speak":
            connection = await asyncio.to_thread(store.get_connection, job.connection_id)
            history = connection.history if connection else []
            llm_request = converse_request(
                adapters.settings.bedrock_model_id,
                history,
                job.prompt or "",
                adapters.settings.system_prompt,
            )
        spec = TurnSpec(job.turn_id, job.turn, job.mode, job.accepted_at, job.voice, job.speed)
        runner = TurnRunner(
            spec,
            relay,
            speech,
            cancelled,
            llm=adapters.llm_client() if llm_request else None,
            llm_request=llm_request,
            text=job.text,
        )
        outcome = await runner.run()
        # The turn's record first: the client has its turn_end and may leave at once, and a
        # $disconnect then must find the turn already ended, not running.
        counts = {
            "audio_bytes": relay.audio_bytes,
            "audio_frames": relay.audio_frames,
            "frames": relay.frames,
            "bytes_sent": relay.bytes_sent,
        }
        final = await asyncio.to_thread(
            store.finish_turn,
            job.connection_id,
            job.turn_id,
            outcome.status,
            outcome.timings,
            counts,
            outcome.stop_reason,
        )
    finally:
        watcher.cancel()
        ready = await _hand_back(sessions, acquiring, speech, outcome, runner)
    if outcome.gone:
        await asyncio.to_thread(store.mark_gone, job.connection_id)
    if job.mode != "speak" and final == "complete" and outcome.answer.strip():
        await asyncio.to_thread(
            store.append_history, job.connection_id, job.prompt or "", outcome.answer
        )
    _publish_metrics(job, final, outcome.timings, ready)
    logger.info(
        "turn ended",
        status=final,
        timings=outcome.timings.model_dump(),
        speech_session=ready.origin if ready else None,
        speech_session_ready_ms=ready.ready_ms if ready else None,
        **counts,
    )
    return outcome


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
    # Dimensions are per invocation; a warm container must not carry the last turn's mode.
    metrics.clear_metrics()
    metrics.add_dimension(name="mode", value=job.mode)
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


@metrics.log_metrics
@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    job = WorkerJob.model_validate(event)
    logger.append_keys(connection_id=job.connection_id, turn_id=job.turn_id)
    # Not asyncio.run: the environment's loop outlives the invocation, and so can its session.
    outcome = run_in_environment(run_job(job, current_adapters()))
    return {"status": outcome.status}
