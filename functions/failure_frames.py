"""Every failure a client is told about, and the ``error`` frame it becomes: one table.

A turn, an action or an admission that fails ends in an ``error`` frame with a stable code
(``voicewire.error_codes``), whatever front door it came through. The table below is the only
place where an exception becomes that frame: the turn's runner (``functions.turn.runner``), the
turn lifecycle (``functions.lifecycle``: admission, a worker that could not be started, an agent
that could not be built) and the action parser's ``ProtocolError`` all come here. Order matters:
the first row whose type matches wins, so the specific rows come before the general ones.

Two failures are not in the table because they are not errors the client is told: the client
leaving (``ClientGone``: nobody to tell) and a cancel (the turn ends ``cancelled``).
"""

from __future__ import annotations

from collections.abc import Callable

from botocore.exceptions import BotoCoreError
from botocore.exceptions import ClientError as AwsClientError

from functions.adapters.frame_sink import RelayError
from functions.adapters.llm_errors import LlmError
from voicewire.client_protocol import ClientError
from voicewire.error_codes import ErrorCode, ProtocolError
from voicewire.speech_link import SpeechSessionError


class SpeechLimitReached(Exception):
    """The turn spoke its limit of seconds (``max_speech_seconds_per_turn``)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"the turn reached its limit of {seconds:g} s of speech")


class TurnNotStarted(Exception):
    """The turn failed before its first frame (its agent could not be built)."""


class WorkerUnavailable(Exception):
    """The turn's worker could not be started (Lambda refused the invocation)."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"the turn's worker could not be started ({reason})")


def _speech(failure: SpeechSessionError) -> tuple[ErrorCode, str]:
    if failure.code == ErrorCode.SPEECH_BUSY:  # refused at its first text: ask again
        return ErrorCode.SPEECH_BUSY, failure.message
    return ErrorCode.SPEECH_FAILED, f"speech synthesis failed ({failure.code})"


def _aws(failure: AwsClientError | BotoCoreError) -> tuple[ErrorCode, str]:
    # DynamoDB failed past the client's retries (throttled, unavailable): the client hears why.
    code = (
        failure.response.get("Error", {}).get("Code", "")
        if isinstance(failure, AwsClientError)
        else type(failure).__name__
    )
    return ErrorCode.STATE_UNAVAILABLE, f"the session state could not be written ({code})"


FailureMeaning = Callable[[BaseException], tuple[ErrorCode, str]]
FailureKinds = type[BaseException] | tuple[type[BaseException], ...]

FAILURE_FRAMES: tuple[tuple[FailureKinds, FailureMeaning], ...] = (
    (ProtocolError, lambda e: (e.code, e.message)),  # type: ignore[attr-defined]
    (LlmError, lambda e: (e.code, e.message)),  # type: ignore[attr-defined]
    (SpeechSessionError, _speech),  # type: ignore[arg-type]
    (
        RelayError,
        lambda e: (
            ErrorCode.DELIVERY_FAILED,
            f"a frame could not be delivered ({e.code or e})",  # type: ignore[attr-defined]
        ),
    ),
    (SpeechLimitReached, lambda e: (ErrorCode.SPEECH_LIMIT_REACHED, str(e))),
    (WorkerUnavailable, lambda e: (ErrorCode.WORKER_UNAVAILABLE, str(e))),
    ((AwsClientError, BotoCoreError), _aws),  # type: ignore[arg-type]
    (TurnNotStarted, lambda e: (ErrorCode.INTERNAL_ERROR, "the turn could not start")),
    # A bug or an unforeseen failure: the turn still ends, and says so; the log has the rest.
    (Exception, lambda e: (ErrorCode.INTERNAL_ERROR, "the turn failed; see the worker's log")),
)


def failure_frame(failure: BaseException, turn_id: str | None = None) -> ClientError:
    """The ``error`` frame that tells the client about ``failure`` (the table's first match)."""
    for kinds, meaning in FAILURE_FRAMES:
        if isinstance(failure, kinds):
            code, message = meaning(failure)
            if turn_id is None and isinstance(failure, ProtocolError):
                turn_id = failure.request_id  # the action's own turn_id, when it had one
            return ClientError(code=code, message=message, turn_id=turn_id)
    raise TypeError(f"not an Exception: {failure!r}")  # BaseException outside the table
