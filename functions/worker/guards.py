"""What stops a running turn besides its own end: a cancel seen in the turn's record, and the
invocation's deadline.

A cancel (the cancel route, a barge-in, a disconnect) only writes the turn's record, so the
worker watches the record while it runs the turn, renewing its claim as it goes
(``functions.worker.policy`` sets the pace). Lambda stops an invocation at its timeout without
warning, so the worker ends the turn a margin before, and says so.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from functions.adapters.turn_ledger import TurnLedger
from functions.observability import logger
from functions.worker.job import WorkerJob
from functions.worker.policy import WORKER_POLICY, WorkerPolicy
from voicewire.client_protocol import ClientError
from voicewire.error_codes import ErrorCode


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
    turns: TurnLedger,
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
                    turns.renew_claim,
                    job.connection_id,
                    job.turn_id,
                    claimant,
                    policy.lease_seconds,
                )
                renew_at = time.monotonic() + policy.heartbeat_seconds
                status = "running" if held else "not-held"
            else:
                status = await asyncio.to_thread(turns.status, job.connection_id, job.turn_id)
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
