"""The worker: one invocation per turn, holding the LLM stream and the speech session.

Invoked asynchronously by the message route. It runs the turn (``functions.turn``), watches the
turn's record for a cancel (the cancel route, a barge-in, a disconnect write it), records how the
turn ended, keeps the conversation history, and publishes the turn's timings as CloudWatch
metrics (EMF).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from functions.adapters.llm import converse_request
from functions.adapters.relay import ConnectionGone, Relay
from functions.adapters.session_store import SessionStore
from functions.observability import logger, metrics
from functions.turn import TurnOutcome, TurnRunner, TurnSpec
from functions.wiring import Adapters, current_adapters
from functions.worker_job import WorkerJob
from voicewire.client_protocol import ClientError, Timings, TurnEnd
from voicewire.error_codes import ErrorCode
from voicewire.speech_link import SpeechSessionError

CANCEL_POLL_SECONDS = 0.1


async def watch_for_cancel(store: SessionStore, job: WorkerJob, cancelled: asyncio.Event) -> None:
    """Poll the turn's status (strongly consistent) until it is no longer running."""
    while not cancelled.is_set():
        status = await asyncio.to_thread(store.turn_status, job.connection_id, job.turn_id)
        if status != "running":
            cancelled.set()
            return
        await asyncio.sleep(CANCEL_POLL_SECONDS)


async def run_job(job: WorkerJob, adapters: Adapters) -> TurnOutcome:
    store = adapters.store
    relay = Relay(
        adapters.management_client(job.callback_url), job.connection_id, job.turn, job.audio
    )
    cancelled = asyncio.Event()
    watcher = asyncio.create_task(watch_for_cancel(store, job, cancelled))
    llm_request = None
    if job.mode != "speak":
        connection = store.get_connection(job.connection_id)
        history = connection.history if connection else []
        llm_request = converse_request(
            adapters.settings.bedrock_model_id,
            history,
            job.prompt or "",
            adapters.settings.system_prompt,
        )
    spec = TurnSpec(job.turn_id, job.turn, job.mode, job.accepted_at, job.voice, job.speed)
    try:
        async with adapters.speech_session() as speech:
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
    except SpeechSessionError as error:  # the speech session could not even open
        logger.exception("speech session failed to open")
        outcome = await _fail_before_start(relay, spec, error)
    finally:
        watcher.cancel()
    counts = {
        "audio_bytes": relay.audio_bytes,
        "audio_frames": relay.audio_frames,
        "frames": relay.frames,
        "bytes_sent": relay.bytes_sent,
    }
    final = store.finish_turn(
        job.connection_id, job.turn_id, outcome.status, outcome.timings, counts, outcome.stop_reason
    )
    if outcome.gone:
        store.mark_gone(job.connection_id)
    if job.mode != "speak" and final == "complete" and outcome.answer.strip():
        store.append_history(job.connection_id, job.prompt or "", outcome.answer)
    _publish_metrics(job, final, outcome.timings)
    logger.info("turn ended", status=final, timings=outcome.timings.model_dump(), **counts)
    return outcome


async def _fail_before_start(relay: Relay, spec: TurnSpec, error: Exception) -> TurnOutcome:
    timings = Timings(total_ms=round((time.time() - spec.accepted_at) * 1000, 1))
    outcome = TurnOutcome("failed", timings)
    frame = ClientError(
        code=ErrorCode.SPEECH_FAILED,
        message="the speech service is unavailable",
        turn_id=spec.turn_id,
    )
    try:
        await relay.control(frame)
        await relay.control(
            TurnEnd(
                turn_id=spec.turn_id,
                status="failed",
                timings=timings,
                audio_bytes=0,
                audio_frames=0,
            )
        )
    except ConnectionGone:
        outcome.gone = True
    return outcome


def _publish_metrics(job: WorkerJob, status: str, timings: Timings) -> None:
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


@metrics.log_metrics
@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    job = WorkerJob.model_validate(event)
    logger.append_keys(connection_id=job.connection_id, turn_id=job.turn_id)
    outcome = asyncio.run(run_job(job, current_adapters()))
    return {"status": outcome.status}
