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

import math
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class WorkerPolicy:
    # The function's timeout: a turn is a few seconds to a minute of speech; 2 minutes bounds a
    # runaway turn and what it costs, on a GPU. An engine that speaks slower needs longer
    # (``worker_policy_for``).
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
    # A stalled speech server: the longest wait for a sentence's next speech event before the
    # turn fails (``speech_failed``); the stack sets it per engine (``worker_policy_for``) as
    # ``VOICEWIRE_SPEECH_CHUNK_TIMEOUT_SECONDS``.
    speech_chunk_timeout_seconds: float = 10.0


@dataclass(frozen=True)
class SpeechEngineTiming:
    """How long a speech engine takes per second of audio, at the worst a deployment plans for:
    the worker's time limits follow from it (``worker_policy_for``)."""

    engine: str
    real_time_factor: float  # engine seconds per second of audio
    source: str


SPEECH_ENGINES = {
    timing.engine: timing
    for timing in (
        # The seed measured 12.1 ms per audio second on ml.g5.xlarge (docs/capacity.md); four
        # times that leaves room for sessions queued behind one another on a busy instance.
        SpeechEngineTiming("torch", 0.05, "GPU: the seed's 12.1 ms per audio second, x4"),
        # voicewire bench speech: 0.27 on 2 cores (rewritten graph), 0.43 with the int8 graph;
        # a 4-vCPU ml.c7i.xlarge is no slower.
        SpeechEngineTiming("onnx", 0.5, "CPU: 0.27-0.43 measured on 2 cores, rounded up"),
    )
}
# The longest an answer takes to write: Bedrock's first token, then max_output_tokens (512) at
# the slowest stream rate worth serving (~10 tokens/s).
LLM_SECONDS = 60
# A turn's longest chunk (~320 characters) lasts ~25 s of audio.
LONGEST_CHUNK_AUDIO_SECONDS = 25.0
# Posting the last frames and writing the record after synthesis ends.
FINISH_SECONDS = 10
# Lambda's own limit on a function's timeout.
LAMBDA_MAX_TIMEOUT_SECONDS = 900


def worker_policy_for(engine: str, max_speech_seconds: float) -> WorkerPolicy:
    """The worker's limits for a speech engine and the most audio one turn may send: its timeout
    covers the longest answer, then synthesizing all of it (batch and speak synthesize after the
    text is whole), with the stop margin; events live long enough for both retries."""
    timing = SPEECH_ENGINES[engine]
    base = WorkerPolicy()
    needed = (
        LLM_SECONDS
        + max_speech_seconds * timing.real_time_factor
        + FINISH_SECONDS
        + base.stop_margin_seconds
    )
    timeout = max(base.timeout_seconds, math.ceil(needed / 10) * 10)
    if timeout > LAMBDA_MAX_TIMEOUT_SECONDS:
        raise ValueError(
            f"{max_speech_seconds:g} s of speech per turn takes the {engine} engine longer than "
            f"Lambda's {LAMBDA_MAX_TIMEOUT_SECONDS} s: lower max_speech_seconds_per_turn"
        )
    return replace(
        base,
        timeout_seconds=timeout,
        # Lambda retries ~1 and ~2 minutes after a failed attempt of up to ``timeout``.
        max_event_age_seconds=max(base.max_event_age_seconds, 3 * timeout + 180),
        speech_chunk_timeout_seconds=max(
            base.speech_chunk_timeout_seconds,
            # three times the longest chunk's planned time: a loaded CPU took ~20 s for it
            math.ceil(LONGEST_CHUNK_AUDIO_SECONDS * timing.real_time_factor * 3),
        ),
    )


WORKER_POLICY = WorkerPolicy()
