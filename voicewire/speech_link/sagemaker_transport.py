"""The speech link through SageMaker's bidirectional streaming API (the deployed path).

``invoke_endpoint_with_bidirectional_stream`` opens one duplex AWS event stream over HTTP/2
(SigV4, service ``sagemaker``, each request event signed); a sidecar in the endpoint relays it to
the container's WebSocket. Each message goes up as a ``RequestPayloadPart`` (``data_type="UTF8"``,
so the container gets a text frame); every frame the container sends comes back as a
``ResponsePayloadPart``: ``UTF8`` parts are the container's text (control) frames, the others
bytes that the control-frame rule sorts. A part marked ``PARTIAL`` is joined with the ones after
it up to the part marked ``COMPLETE``: SageMaker may fragment a frame and does not join the
pieces for its caller.

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
        chain (default: the process's shared session)."""
        self.endpoint_name = endpoint_name
        self.region = region or default_region()
        self.endpoint_uri = endpoint_uri
        self.trusted_ca_file = trusted_ca_file
        self.credentials = Boto3CredentialsResolver(boto3_session)
        self.open_timeout = open_timeout
        self._client: Any = None
        self._stream: Any = None
        self._output: Any = None
        self._partial = bytearray()
        self._output_ended = asyncio.Event()  # SageMaker ended the response stream
        self._receiving = False

    @property
    def target(self) -> str:
        return f"SageMaker endpoint {self.endpoint_name!r}"

    async def connect(self) -> None:
        """Open the stream and wait for SageMaker's answer (the container has accepted it)."""
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
                _, self._output = await self._stream.await_output()
        except SpeechStreamError:
            await self.close()
            raise
        except Exception as error:  # the SDK raises many kinds; all mean "not open"
            await self.close()
            reason = "timed out" if isinstance(error, TimeoutError) else _describe(error)
            raise SpeechStreamError(
                "connect_failed", f"cannot open {self.target}: {reason}"
            ) from error

    async def send_message(self, payload: bytes) -> None:
        if self._stream is None:
            raise SpeechStreamError("not_connected", "the session is not open")
        event = RequestStreamEventPayloadPart(
            value=RequestPayloadPart(bytes_=payload, data_type="UTF8")
        )
        try:
            await self._stream.input_stream.send(event)
        except Exception as error:
            raise SpeechStreamError("connection_closed", _describe(error)) from error

    async def receive(self) -> str | bytes | None:
        if self._output is None:
            raise SpeechStreamError("not_connected", "the session is not open")
        output = self._output
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

        Safe to call more than once, and bounded in time. The input is ended even when the
        response already has, or SageMaker refused the stream: left open, awscrt's body writer
        would wait for data forever (its expected failure is collected by ``DuplexCRTClient``).
        Closing the client closes the connection, which ends any read under way.
        """
        stream, output, client = self._stream, self._output, self._client
        self._stream = self._output = self._client = None
        if stream is not None:
            await _bounded(stream.input_stream.close())
            if graceful and self._receiving and not self._output_ended.is_set():
                # The session's reader will see the end: give SageMaker a moment to send it.
                await _bounded(self._output_ended.wait())
        if output is not None:
            await _bounded(output.close())
        if client is not None:
            await _bounded(client.close())


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
