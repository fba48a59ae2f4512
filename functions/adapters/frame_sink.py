"""Where a turn's frames go: the seam under ``functions.adapters.relay.Relay``.

A ``FrameSink`` delivers one WebSocket frame to one client. The frame's Python type is its
WebSocket frame type, because a client reads the two differently: ``bytes`` is a binary frame
(headed audio, ``voicewire.client_protocol.encode_audio_frame``), ``str`` a text frame (JSON:
control frames, text deltas, base64 audio). A sink delivers frames in the order its ``send``
calls are made and returns once the frame is handed on; the relay keeps order by awaiting one
frame before the next on a lane.

Failures a sink raises (and no other exception type, for a client's loss or for a frame that
cannot be delivered):

- ``ClientGone``: the client left; no later frame can reach it. The turn stops and the caller
  marks the connection gone.
- ``RelayError``: this frame failed for good (retries exhausted, or an error no retry fixes),
  with a stable ``code`` for the turn record.

The sinks: ``ApiGatewaySink`` here (API Gateway's ``@connections`` API, for the Lambda worker),
and, on AgentCore Runtime, ``functions.agentcore.transports.WebSocketSink`` (a Starlette
WebSocket) and ``SeedEvents`` (an ``/invocations`` stream of server-sent events).

``ApiGatewaySink`` failures:

- ``GoneException`` (410): ``ClientGone``.
- Throttling (429), 5xx and connection errors: retried here, and only here (the boto3 client of
  ``management_client()`` does not retry), with short jittered exponential backoff, bounded by
  attempts and by a time budget, then ``RelayError``: never an endless loop, never a silent drop.
- Anything else (403, 413, 400...): no retry fixes it, ``RelayError`` at once.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from dataclasses import dataclass
from typing import Any, Protocol

import boto3
from botocore.config import Config
from botocore.exceptions import (
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    ReadTimeoutError,
)

logger = logging.getLogger(__name__)


class ClientGone(Exception):
    """The client left (``GoneException`` on API Gateway, a closed socket on AgentCore)."""


class RelayError(Exception):
    """A frame could not be delivered, for good (retries exhausted, or an error that no retry
    fixes).

    ``code``: the AWS error code (``LimitExceededException``, ``ForbiddenException``...), or the
    botocore exception's name for a connection error; ``attempts``: the posts made."""

    def __init__(self, message: str, code: str, attempts: int) -> None:
        super().__init__(message)
        self.code = code
        self.attempts = attempts


class FrameSink(Protocol):
    """One client's end of the WebSocket: ``send`` delivers one frame (``bytes``: a binary
    frame, ``str``: a text frame), or raises ``ClientGone`` or ``RelayError``."""

    async def send(self, frame: bytes | str) -> None: ...


# --- API Gateway's @connections API ----------------------------------------------------------

# Retries belong to the sink alone. botocore's own retry modes also retry 429 and 5xx, with
# backoffs of up to many seconds, under the sink's retries: measured, 2 relay attempts made 6
# HTTP posts over 3 s. For a live audio stream a frame that late is worse than a clear failure,
# so botocore makes exactly one attempt per sink attempt, and gives up on a dead endpoint fast.
MANAGEMENT_CLIENT_CONFIG = Config(
    retries={"total_max_attempts": 1},
    connect_timeout=1.0,  # a callback endpoint that cannot be reached in 1 s is not coming back
    read_timeout=3.0,  # a post answers in tens of ms; 3 s is far past any useful frame
    tcp_keepalive=True,  # the worker posts for the whole turn: keep its connections alive
)


def management_client(callback_url: str, **client_kwargs: Any) -> Any:
    """The boto3 ``apigatewaymanagementapi`` client for a stage's callback URL, without
    botocore retries (``MANAGEMENT_CLIENT_CONFIG``): the sink retries. A ``config`` given in
    ``client_kwargs`` is merged over that one."""
    config = MANAGEMENT_CLIENT_CONFIG
    if "config" in client_kwargs:
        config = config.merge(client_kwargs.pop("config"))
    return boto3.client(
        "apigatewaymanagementapi", endpoint_url=callback_url, config=config, **client_kwargs
    )


_THROTTLING = frozenset(
    {"LimitExceededException", "TooManyRequestsException", "ThrottlingException"}
)
# The request may not have reached API Gateway, or its answer was lost: worth another try.
_CONNECTION_ERRORS = (
    EndpointConnectionError,
    ConnectionClosedError,
    ReadTimeoutError,
    ConnectTimeoutError,
)


def _is_retryable(error: ClientError) -> bool:
    code = error.response.get("Error", {}).get("Code", "")
    status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
    return code in _THROTTLING or code == "InternalServerError" or status >= 500


@dataclass
class ApiGatewaySink:
    """Frames to one connection through API Gateway's ``@connections`` API.

    API Gateway carries a post's bytes as they are (a text frame's are its UTF-8). Each attempt
    runs boto3's blocking call in a thread (its clients are thread-safe) and the backoff sleeps
    on the loop, so a throttled frame holds no thread while it waits. A ``send`` whose caller is
    cancelled still finishes the attempt in its thread: the relay never cancels one, so that a
    frame cannot be overtaken by the next one of its lane."""

    client: Any  # boto3 "apigatewaymanagementapi" client, endpoint_url = the stage's callback URL
    connection_id: str
    max_attempts: int = 5
    first_backoff: float = 0.05  # the first retry waits 25-50 ms (jittered), then doubles
    # Audio more than ~1 s late is worse than a clear failure: retries stop once the next pause
    # would end past this budget, counted from the first attempt of the post.
    retry_budget_seconds: float = 1.0

    async def send(self, frame: bytes | str) -> None:
        data = frame.encode() if isinstance(frame, str) else frame
        started = time.monotonic()
        for attempt in range(1, self.max_attempts + 1):
            try:
                await asyncio.to_thread(self._post, data)
                return
            except ClientError as error:
                code = error.response.get("Error", {}).get("Code", "")
                if code == "GoneException":
                    raise ClientGone(self.connection_id) from error
                if not _is_retryable(error):
                    raise self._failed(code, attempt) from error
                failure: Exception = error
            except _CONNECTION_ERRORS as error:
                code, failure = type(error).__name__, error
            # Equal jitter: half the step, plus up to another half at random, so that the
            # retries of concurrent posts spread out.
            step = self.first_backoff * 2 ** (attempt - 1)
            pause = step / 2 + random.uniform(0, step / 2)
            elapsed = time.monotonic() - started
            if attempt == self.max_attempts or elapsed + pause > self.retry_budget_seconds:
                raise self._failed(code, attempt) from failure
            logger.warning("post failed (%s), retry %d in %.3f s", code, attempt, pause)
            await asyncio.sleep(pause)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _post(self, data: bytes) -> None:
        self.client.post_to_connection(ConnectionId=self.connection_id, Data=data)

    def _failed(self, code: str, attempts: int) -> RelayError:
        plural = "" if attempts == 1 else "s"
        return RelayError(
            f"posting to {self.connection_id} failed: {code} after {attempts} attempt{plural}",
            code,
            attempts,
        )
