"""Every way an LLM call fails, as one ``LlmError`` with a stable code.

Errors can arrive inside the stream (``throttlingException``, ``modelStreamErrorException``,
...): botocore raises them as ``EventStreamError``; a recording may carry them as events. Errors
of the connection itself (timeouts, an unreachable endpoint, a connection cut mid-stream) and a
request botocore rejects come from botocore or urllib3. Throttling is ``llm_throttled`` (the
client may ask again soon), anything else ``llm_failed``.
"""

from __future__ import annotations

import urllib3.exceptions
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    ParamValidationError,
    ReadTimeoutError,
)

from voicewire.error_codes import ErrorCode

_THROTTLING = frozenset({"ThrottlingException", "throttlingException", "TooManyRequestsException"})
# The error events a stream can carry (Bedrock's ConverseStream output union).
STREAM_EXCEPTIONS = (
    "throttlingException",
    "modelStreamErrorException",
    "internalServerException",
    "validationException",
    "serviceUnavailableException",
)

# Errors that are not the service's answer, with what they mean; the first match wins. botocore
# raises its own before the response arrives; while the stream is read, urllib3's come through
# unwrapped (botocore's EventStream does not wrap them).
_TRANSPORT_FAILURES: tuple[tuple[type[Exception] | tuple[type[Exception], ...], str], ...] = (
    (ParamValidationError, "the request to the model is invalid"),
    (ConnectTimeoutError, "could not connect to the model's endpoint in time"),
    (EndpointConnectionError, "could not reach the model's endpoint"),
    (
        (ReadTimeoutError, urllib3.exceptions.ReadTimeoutError),
        "the model sent nothing for longer than the read timeout",
    ),
    (
        (ConnectionClosedError, urllib3.exceptions.ProtocolError),
        "the model's endpoint closed the connection",
    ),
    ((BotoCoreError, urllib3.exceptions.HTTPError), "the call to the model failed"),
)


class LlmError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


def llm_error(code: str, message: str) -> LlmError:
    if code in _THROTTLING:
        return LlmError(ErrorCode.LLM_THROTTLED, f"the model is throttled: {message}")
    return LlmError(ErrorCode.LLM_FAILED, f"the model's stream failed ({code}): {message}")


def as_llm_error(error: BaseException) -> BaseException:
    """The ``LlmError`` for a failure of the service or the connection; anything else (a bug)
    unchanged."""
    if isinstance(error, ClientError):
        details = error.response.get("Error", {})
        return llm_error(details.get("Code", ""), details.get("Message", str(error)))
    for kinds, meaning in _TRANSPORT_FAILURES:
        if isinstance(error, kinds):
            return LlmError(ErrorCode.LLM_FAILED, f"{meaning}: {error}")
    return error
