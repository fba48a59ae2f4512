"""The speech link through SageMaker's bidirectional streaming API (the deployed path).

``invoke_endpoint_with_bidirectional_stream`` opens one duplex AWS event stream over HTTP/2
(SigV4, service ``sagemaker``, each request event signed); a sidecar in the endpoint relays it to
the container's WebSocket. Each message goes up as a ``RequestPayloadPart`` (``data_type="UTF8"``,
so the container gets a text frame); every frame the container sends comes back as a
``ResponsePayloadPart``: ``UTF8`` parts are the container's text (control) frames, the others
bytes that the control-frame rule sorts. A part marked ``PARTIAL`` is joined with the ones after
it up to the part marked ``COMPLETE``: SageMaker may fragment a frame and does not join the
pieces for its caller.

Sending comes before SageMaker's answer. ``connect`` starts the stream (the client built, the
request signed) and returns without waiting for the HTTP response (the initial response): the
Smithy event-stream design lets a client send before it, because some services answer only once
the first event has come, and AWS's samples for this API send first. AWS does not document which
SageMaker does; a transport that waited for the answer before sending would, against a front door
that waits for the first event, never open (every turn ``connect_failed`` after ``open_timeout``).
So the answer is awaited by a task of its own, and ``receive`` waits for it before the first
frame: a refusal (HTTP 403, 400, 424...) surfaces there, to the session's reader, as
``SpeechStreamError("connect_failed", "cannot open ...")``, and ``send_message`` raises the same
error once it is known. "No answer" is counted from the first event sent (``open_timeout``), not
from ``connect``: a session is opened while the model still writes the turn's first sentence,
which may take longer than that, and a front door that answers only after the first event owes
nothing before it. This also takes a round trip off the first request's path: the first
text goes up with the request instead of after the answer (the TLS and HTTP/2 set-up, the
front door's checks and its sidecar's WebSocket to the container overlap with it).

Mid-stream failures arrive as events the SDK raises from ``receive()``: ``ModelStreamError`` (the
container failed or went away) and ``InternalStreamFailure`` (SageMaker itself); both become a
``SpeechStreamError`` with a stable code.

The input stream is ended only once every answer has arrived (``SpeechSession.close`` waits for
them, then calls ``close``): ending it earlier drops the answers still on their way. One SDK
client per session, closed with it: the client's HTTP/2 connection is not shared between
sessions (see ``sagemaker_client``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import boto3
from aws_sdk_sagemaker_runtime_http2.models import (
    InternalStreamFailure,
    InvokeEndpointWithBidirectionalStreamInput,
    ModelStreamError,
    RequestPayloadPart,
    RequestStreamEventPayloadPart,
    ResponseStreamEventInternalStreamFailure,
    ResponseStreamEventModelStreamError,
    ResponseStreamEventPayloadPart,
)

from voicewire.speech_link.errors import SpeechStreamError
from voicewire.speech_link.sagemaker_client import (
    Boto3CredentialsResolver,
    PinnedCredentials,
    UnmodeledServiceError,
    build_client,
    default_region,
)

logger = logging.getLogger(__name__)

CLOSE_STEP_SECONDS = 2.0  # how long one step of closing (ending input, letting go) may take


class SageMakerTransport:
    def __init__(
        self,
        endpoint_name: str,
        region: str | None = None,
        *,
        endpoint_uri: str | None = None,
        trusted_ca_file: Path | None = None,
        boto3_session: boto3.Session | None = None,
        open_timeout: float = 10,
    ) -> None:
        """``endpoint_uri`` and ``trusted_ca_file`` point the production client at the local
        SageMaker runtime; leave them out for AWS. Credentials come from ``boto3_session``'s
        chain (default: the process's shared session). ``open_timeout``: for starting the stream,
        and from the first event sent to SageMaker's answer."""
        self.endpoint_name = endpoint_name
        self.region = region or default_region()
        self.endpoint_uri = endpoint_uri
        self.trusted_ca_file = trusted_ca_file
        self.credentials = Boto3CredentialsResolver(boto3_session)
        self.open_timeout = open_timeout
        self._client: Any = None
        self._stream: Any = None
        # SageMaker's answer (the initial response and the output stream), awaited from connect.
        self._answer: asyncio.Task[Any] | None = None
        self._first_sent_at: float | None = None  # loop time: SageMaker owes its answer from it
        self._sent = asyncio.Event()
        self._refusal: SpeechStreamError | None = None  # connect_failed, once known
        self._output: Any = None
        self._closed = False
        self._partial = bytearray()
        self._output_ended = asyncio.Event()  # SageMaker ended the response stream
        self._receiving = False

    @property
    def target(self) -> str:
        return f"SageMaker endpoint {self.endpoint_name!r}"

    async def connect(self) -> None:
        """Start the stream; returns before SageMaker answers (see the module's docstring)."""
        try:
            async with asyncio.timeout(self.open_timeout):
                # The identity that signs the request signs every event of its stream too.
                identity = await self.credentials.get_identity(properties={})
                self._client = await build_client(
                    self.region,
                    endpoint_uri=self.endpoint_uri,
                    trusted_ca_file=self.trusted_ca_file,
                    credentials=PinnedCredentials(identity),
                )
                self._stream = await self._client.invoke_endpoint_with_bidirectional_stream(
                    InvokeEndpointWithBidirectionalStreamInput(endpoint_name=self.endpoint_name)
                )
        except SpeechStreamError:
            await self.close()
            raise
        except Exception as error:  # the SDK raises many kinds; all mean "not open"
            await self.close()
            raise self._cannot_open(error) from error
        self._answer = asyncio.create_task(
            self._stream.await_output(), name="sagemaker-initial-response"
        )
        # Its outcome is read by receive or send_message; one closed before either looked
        # must not be logged as "never retrieved".
        self._answer.add_done_callback(_retrieve)

    async def send_message(self, payload: bytes) -> None:
        if self._refusal is not None:
            raise self._refusal
        stream, answer = self._stream, self._answer
        if stream is None:
            raise SpeechStreamError("not_connected", "the session is not open")
        if answer is not None and answer.done():
            self._check_answer(answer)  # refused: say so rather than send into a dead stream
        event = RequestStreamEventPayloadPart(
            value=RequestPayloadPart(bytes_=payload, data_type="UTF8")
        )
        if self._first_sent_at is None:
            self._first_sent_at = asyncio.get_running_loop().time()
            self._sent.set()
        try:
            await stream.input_stream.send(event)
        except Exception as error:
            # A refusal may be what broke the stream, its answer still on its way: it is the
            # error to tell, not the failed write it caused.
            if answer is not None and self._output is None and not self._closed:
                with contextlib.suppress(TimeoutError, SpeechStreamError):
                    await self._answered(answer, within=CLOSE_STEP_SECONDS)
                if self._refusal is not None:
                    # Its cause stays SageMaker's answer, not the write it failed.
                    raise self._refusal from self._refusal.__cause__
            raise SpeechStreamError("connection_closed", _describe(error)) from error

    async def receive(self) -> str | bytes | None:
        output = self._output
        if output is None:
            if self._answer is None:
                raise SpeechStreamError("not_connected", "the session is not open")
            output = await self._answered(self._answer)
            if output is None:
                return None  # closed before SageMaker answered: the stream is over
        while True:
            self._receiving = True
            try:
                event = await output.receive()
            except ModelStreamError as error:
                self._output_ended.set()
                raise _model_stream_error(error) from error
            except InternalStreamFailure as error:
                self._output_ended.set()
                raise _internal_stream_failure(error) from error
            except Exception as error:
                self._output_ended.set()
                raise SpeechStreamError("connection_closed", _describe(error)) from error
            finally:
                self._receiving = False
            match event:
                case None:
                    self._output_ended.set()
                    return None
                case ResponseStreamEventPayloadPart(value=part):
                    self._partial += part.bytes_ or b""
                    if part.completion_state == "PARTIAL":
                        continue
                    frame, self._partial = bytes(self._partial), bytearray()
                    if part.data_type == "UTF8":
                        with contextlib.suppress(UnicodeDecodeError):
                            return frame.decode("utf-8")
                    return frame
                # Raised by today's SDK, but a union member all the same: handle both.
                case ResponseStreamEventModelStreamError(value=error):
                    raise _model_stream_error(error)
                case ResponseStreamEventInternalStreamFailure(value=error):
                    raise _internal_stream_failure(error)
                case _:
                    logger.warning("ignoring an unknown response stream event %r", event)

    async def close(self, graceful: bool = True) -> None:
        """End the input stream, (gracefully: let SageMaker end the response,) release the
        connection.

        Safe to call more than once, and bounded in time, SageMaker's answer come or not. The
        input is ended even when the response already has, or SageMaker refused the stream:
        left open, awscrt's body writer would wait for data forever (its expected failure is
        collected by ``DuplexCRTClient``). Closing the client closes the connection, which ends
        any read under way.

        An answer not yet come is waited for (a moment) once the input has ended: SageMaker
        answers an ended input, whether it answers at once or after the first event. Only a
        front door that stays silent leaves it to be cancelled: awscrt never resolves the
        response of a stream that failed before its headers came, so closing the connection
        does not end that wait.
        """
        stream, output, client, answer = self._stream, self._output, self._client, self._answer
        self._stream = self._output = self._client = None
        self._closed = True
        if stream is not None:
            await _bounded(stream.input_stream.close())
            if answer is not None and not answer.done():
                await _bounded(asyncio.wait({answer}))
            if graceful and self._receiving and not self._output_ended.is_set():
                # The session's reader will see the end: give SageMaker a moment to send it.
                await _bounded(self._output_ended.wait())
        if output is None and answer is not None and answer.done():
            output = _output_of(answer)
        if output is not None:
            await _bounded(output.close())
        if client is not None:
            await _bounded(client.close())
        if answer is not None and not answer.done():
            # Its connection closed, nothing will come (nor resolve it): cancelling the wait is
            # safe now, the CRT having no stream left to answer on.
            answer.cancel()
            await _bounded(asyncio.wait({answer}))

    async def _answered(self, answer: asyncio.Task[Any], within: float | None = None) -> Any:
        """The output stream once SageMaker has answered; None if the transport was closed
        first. Raises (and keeps) ``connect_failed`` for a refusal, or for no answer ``within``
        seconds (by default: ``open_timeout`` after the first event sent; none sent yet, no
        limit: nothing is owed, and nothing waits on the answer but the session's reader)."""
        loop = asyncio.get_running_loop()
        deadline = None if within is None else loop.time() + within
        while not answer.done() and not self._closed:
            if deadline is None and self._first_sent_at is not None:
                deadline = self._first_sent_at + self.open_timeout
            waiting: set[asyncio.Future[Any]] = {answer}
            first_send = None
            if deadline is None:  # until the answer, or the first send starts the clock
                first_send = asyncio.ensure_future(self._sent.wait())
                waiting.add(first_send)
            try:
                # asyncio.wait, not wait_for: a wait that ends (or is cancelled) leaves the
                # answer's task be.
                timeout = None if deadline is None else max(0.0, deadline - loop.time())
                await asyncio.wait(waiting, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            finally:
                if first_send is not None:
                    first_send.cancel()
            if deadline is not None and loop.time() >= deadline:
                break
        if self._closed:
            return None
        if not answer.done():
            if self._refusal is None:
                self._refusal = self._cannot_open(TimeoutError())
                self._refusal.__cause__ = TimeoutError(f"no answer in {self.open_timeout:g} s")
            raise self._refusal
        self._check_answer(answer)
        if self._output is None:
            self._output = _output_of(answer)
        return self._output

    def _check_answer(self, answer: asyncio.Task[Any]) -> None:
        """Raises (and keeps) ``connect_failed`` if SageMaker's answer was a refusal."""
        error = None if answer.cancelled() else answer.exception()
        if answer.cancelled() or error is not None:
            if self._refusal is None:
                self._refusal = self._cannot_open(error or asyncio.CancelledError())
                self._refusal.__cause__ = error
            raise self._refusal

    def _cannot_open(self, error: BaseException) -> SpeechStreamError:
        reason = "timed out" if isinstance(error, TimeoutError) else _describe(error)
        return SpeechStreamError("connect_failed", f"cannot open {self.target}: {reason}")


def _output_of(answer: asyncio.Task[Any]) -> Any:
    """The output stream of an answer that came, else None."""
    if answer.cancelled() or answer.exception() is not None:
        return None
    _, output = answer.result()
    return output


def _retrieve(answer: asyncio.Task[Any]) -> None:
    if not answer.cancelled():
        answer.exception()


async def _bounded(step: Awaitable[object]) -> None:
    """One step of closing: errors mean it is already closed; a hang is cut short."""
    with contextlib.suppress(Exception):
        await asyncio.wait_for(step, CLOSE_STEP_SECONDS)


def _model_stream_error(error: ModelStreamError) -> SpeechStreamError:
    detail = error.message or "the model container's stream failed"
    if error.error_code:
        detail = f"{detail} ({error.error_code})"
    return SpeechStreamError("model_stream_error", detail)


def _internal_stream_failure(error: InternalStreamFailure) -> SpeechStreamError:
    detail = error.message or "SageMaker's stream failed"
    return SpeechStreamError("internal_stream_failure", detail)


def _describe(error: BaseException) -> str:
    text = str(error) or repr(error)
    if isinstance(error, UnmodeledServiceError):
        return text  # "403 InvalidSignatureException: Signature expired: ..."
    return f"{type(error).__name__}: {text}"
