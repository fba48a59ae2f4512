"""The one table from a failure to the ``error`` frame a client is told (functions.failure_frames):
each row's code and sentence, and the order that lets a specific row win over a general one."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError as AwsClientError
from botocore.exceptions import EndpointConnectionError

from functions.adapters.frame_sink import RelayError
from functions.adapters.llm_errors import LlmError
from functions.failure_frames import (
    SpeechLimitReached,
    TurnNotStarted,
    WorkerUnavailable,
    failure_frame,
)
from voicewire.error_codes import ErrorCode, ProtocolError
from voicewire.speech_link import SpeechSessionError
from voicewire.speech_link.errors import SpeechServerError


def throttled() -> AwsClientError:
    return AwsClientError(
        {"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "slow down"}},
        "UpdateItem",
    )


@pytest.mark.parametrize(
    ("failure", "code", "said"),
    [
        (ProtocolError(ErrorCode.INVALID_FIELD, "bad voice"), "invalid_field", "bad voice"),
        (LlmError(ErrorCode.LLM_THROTTLED, "the model is throttled"), "llm_throttled", "throttled"),
        (SpeechServerError("speech_busy", "all voices busy"), "speech_busy", "all voices busy"),
        (SpeechSessionError("stream_reset", "gone"), "speech_failed", "(stream_reset)"),
        (RelayError("no", "ForbiddenException", 1), "delivery_failed", "(ForbiddenException)"),
        (SpeechLimitReached(120), "speech_limit_reached", "limit of 120 s of speech"),
        (WorkerUnavailable("TooManyRequestsException"), "worker_unavailable", "TooMany"),
        (throttled(), "state_unavailable", "ProvisionedThroughputExceededException"),
        (EndpointConnectionError(endpoint_url="x"), "state_unavailable", "EndpointConnection"),
        (TurnNotStarted(), "internal_error", "could not start"),
        (KeyError("a bug"), "internal_error", "see the worker's log"),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, Exception) else None,
)
def test_each_failure_is_its_code_and_a_sentence(failure, code, said):
    frame = failure_frame(failure, turn_id="t1")
    assert (frame.type, frame.code.value, frame.turn_id) == ("error", code, "t1")
    assert said in frame.message


def test_a_protocol_error_names_the_turn_its_action_named_and_a_speech_error_does_not():
    named = failure_frame(ProtocolError(ErrorCode.UNKNOWN_TURN, "no such turn", "t7"))
    assert named.turn_id == "t7"
    # A speech error's request id is the speech server's, not a turn the client knows.
    speech = failure_frame(SpeechSessionError("internal", "boom", request_id="r-9"))
    assert speech.turn_id is None


def test_a_subclass_takes_its_own_row_before_the_catch_all():
    class Odd(LlmError):
        pass

    assert failure_frame(Odd(ErrorCode.LLM_FAILED, "x")).code == ErrorCode.LLM_FAILED


def test_what_is_not_an_exception_is_not_a_frame():
    with pytest.raises(TypeError):
        failure_frame(KeyboardInterrupt())
