"""How the worker is invoked, retried and timed: the values the stacks apply to the function and
the worker enforces itself, in one place so they cannot drift apart.

Lambda runs an asynchronous invocation again when it fails (by default twice, about 1 and 2
minutes later) and may deliver one event more than once even without a failure. A turn must
never be spoken twice, so retries are made harmless rather than turned off:

- the worker *claims* its turn with a conditional write before doing anything; a second
  delivery finds the claim and is dropped;
- a claim is kept alive by a heartbeat; a retry that finds the claim's lease expired knows the
  worker before it died (a crash, a timeout) and only ends the turn (``error`` + ``turn_end``),
  unspoken;
- every failure the worker can catch ends the turn in the same invocation, which then returns
  normally, so Lambda has nothing to retry;
- a turn whose worker starts too long after the message route accepted it is ended unspoken
  (``turn_expired``): an answer minutes late is worse than a clear failure.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class WorkerPolicy:
    # The function's timeout: a turn is a few seconds to a minute of speech; 2 minutes bounds a
    # runaway turn and what it costs.
    timeout_seconds: int = 120
    # The turn is ended (``turn_timed_out``) this long before Lambda would kill the invocation,
    # so the client gets its turn_end and the record is written.
    stop_margin_seconds: float = 5.0
    # Lambda's asynchronous retries (MaximumRetryAttempts): kept, as they only end turns whose
    # worker died; each one that finds nothing to do is dropped in milliseconds.
    async_retry_attempts: int = 2
    # MaximumEventAgeInSeconds: long enough for both retries (~1 and ~2 minutes after a failure
    # of up to ``timeout_seconds``), short enough that a throttled event is not kept for hours.
    max_event_age_seconds: int = 600
    # A job that reaches its worker later than this after acceptance is not spoken.
    start_deadline_seconds: float = 30.0
    # The claim's lease, renewed every ``heartbeat_seconds`` while the worker runs. Lambda's
    # first retry comes ~60 s after a failure, well after a dead worker's lease expired.
    lease_seconds: float = 30.0
    heartbeat_seconds: float = 10.0
    # The cancel watcher reads the turn's status this often (a strongly consistent GetItem) ...
    poll_seconds: float = 0.1
    # ... backs off up to this between failed reads (throttling, 5xx, network) ...
    poll_backoff_max_seconds: float = 1.0
    # ... and stops the turn (``state_unavailable``) when reads have failed for this long: a turn
    # that can no longer see a cancel, a barge-in or a disconnect must not keep speaking.
    poll_failure_limit_seconds: float = 5.0


WORKER_POLICY = WorkerPolicy()
