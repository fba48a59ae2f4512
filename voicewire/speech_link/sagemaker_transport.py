"""The speech link through SageMaker's bidirectional streaming API (the deployed path).

``aws-sdk-sagemaker-runtime-http2``'s ``invoke_endpoint_with_bidirectional_stream`` opens one
duplex event stream to ``https://runtime.sagemaker.{region}.amazonaws.com:8443`` (SigV4, service
``sagemaker``); a sidecar in the endpoint relays it to the container's WebSocket. Each message
goes up as a ``RequestPayloadPart`` (``data_type="UTF8"``); every frame the container sends comes
back as a ``ResponsePayloadPart`` of bytes, so the control-frame rule sorts JSON from audio.

Two details the SDK leaves to its caller:
- credentials: its default resolver reads environment variables only, so a Lambda or EC2 role
  would be ignored; ``Boto3CredentialsResolver`` takes them from boto3's standard chain;
- the input stream stays open until the output is drained: closing it right after the last
  send drops the connection before the container has read it.
One client per session: the SDK's connection map is not safe to share between sessions.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import boto3
from aws_sdk_sagemaker_runtime_http2.client import AsyncSageMakerRuntimeHTTP2Client
from aws_sdk_sagemaker_runtime_http2.config import AsyncSageMakerRuntimeHTTP2Config
from aws_sdk_sagemaker_runtime_http2.models import (
    InvokeEndpointWithBidirectionalStreamInput,
    RequestPayloadPart,
    RequestStreamEventPayloadPart,
    ResponseStreamEventInternalStreamFailure,
    ResponseStreamEventModelStreamError,
    ResponseStreamEventPayloadPart,
)
from smithy_aws_core.identity import AWSCredentialsIdentity, AWSIdentityProperties
from smithy_core.aio.interfaces.identity import IdentityResolver

from voicewire.speech_link.errors import SpeechStreamError

logger = logging.getLogger(__name__)


def runtime_endpoint(region: str) -> str:
    return f"https://runtime.sagemaker.{region}.amazonaws.com:8443"


class Boto3CredentialsResolver(IdentityResolver[AWSCredentialsIdentity, AWSIdentityProperties]):
    """SDK credentials from boto3's chain: environment, profiles, container and instance roles."""

    def __init__(self, session: boto3.Session | None = None) -> None:
        self._session = session or boto3.Session()

    async def get_identity(self, *, properties: AWSIdentityProperties) -> AWSCredentialsIdentity:
        credentials = self._session.get_credentials()
        if credentials is None:
            raise SpeechStreamError("no_credentials", "boto3 found no AWS credentials")
        # Refreshable role credentials may call STS or the metadata service: off the loop.
        frozen = await asyncio.to_thread(credentials.get_frozen_credentials)
        return AWSCredentialsIdentity(
            access_key_id=frozen.access_key,
            secret_access_key=frozen.secret_key,
            session_token=frozen.token,
        )


async def default_client(region: str) -> AsyncSageMakerRuntimeHTTP2Client:
    config = await AsyncSageMakerRuntimeHTTP2Config.resolve(
        endpoint_uri=runtime_endpoint(region),
        region=region,
        aws_credentials_identity_resolver=Boto3CredentialsResolver(),
    )
    return AsyncSageMakerRuntimeHTTP2Client(config=config)


class SageMakerTransport:
    def __init__(
        self, endpoint_name: str, region: str | None = None, client: Any | None = None
    ) -> None:
        """``client`` replaces the SDK client (tests); by default one is made per session."""
        self.endpoint_name = endpoint_name
        self.region = region or boto3.Session().region_name or "us-east-1"
        self._client = client
        self._stream: Any = None
        self._output: Any = None

    async def connect(self) -> None:
        if self._client is None:
            self._client = await default_client(self.region)
        try:
            self._stream = await self._client.invoke_endpoint_with_bidirectional_stream(
                InvokeEndpointWithBidirectionalStreamInput(endpoint_name=self.endpoint_name)
            )
        except Exception as error:
            raise SpeechStreamError(
                "connect_failed", f"cannot open endpoint {self.endpoint_name!r}: {error}"
            ) from error

    async def send_message(self, payload: bytes) -> None:
        event = RequestStreamEventPayloadPart(
            value=RequestPayloadPart(bytes_=payload, data_type="UTF8")
        )
        try:
            await self._stream.input_stream.send(event)
        except Exception as error:
            raise SpeechStreamError("connection_closed", str(error)) from error

    async def receive(self) -> str | bytes | None:
        if self._output is None:
            _, self._output = await self._stream.await_output()
        while True:
            try:
                event = await self._output.receive()
            except Exception as error:
                raise SpeechStreamError("connection_closed", str(error)) from error
            match event:
                case None:
                    return None
                case ResponseStreamEventPayloadPart(value=part):
                    return part.bytes_ or b""  # the control-frame rule tells JSON from audio
                case ResponseStreamEventModelStreamError(value=error):
                    raise SpeechStreamError(
                        "model_stream_error", error.message or "the model's stream failed"
                    )
                case ResponseStreamEventInternalStreamFailure(value=error):
                    raise SpeechStreamError(
                        "internal_stream_failure", error.message or "SageMaker's stream failed"
                    )
                case _:
                    logger.warning("ignoring an unknown response stream event %r", event)

    async def close(self) -> None:
        """Close the input side only; the output is drained by the session's reader."""
        if self._stream is not None:
            await self._stream.input_stream.close()

    async def abort(self) -> None:
        if self._stream is not None:
            try:
                await self._stream.close()
            except Exception:  # already gone: nothing left to release
                logger.debug("closing the SageMaker stream failed", exc_info=True)
