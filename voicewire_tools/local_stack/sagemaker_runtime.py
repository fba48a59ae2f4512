"""SageMaker's bidirectional-streaming front door, on this machine.

On AWS the worker's speech session goes through ``aws-sdk-sagemaker-runtime-http2`` (CRT
transport, HTTP/2 over TLS, SigV4, AWS event-stream framing) to
``https://runtime.sagemaker.{region}.amazonaws.com:8443``, and a sidecar in the endpoint relays
it to the container's WebSocket. This module is that front door and its sidecar, so the exact
deployed code path runs locally (``voicewire up --speech-link sagemaker``) and in tests:

- ``POST /endpoints/{EndpointName}/invocations-bidirectional-stream`` over HTTP/2 (TLS with the
  stack's own CA, ALPN ``h2``; a client without HTTP/2 gets a 400), the
  ``x-amzn-sagemaker-model-invocation-path`` and ``...-model-query-string`` headers honoured as
  SageMaker does;
- signatures are recomputed, as AWS does (``sigv4_verifier``): the request's SigV4 signature
  with the secret of an access key the stack issued, for this region and the ``sagemaker``
  service, within 5 minutes of the clock (403 ``MissingAuthenticationTokenException``,
  ``IncompleteSignatureException``, ``UnrecognizedClientException`` or
  ``InvalidSignatureException`` otherwise, with AWS's messages); then every request event's
  ``:chunk-signature``, each continuing the chain from the one before (seeded by the request's);
- each ``RequestPayloadPart`` goes to the container as one WebSocket frame (text for
  ``DataType`` UTF8, binary otherwise; fragments are passed as they are, never joined);
- each container frame comes back as a ``ResponsePayloadPart`` (UTF8 for text frames, BINARY
  for binary ones), and, as SageMaker may, often cut into ``PARTIAL`` parts: by default at
  random bytes from a seed the runtime logs (``fragment_seed`` replays it; ``partial_parts``),
  ``fragments=False`` for whole frames, ``fragment_bytes`` for a cut every n bytes;
- AWS's limits hold, each a named value in ``sagemaker_limits`` (AWS's where AWS documents one,
  a conservative choice where not): the container must accept the WebSocket within 250 ms
  (else 424 ``ModelError``), answer pings sent every 60 s (5 missed: ``ModelStreamError``
  ``StreamBroken``); a stream idle for 60 s or open for 30 min ends with a ``ModelStreamError``
  ``ModelInvocationTimeExceeded``; a request part over 512,000 bytes is an
  ``InternalStreamFailure``, a container frame over it arrives in ``PARTIAL`` parts;
- the container closing with 1000 ends the response stream; closing any other way, or failing,
  is a ``ModelStreamError`` event; the front door's own failures once the response has started
  (an unreadable request event, or one whose signature is missing or breaks the chain) are an
  ``InternalStreamFailure`` event; errors before the response are HTTP errors with
  ``x-amzn-errortype`` and the body the SDK's model reads (403 as above, 400
  ``InputValidationError``, 424 ``ModelError``; a first request event held before the answer
  is refused this way too, see ``initial_response`` below);
- the client ending its input stream ends the session at once, dropping answers still on their
  way (what SageMaker does: a client must keep its input open until the output is drained);
- when it answers (``initial_response``): AWS does not document whether SageMaker sends its
  response (the HTTP 200 and its headers, the event stream's initial response) as soon as the
  request is checked or only once the first request event has come. The Smithy event-stream
  design allows either, and a client must be able to send before the answer; AWS's samples for
  this API send first. So the front door does both: ``"at_once"`` answers once the request is
  checked and the container has accepted, ``"after_first_event"`` (the default, and ``voicewire
  up``'s: as strict as AWS could be) checks the request at once (a refusal of it is answered at
  once either way: 403, 400), then holds its answer until the first signed request event has
  come and its signature continued the chain, and only then opens the container's WebSocket
  (424 if it refuses), answers 200 and relays that event and the rest. While it holds, a request
  event it cannot accept is refused with an HTTP error, as before any response: a signature
  that does not continue the chain is AWS's 403 (``InvalidSignatureException``,
  ``IncompleteSignatureException``; ``{"message": ...}``, as for the request's signature), an
  unreadable event a 400 ``InputValidationError``. An input ended before any event is answered
  200 and the response stream ended at once, no container opened (there is nothing to relay,
  and SageMaker ends the container's session when the input ends).

Libraries rather than parsers of our own: ``h2`` for HTTP/2 (``http2_server``), botocore's
``EventStreamBuffer`` (decoding, with CRC checks) and ``smithy_aws_event_stream``'s
``EventMessage`` (encoding), websockets (the sidecar's client).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import enum
import json
import logging
import re
import socket
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from botocore.eventstream import EventStreamBuffer, EventStreamMessage, ParserError
from smithy_aws_event_stream.events import EventMessage
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

from voicewire_tools.local_stack.http2_server import ClientGone, Http1Answer, Http2Server, Stream
from voicewire_tools.local_stack.local_tls import LocalTls
from voicewire_tools.local_stack.partial_parts import Cutter, FragmentPolicy, pieces
from voicewire_tools.local_stack.sagemaker_limits import (
    BROKEN_ERROR_CODE,
    TIMEOUT_ERROR_CODE,
    SageMakerLimits,
)
from voicewire_tools.local_stack.sigv4_verifier import (
    SIGNED_EVENTS,
    AccessKey,
    EventChain,
    EventSignatureRejected,
    SignatureRejected,
    SigV4Verifier,
)

logger = logging.getLogger(__name__)

ROUTE = re.compile(r"^/endpoints/(?P<name>[^/]+)/invocations-bidirectional-stream$")
DEFAULT_INVOCATION_PATH = "invocations-bidirectional-stream"
VARIANT = "AllTraffic"
ACCOUNT = "000000000000"
EVENT_STREAM = "application/vnd.amazon.eventstream"
REGION = "us-east-1"  # where this front door is, unless told otherwise
# The chain a stream's request events must continue, set when its request is checked: the
# relay's tasks, started after that, inherit it (each stream is handled in a task of its own).
_EVENT_CHAIN: contextvars.ContextVar[EventChain] = contextvars.ContextVar("event_chain")
HTTP1_ANSWER = Http1Answer(
    400,
    "application/json",
    json.dumps({"Message": "this API is served over HTTP/2 only"}).encode(),
)


# When the front door sends its response (see the module's docstring).
InitialResponse = Literal["at_once", "after_first_event"]
INITIAL_RESPONSES: tuple[InitialResponse, ...] = ("at_once", "after_first_event")


@dataclass
class StreamFault:
    """A failure to inject into the next stream (tests): after ``after_parts`` response parts,
    a ``ModelStreamError`` (``kind="model"``) or an ``InternalStreamFailure``."""

    after_parts: int
    kind: Literal["model", "internal"]


@dataclass
class RuntimeCounters:
    streams_opened: int = 0  # streams that reached a container
    streams_refused: int = 0  # answered with an HTTP error
    request_parts: int = 0
    response_parts: int = 0  # container frames sent back (each as one part or more)
    partial_parts: int = 0  # parts marked PARTIAL: a frame cut into n parts counts n - 1


class _Ended(enum.Enum):
    CONTAINER_CLOSED = "the container closed the session"
    INPUT_ENDED = "the client ended its input stream"
    CLIENT_GONE = "the client went away"


class _StreamFailure(Exception):
    def __init__(
        self,
        kind: Literal["model", "internal"],
        message: str,
        error_code: str = "ModelStreamError",
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.error_code = error_code  # a ModelStreamError's ErrorCode


class _HttpError(Exception):
    def __init__(self, status: int, error_type: str, body: dict[str, Any]) -> None:
        super().__init__(f"{status} {error_type}")
        self.status, self.error_type, self.body = status, error_type, body


@dataclass
class LocalSageMakerRuntime:
    """The local front door's request handler (served by ``http2_server``). ``endpoints`` maps
    an endpoint name to its container's base WebSocket URL (``ws://127.0.0.1:8080``)."""

    endpoints: Mapping[str, str]
    # How container frames are cut into PARTIAL response parts (``partial_parts``): at random
    # by default, from ``fragment_seed`` (a new seed when None; logged either way), so every
    # reader of the response meets cut frames; ``fragments=False`` sends frames whole (cut only
    # at the size limit), ``fragment_bytes`` cuts every that many bytes instead.
    fragments: bool = True
    fragment_seed: int | None = None
    fragment_bytes: int | None = None
    # AWS's limits on the stream (``sagemaker_limits``); tests shrink them to cross one.
    limits: SageMakerLimits = field(default_factory=SageMakerLimits)
    # Whether the answer waits for the first request event (the strictest SageMaker could be).
    initial_response: InitialResponse = "after_first_event"
    # Whose signatures are good: by default one new key, which ``verifier.keys`` tells.
    verifier: SigV4Verifier = field(
        default_factory=lambda: SigV4Verifier.accepting([AccessKey.issue()], REGION)
    )
    counters: RuntimeCounters = field(default_factory=RuntimeCounters)
    _faults: list[StreamFault] = field(default_factory=list)
    fragment_policy: FragmentPolicy = field(init=False)

    def __post_init__(self) -> None:
        if self.initial_response not in INITIAL_RESPONSES:
            raise ValueError(f"initial_response must be one of {INITIAL_RESPONSES}")
        max_part = self.limits.max_response_part_bytes
        if self.fragment_bytes is not None:
            self.fragment_policy = FragmentPolicy(max_part, every_bytes=self.fragment_bytes)
        elif self.fragments:
            self.fragment_policy = FragmentPolicy.random(max_part, self.fragment_seed)
        else:
            self.fragment_policy = FragmentPolicy(max_part)
        # The seed is what replays a failure seen with random cuts: always in the log.
        logger.info("local SageMaker runtime: PARTIAL parts %s", self.fragment_policy.describe())

    def fail_next_stream(self, fault: StreamFault) -> None:
        self._faults.append(fault)

    async def handle(self, stream: Stream) -> None:
        """One ``InvokeEndpointWithBidirectionalStream`` call."""
        held: _Held | None = None
        try:
            container_url = self._check_request(stream)
            if self.initial_response == "after_first_event":
                held = await _first_event(stream)  # ClientGone: nobody to answer
                if held.first is None:
                    await _send_ok(stream)
                    await stream.end()
                    return
            container = await self._open_container(container_url)
        except _HttpError as error:
            self.counters.streams_refused += 1
            logger.info("refused %s: %s %s", stream.path, error.status, error.error_type)
            await _send_http_error(stream, error)
            return
        self.counters.streams_opened += 1
        fault = self._faults.pop(0) if self._faults else None
        await _send_ok(stream)
        await _Relay(self, stream, container, fault, held).run()

    # --- before the stream opens ----------------------------------------------------------

    def _check_request(self, stream: Stream) -> str:
        match = ROUTE.match(stream.path.split("?", 1)[0])
        if match is None:
            raise _HttpError(404, "UnknownOperationException", {"message": "no such operation"})
        if stream.method != "POST":
            raise _HttpError(405, "MethodNotAllowedException", {"message": "use POST"})
        headers = stream.headers
        _EVENT_CHAIN.set(_check_signature(stream, self.verifier))
        if not headers.get("content-type", "").startswith(EVENT_STREAM):
            raise _HttpError(
                400,
                "InputValidationError",
                {"Message": f"the request body must be {EVENT_STREAM}"},
            )
        name = match["name"]
        base_url = self.endpoints.get(name)
        if base_url is None:
            raise _HttpError(
                400,
                "InputValidationError",
                {
                    "Message": f"Endpoint {name} of account {ACCOUNT} not found.",
                    "ErrorCode": "ValidationError",
                },
            )
        variant = headers.get("x-amzn-sagemaker-target-variant")
        if variant not in (None, VARIANT):
            raise _HttpError(
                400,
                "InputValidationError",
                {"Message": f"Endpoint {name} has no production variant {variant}."},
            )
        path = headers.get("x-amzn-sagemaker-model-invocation-path", DEFAULT_INVOCATION_PATH)
        query = headers.get("x-amzn-sagemaker-model-query-string")
        return f"{base_url.rstrip('/')}/{path.lstrip('/')}" + (f"?{query}" if query else "")

    async def _open_container(self, url: str) -> ClientConnection:
        """The sidecar's WebSocket to the container: accepted within SageMaker's 250 ms, then
        pinged every 60 s (websockets answers and sends the pings; ``sagemaker_limits``)."""
        limits = self.limits
        try:
            return await connect(
                url,
                max_size=None,
                compression=None,
                open_timeout=limits.container_accept_seconds,
                ping_interval=limits.container_ping_interval_seconds,
                ping_timeout=limits.container_pong_timeout_seconds,
            )
        except InvalidStatus as error:
            status = error.response.status_code
            raise _HttpError(
                424,
                "ModelError",
                {
                    "Message": f"the model container refused the stream (HTTP {status})",
                    "OriginalStatusCode": status,
                    "OriginalMessage": error.response.body.decode("utf-8", "replace")[:500],
                    "ErrorCode": "ModelError",
                },
            ) from error
        except TimeoutError as error:
            accept_ms = limits.container_accept_seconds * 1000
            raise _HttpError(
                424,
                "ModelError",
                {
                    "Message": "the model container did not accept the WebSocket within "
                    f"{accept_ms:g} ms (SageMaker's container contract for bidirectional "
                    "streaming)",
                    "ErrorCode": "ModelError",
                },
            ) from error
        except (OSError, InvalidHandshake) as error:
            raise _HttpError(
                424,
                "ModelError",
                {
                    "Message": f"the model container did not accept the stream: {error}",
                    "ErrorCode": "ModelError",
                },
            ) from error


class _Relay:
    """One open stream: client events up to the container, container frames back down."""

    def __init__(
        self,
        runtime: LocalSageMakerRuntime,
        stream: Stream,
        container: ClientConnection,
        fault: StreamFault | None,
        held: _Held | None = None,
    ) -> None:
        self.runtime, self.stream = runtime, stream
        self.container, self.fault = container, fault
        self.held = held  # what the front door read before it answered
        self.counters = runtime.counters
        self.limits = runtime.limits
        self.cutter: Cutter = runtime.fragment_policy.for_stream()
        self._parts_sent = 0  # response parts of this stream (for an injected fault)
        self._opened = time.monotonic()
        self._last_part = self._opened  # a payload part either way: the idle clock

    async def run(self) -> None:
        # In order of precedence when more than one has ended: the container's end is what
        # the client is told, then the client's, then a limit's.
        tasks = [
            asyncio.create_task(self._downstream(), name="runtime-downstream"),
            asyncio.create_task(self._upstream(), name="runtime-upstream"),
            asyncio.create_task(self._watch_limits(), name="runtime-limits"),
        ]
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finished = next(task for task in tasks if task in done)
        for task in tasks:
            if task is not finished:
                task.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        outcome = results[tasks.index(finished)]
        # SageMaker ends the container's session whichever side ended first.
        with contextlib.suppress(Exception):
            await self.container.close(1000, "stream ended")
        if outcome is _Ended.CLIENT_GONE or isinstance(outcome, ClientGone):
            return
        try:
            if isinstance(outcome, _StreamFailure):
                await self._send_failure(outcome)
            elif isinstance(outcome, BaseException) and not isinstance(
                outcome, asyncio.CancelledError
            ):
                logger.exception("local SageMaker runtime failed", exc_info=outcome)
                await self._send_failure(_StreamFailure("internal", "the stream failed"))
            await self.stream.end()
        except ClientGone:  # the client left while we were ending: nothing more to tell it
            logger.debug("client gone before the stream ended")

    async def _upstream(self) -> _Ended:
        """Decode the request's signed events; forward each payload part to the container,
        starting with what was read before the answer (the first event, and whatever came
        after it in the same chunks)."""
        buffer = EventStreamBuffer()
        if self.held is not None:
            buffer = self.held.buffer
            if self.held.first is not None:
                await self._forward(self.held.first)
        while True:
            try:
                for envelope in buffer:
                    inner = _relayed(envelope)
                    if inner is None:
                        return _Ended.INPUT_ENDED  # the signed empty frame ends the input
                    await self._forward(inner)
            except ParserError as error:
                raise _StreamFailure("internal", f"unreadable request event: {error}") from None
            try:
                chunk = await self.stream.receive()
            except ClientGone:
                return _Ended.CLIENT_GONE
            if chunk is None:
                return _Ended.INPUT_ENDED
            buffer.add_data(chunk)

    async def _forward(self, event: EventStreamMessage) -> None:
        headers = event.headers
        if headers.get(":message-type") != "event" or headers.get(":event-type") != "PayloadPart":
            raise _StreamFailure("internal", f"unexpected request event {headers!r}")
        self.counters.request_parts += 1
        self._last_part = time.monotonic()
        payload = bytes(event.payload)
        limit = self.limits.max_request_part_bytes
        if len(payload) > limit:
            # Refused by the front door, so an InternalStreamFailure: the response has started,
            # and the API model has no other front-door error for its response stream.
            raise _StreamFailure(
                "internal",
                f"a request payload part of {len(payload)} bytes is over the limit of "
                f"{limit} bytes",
            )
        # DataType absent means BINARY, as on SageMaker.
        message: str | bytes = payload
        if headers.get("DataType") == "UTF8":
            try:
                message = payload.decode("utf-8")
            except UnicodeDecodeError:
                raise _StreamFailure("internal", "a UTF8 payload part is not UTF-8") from None
        try:
            await self.container.send(message)
        except ConnectionClosed as closed:
            raise _StreamFailure(
                "model", f"the model container closed the stream ({closed})"
            ) from None

    async def _downstream(self) -> _Ended:
        """Every container frame back as a ResponsePayloadPart event, in order."""
        while True:
            try:
                frame = await self.container.recv()
            except ConnectionClosed as closed:
                code = closed.rcvd.code if closed.rcvd is not None else 1006
                if code == 1000:
                    return _Ended.CONTAINER_CLOSED
                if _missed_pongs(closed):
                    limits = self.limits
                    raise _StreamFailure(
                        "model",
                        f"the model container answered none of {limits.container_missed_pongs} "
                        f"WebSocket pings ({limits.container_ping_interval_seconds:g} s apart): "
                        "SageMaker closed its connection",
                        BROKEN_ERROR_CODE,
                    ) from None
                reason = closed.rcvd.reason if closed.rcvd is not None else "no close frame"
                raise _StreamFailure(
                    "model", f"the model container closed the stream ({code}: {reason})"
                ) from None
            if self.fault is not None and self._parts_sent >= self.fault.after_parts:
                fault, self.fault = self.fault, None
                raise _StreamFailure(fault.kind, f"injected {fault.kind} stream failure")
            text = isinstance(frame, str)
            data = frame.encode("utf-8") if isinstance(frame, str) else frame
            max_part = self.limits.max_response_part_bytes
            for piece, complete in pieces(data, self.cutter.cuts(len(data)), max_part):
                headers: dict[str, Any] = {
                    ":message-type": "event",
                    ":event-type": "PayloadPart",
                    ":content-type": "application/octet-stream",
                    "DataType": "UTF8" if text else "BINARY",
                }
                if not complete:
                    headers["CompletionState"] = "PARTIAL"
                    self.counters.partial_parts += 1
                await self._send_event(EventMessage(headers=headers, payload=piece))
                self._last_part = time.monotonic()
            self._parts_sent += 1
            self.counters.response_parts += 1

    async def _watch_limits(self) -> None:
        """End the stream at SageMaker's session length, or once no payload part has gone
        either way for the idle limit (``sagemaker_limits``: neither is documented by AWS, nor
        what the client is told; here a ModelStreamError, as AWS's other streaming API reports
        a time limit)."""
        limits = self.limits
        session_end = self._opened + limits.max_session_seconds
        while True:
            now = time.monotonic()
            if now >= session_end:
                raise _StreamFailure(
                    "model",
                    f"the stream reached the maximum session length of "
                    f"{limits.max_session_seconds:g} s",
                    TIMEOUT_ERROR_CODE,
                )
            idle_end = self._last_part + limits.stream_idle_seconds
            if now >= idle_end:
                raise _StreamFailure(
                    "model",
                    f"no payload part either way for {limits.stream_idle_seconds:g} s: "
                    "the idle stream was closed",
                    TIMEOUT_ERROR_CODE,
                )
            await asyncio.sleep(min(session_end, idle_end) - now)

    async def _send_failure(self, failure: _StreamFailure) -> None:
        if failure.kind == "model":
            body = {"Message": failure.message, "ErrorCode": failure.error_code}
            exception_type = "ModelStreamError"
        else:
            body = {"Message": failure.message}
            exception_type = "InternalStreamFailure"
        await self._send_event(
            EventMessage(
                headers={
                    ":message-type": "exception",
                    ":exception-type": exception_type,
                    ":content-type": "application/json",
                },
                payload=json.dumps(body).encode(),
            )
        )

    async def _send_event(self, event: EventMessage) -> None:
        await self.stream.send_data(event.encode())


def _check_signature(stream: Stream, verifier: SigV4Verifier) -> EventChain:
    """The request's signature, recomputed; AWS's common errors (403, ``{"message": ...}``, the
    shape of a restJson1 service's) if it is not good. Authentication comes before validation,
    as on AWS."""
    headers = stream.headers
    try:
        chain = verifier.verify_request(stream.method, stream.path, headers)
    except SignatureRejected as rejected:
        raise _HttpError(
            rejected.status, rejected.error_type, {"message": rejected.message}
        ) from None
    if headers.get("x-amz-content-sha256") != SIGNED_EVENTS:
        raise _HttpError(
            400,
            "InputValidationError",
            {"Message": f"x-amz-content-sha256 must be {SIGNED_EVENTS} (signed events)"},
        )
    return chain


@dataclass
class _Held:
    """What the front door read before it answered (``after_first_event``): the body's decoder,
    holding whatever came after the first event, and that event (None: the input ended first)."""

    buffer: EventStreamBuffer
    first: EventStreamMessage | None


class _UnreadableEvent(Exception):
    """A signed envelope that does not hold exactly one event (or came with no chain to check):
    refused as a malformed request before the answer, as a stream failure after it."""


async def _first_event(stream: Stream) -> _Held:
    """Read the request body up to its first signed event, checked as every event is.

    Nothing has been answered yet, so what is wrong with it is an HTTP error, as AWS answers
    before a response: a signature that does not continue the chain is AWS's 403 with its
    error type and ``{"message": ...}`` (the shape of the request signature's refusals,
    ``_check_signature``), an unreadable event a 400 ``InputValidationError`` (the module's
    other refusals of a malformed request). ``ClientGone`` if the client leaves first."""
    buffer = EventStreamBuffer()
    while (chunk := await stream.receive()) is not None:
        buffer.add_data(chunk)
        try:
            for envelope in buffer:
                return _Held(buffer, _unwrap_signed(envelope))
        except EventSignatureRejected as rejected:
            raise _HttpError(403, rejected.error_type, {"message": rejected.message}) from None
        except (ParserError, _UnreadableEvent) as error:
            raise _HttpError(
                400, "InputValidationError", {"Message": f"unreadable request event: {error}"}
            ) from None
    return _Held(buffer, None)


def _relayed(envelope: EventStreamMessage) -> EventStreamMessage | None:
    """``_unwrap_signed`` once the response has started: what is wrong ends the stream.

    A signature that does not continue the stream's chain ends it with an
    ``InternalStreamFailure`` event naming AWS's error (``InvalidSignatureException: ...``).
    Why that shape: once the response has started, SageMaker can only answer with an event of
    its response stream, and the API model's only exceptions there are ``ModelStreamError`` (the
    container's) and ``InternalStreamFailure`` (the front door's own). An exception type the
    model does not list fails the SDK's event decoder (``smithy_aws_event_stream``: a
    ``KeyError``), not as a typed error. (Transcribe, whose stream model has
    ``BadRequestException``, sends a failed event signature as that modelled exception.)"""
    try:
        return _unwrap_signed(envelope)
    except EventSignatureRejected as rejected:
        raise _StreamFailure("internal", f"{rejected.error_type}: {rejected.message}") from None
    except _UnreadableEvent as unreadable:
        raise _StreamFailure("internal", str(unreadable)) from None


def _unwrap_signed(envelope: EventStreamMessage) -> EventStreamMessage | None:
    """A signed request event is an envelope (``:date``, ``:chunk-signature``) around the
    event itself; the envelope with an empty payload ends the input stream. Raises
    ``EventSignatureRejected`` for a signature that does not continue the stream's chain,
    ``_UnreadableEvent`` for an envelope that does not hold one event (or no chain to check)."""
    try:
        _EVENT_CHAIN.get().verify(envelope)
    except LookupError:  # no checked request: nothing to chain to
        raise _UnreadableEvent("a request event came without a signed request") from None
    if not envelope.payload:
        return None
    inner = EventStreamBuffer()
    inner.add_data(bytes(envelope.payload))
    messages = list(inner)
    if len(messages) != 1:
        raise _UnreadableEvent("a signed envelope must hold exactly one event")
    return messages[0]


def _missed_pongs(closed: ConnectionClosed) -> bool:
    """Whether the sidecar gave up on the container for unanswered pings: websockets fails the
    connection with 1011 "keepalive ping timeout", before any close of the container's."""
    return (
        closed.sent is not None
        and not closed.rcvd_then_sent
        and closed.sent.code == 1011
        and "keepalive" in closed.sent.reason
    )


async def _send_ok(stream: Stream) -> None:
    """The response's headers: the stream is open (its initial response, which has no body)."""
    await stream.send_headers(
        200,
        [
            ("content-type", EVENT_STREAM),
            ("x-amzn-invoked-production-variant", VARIANT),
            ("x-amzn-requestid", str(uuid.uuid4())),
        ],
    )


async def _send_http_error(stream: Stream, error: _HttpError) -> None:
    await stream.send_headers(
        error.status,
        [
            ("content-type", "application/json"),
            ("x-amzn-errortype", error.error_type),
            ("x-amzn-requestid", str(uuid.uuid4())),
        ],
    )
    await stream.send_data(json.dumps(error.body).encode())
    await stream.end()


# --- running it -------------------------------------------------------------------------------


class RunningRuntime:
    """The runtime served on its own thread and event loop."""

    def __init__(self, runtime: LocalSageMakerRuntime, sock: socket.socket, tls: LocalTls) -> None:
        self.runtime = runtime
        self.tls = tls
        host, self.port = sock.getsockname()[:2]
        self.host = "localhost" if host in ("127.0.0.1", "::1") else host
        # Listening now, so a client that comes before the loop is up waits in the backlog
        # instead of being refused.
        sock.listen(128)
        self._server = Http2Server(runtime.handle, sock, tls.server_file, HTTP1_ANSWER)
        self._loop = asyncio.new_event_loop()
        self._stopping: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._serve, name="sagemaker-runtime", daemon=True)
        self._started = threading.Event()

    @property
    def endpoint_url(self) -> str:
        """What the SDK's ``endpoint_uri`` is set to in local mode."""
        return f"https://{self.host}:{self.port}"

    def start(self) -> RunningRuntime:
        self._thread.start()
        if not self._started.wait(15):
            raise RuntimeError("the local SageMaker runtime did not start")
        return self

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)

        async def serve() -> None:
            self._stopping = asyncio.Event()
            await self._server.start()
            self._started.set()
            await self._stopping.wait()
            await self._server.stop()
            # What a connection cut short left running (its streams' handlers): ended here, as
            # asyncio.run ends its tasks, not destroyed pending when the loop closes.
            rest = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
            for task in rest:
                task.cancel()
            await asyncio.gather(*rest, return_exceptions=True)

        self._loop.run_until_complete(serve())
        self._loop.close()

    def stop(self) -> None:
        if self._stopping is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stopping.set)
            self._thread.join(10)


def start_runtime(
    endpoints: Mapping[str, str], sock: socket.socket, tls: LocalTls, **options: Any
) -> RunningRuntime:
    """Serve a ``LocalSageMakerRuntime`` for ``endpoints`` on ``sock`` (bound, not listening)."""
    started = time.perf_counter()
    running = RunningRuntime(LocalSageMakerRuntime(endpoints, **options), sock, tls).start()
    logger.debug("local SageMaker runtime up in %.0f ms", (time.perf_counter() - started) * 1000)
    return running
