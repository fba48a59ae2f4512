"""The ways a turn ends without being spoken, and the frames that tell the client so.

A turn always ends for the client (``turn_end``, after an ``error`` if it failed), for the
record (its status) and for CloudWatch (its metric), even when nothing of it was spoken: a job
that came too late, a worker that died and was retried, a turn cancelled while its worker was
dead. The spoken path is ``functions.worker.run``.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from functions.adapters.frame_sink import ApiGatewaySink, ClientGone, RelayError
from functions.adapters.relay import Relay
from functions.conversation import turn_frames
from functions.observability import logger
from functions.wiring import Adapters
from functions.worker.job import WorkerJob
from functions.worker.metrics import publish_turn_metrics
from voicewire.client_protocol import ClientError, Timings
from voicewire.error_codes import ErrorCode


async def end_unspoken(
    job: WorkerJob, adapters: Adapters, code: ErrorCode, message: str, announce: bool
) -> str:
    """End a turn that will not be spoken: record it ``failed``, tell the client (``turn_start``
    first if nobody did yet), publish the metric. Raises if the record cannot be written, so
    that Lambda's retry ends the turn later."""
    turns = adapters.turns
    record_error: Exception | None = None
    try:
        failed = await asyncio.to_thread(turns.fail, job.connection_id, job.turn_id, code)
    except Exception as error:
        record_error, failed = error, True
    if not failed:  # it ended meanwhile (a cancel): whoever ended it told the client
        logger.info("turn already ended", error_code=str(code))
        return await asyncio.to_thread(turns.status, job.connection_id, job.turn_id) or ""
    status = "failed"
    error = ClientError(code=code, message=message, turn_id=job.turn_id)
    frames = turn_frames.unspoken(job, status, elapsed(job), error, announce=announce)
    await tell(relay_for(job, adapters), frames)
    publish_turn_metrics(status, elapsed(job), None)
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
        adapters.turns.finish,
        job.connection_id,
        job.turn_id,
        status=status or "cancelled",  # type: ignore[arg-type]
        timings=elapsed(job),
        counts={},
        claimant=claimant,
    )
    await tell(relay_for(job, adapters), [turn_frames.turn_end(job, final, elapsed(job))])
    publish_turn_metrics(final, elapsed(job), None)
    logger.warning("a dead worker's cancelled turn told its end", status=final)
    return final


async def end_cancelled_before_start(job: WorkerJob, adapters: Adapters, status: str) -> str:
    """A turn cancelled (a cancel, a barge-in, a disconnect) before any worker took it: the
    client still sees it begin and end, with nothing in between."""
    await tell(relay_for(job, adapters), turn_frames.unspoken(job, status, elapsed(job)))
    publish_turn_metrics(status, elapsed(job), None)
    return status


def relay_for(job: WorkerJob, adapters: Adapters) -> Relay:
    """The relay that posts this job's frames to its connection, as the client asked."""
    sink = ApiGatewaySink(adapters.management_client(job.callback_url), job.connection_id)
    return Relay(
        sink,
        job.turn,
        job.audio,
        text_flush="sentence" if job.text_deltas == "sentence" else "interval",
    )


async def tell(relay: Relay, frames: list[Any]) -> None:
    """Post control frames, best effort: a client that left or cannot be reached is logged."""
    try:
        for frame in frames:
            await relay.control(frame)
    except (ClientGone, RelayError) as error:
        logger.info("could not tell the client", reason=repr(error))
    finally:
        await relay.close()


def elapsed(job: WorkerJob) -> Timings:
    return Timings(total_ms=round((time.time() - job.accepted_at) * 1000, 1))
