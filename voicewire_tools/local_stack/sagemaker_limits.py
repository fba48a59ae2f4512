"""SageMaker's limits on a bidirectional stream, as the local runtime enforces them.

Each default is AWS's value where AWS states one; where it does not, the value is a named,
conservative choice and says so. The local runtime (``sagemaker_runtime``) applies all of them
by default, so code that works against it has met every one; tests pass smaller values to cross
a limit quickly (``SageMakerLimits(stream_idle_seconds=0.5)``).

What the client sees when a limit is crossed (``InvokeEndpointWithBidirectionalStream``):

- the container not accepting the WebSocket in time: the call fails before the stream opens,
  HTTP 424 ``ModelError`` (what the SDK raises; AWS's only pre-stream error for the container);
- a missed-pong, idle or session-length cut: a ``ModelStreamError`` event ends the response
  stream, its ``ErrorCode`` one of the codes AWS documents for the same event of its other
  streaming API (``StreamBroken``, ``ModelInvocationTimeExceeded``: the ``ResponseStream`` API
  reference, https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_runtime_ResponseStream.html);
  which event AWS sends for these on *this* API is not documented;
- a request part over the size limit: an ``InternalStreamFailure`` event (the front door refuses
  it; once the response has started, that is the one front-door error the API model has);
- a container frame over the size limit: no error, the frame arrives as ``PARTIAL`` parts.
"""

from __future__ import annotations

from dataclasses import dataclass

# --- AWS's values ---------------------------------------------------------------------------

# "Containers must accept socket connection requests within 250 ms." SageMaker developer guide,
# "Custom Inference Code with Hosting Services", section "Container Contract to Support
# Bidirectional Streaming Capabilities":
# https://docs.aws.amazon.com/sagemaker/latest/dg/your-algorithms-inference-code.html#your-algorithms-inference-algo-bidi
# (the same three rules in aws-samples/sagemaker-genai-hosting-examples,
# 03-features/bidirectional-streaming-byoc). Measured here from the sidecar's TCP connect to
# the container's 101 Switching Protocols.
CONTAINER_ACCEPT_SECONDS = 0.250

# "SageMaker AI sends WebSocket ping frames every 60 seconds ... If 5 consecutive pings go
# unanswered, the connection is gracefully closed." AWS ML blog, "Introducing bidirectional
# streaming for real-time inference on Amazon SageMaker AI" (2025-11):
# https://aws.amazon.com/blogs/machine-learning/introducing-bidirectional-streaming-for-real-time-inference-on-amazon-sagemaker-ai/
CONTAINER_PING_INTERVAL_SECONDS = 60.0
CONTAINER_MISSED_PONGS = 5

# --- not documented by AWS: conservative choices ---------------------------------------------

# Session length. AWS states none for this API. Deepgram, the launch partner whose models run
# behind it, lists "30 min per connection" for InvokeEndpointWithBidirectionalStream
# (https://developers.deepgram.com/docs/invoke-sagemaker-endpoint); whether that is SageMaker's
# cap or Deepgram's container's is not said, so it is taken as SageMaker's.
MAX_SESSION_SECONDS = 30 * 60.0

# Idle stream (no payload part either way; the sidecar's WebSocket pings do not count). AWS
# states none for this API. 60 s is the idle timeout AWS's HTTP front doors default to (ALB's
# ``idle_timeout.timeout_seconds``:
# https://docs.aws.amazon.com/elasticloadbalancing/latest/application/edit-load-balancer-attributes.html#connection-idle-timeout)
# and SageMaker's own bound for a container to answer ``InvokeEndpoint``
# (https://docs.aws.amazon.com/sagemaker/latest/dg/your-algorithms-inference-code.html#your-algorithms-inference-code-container-response).
# The worker keeps an idle session for 55 s at most (``functions/settings.py``), under it; the
# speech server closes a session idle for 60 s itself (``bidi_session.IDLE_SESSION_SECONDS``).
STREAM_IDLE_SECONDS = 60.0

# Payload part size, either way. The API model puts no length on ``PayloadPart.Bytes``
# (``SensitiveBlob``, no ``@length``; the SDKs' event-stream encoders stop at 16 MiB a message)
# and AWS states no figure. AWS's own sample streams audio in 512,000-byte request parts (the
# blog above, ``highWaterMark: 512_000``), so that size is known to pass; nothing larger is.
# Our protocol's largest message is 128 KiB (``speech_protocol.MAX_MESSAGE_BYTES``).
MAX_REQUEST_PART_BYTES = 512_000
# A container frame larger than this comes back cut into PARTIAL parts of at most this size
# (the API has ``CompletionState`` for it; AWS does not say at what size it cuts). The same
# known-good size as requests.
MAX_RESPONSE_PART_BYTES = 512_000

# The ErrorCodes of the ModelStreamError that ends a stream cut by a limit (see the docstring).
TIMEOUT_ERROR_CODE = "ModelInvocationTimeExceeded"
BROKEN_ERROR_CODE = "StreamBroken"


@dataclass(frozen=True)
class SageMakerLimits:
    """The limits one local runtime enforces; AWS's (or the named choices above) by default."""

    container_accept_seconds: float = CONTAINER_ACCEPT_SECONDS
    container_ping_interval_seconds: float = CONTAINER_PING_INTERVAL_SECONDS
    container_missed_pongs: int = CONTAINER_MISSED_PONGS
    max_session_seconds: float = MAX_SESSION_SECONDS
    stream_idle_seconds: float = STREAM_IDLE_SECONDS
    max_request_part_bytes: int = MAX_REQUEST_PART_BYTES
    max_response_part_bytes: int = MAX_RESPONSE_PART_BYTES

    def __post_init__(self) -> None:
        for name in (
            "container_accept_seconds",
            "container_ping_interval_seconds",
            "max_session_seconds",
            "stream_idle_seconds",
        ):
            if not getattr(self, name) > 0:  # NaN fails this too
                raise ValueError(f"{name} must be a number of seconds above 0")
        for name in ("container_missed_pongs", "max_request_part_bytes", "max_response_part_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")

    @property
    def container_pong_timeout_seconds(self) -> float:
        """How long after a ping without its pong the container is given up on: the ping after
        it, and the ones after that, go unanswered too (websockets waits for one pong at a
        time, so ``missed_pongs`` intervals after the first unanswered ping)."""
        return self.container_ping_interval_seconds * self.container_missed_pongs
