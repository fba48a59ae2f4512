"""Building the SageMaker runtime HTTP/2 client the way it must be built to open a stream.

``aws-sdk-sagemaker-runtime-http2`` leaves three things to its caller, each of which fails a
deployed turn if left at the SDK's default:

- **the transport**: the default ``AIOHTTPClient`` declares no duplex support, and
  ``invoke_endpoint_with_bidirectional_stream`` refuses it before any traffic
  (``UnsupportedTransportError``). ``smithy_http.aio.crt.AWSCRTHTTPClient`` (the package's
  ``awscrt`` extra) negotiates HTTP/2 over TLS and streams both ways at once;
- **credentials**: the SDK's resolver reads environment variables only, so a Lambda or EC2 role
  would be ignored; ``Boto3CredentialsResolver`` takes them from boto3's standard chain;
- **the endpoint**: ``https://runtime.sagemaker.{region}.amazonaws.com:8443``, not the
  HTTPS port the rest of SageMaker uses.

Two more things are fixed here because they cost a person a diagnosis. An error answer that the
service's model does not list (AWS's common errors: ``InvalidSignatureException``,
``UnrecognizedClientException``, throttling) reaches the caller as a bare ``CallError`` that
names the type but drops AWS's message ("Signature expired: ..."); ``UnmodeledServiceError``
keeps the status, type and message. And a stream's events are signed with the one identity that
signed its request (``PinnedCredentials``): the request's signature seeds the event signature
chain, which AWS checks with the request's key, while the SDK asks its resolver again for every
event, so credentials refreshed mid-stream (a role's, every hour) would break the chain.

Each session gets its own client (its own HTTP/2 connection: streams of several sessions
multiplexed on one CRT connection stall each other's small writes, and one stream's end can take
the others down). What is costly and safe to share is shared per process: boto3's session (its
credential chain, 10-50 ms to build), the CRT's I/O event loop (a native thread) and its TLS
context (~15 ms to load the trust store; see ``DuplexCRTClient``).

``trusted_ca_file`` exists for the local SageMaker runtime only (``voicewire up --speech-link
sagemaker``): the CRT client builds its TLS context from the system trust store in its
constructor and offers no option to change it, so ``LocalCATrustingCRTClient`` replaces that one
context. Production code never passes it.
"""

from __future__ import annotations

import asyncio
import json
import logging
from copy import deepcopy
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Self

import boto3
from aws_sdk_sagemaker_runtime_http2.client import AsyncSageMakerRuntimeHTTP2Client
from aws_sdk_sagemaker_runtime_http2.config import AsyncSageMakerRuntimeHTTP2Config
from awscrt import io as crt_io
from smithy_aws_core.aio.protocols import RestJsonClientProtocol
from smithy_aws_core.identity import AWSCredentialsIdentity, AWSIdentityProperties
from smithy_core.aio.interfaces.identity import IdentityResolver
from smithy_core.exceptions import CallError
from smithy_http.aio.crt import (
    AWSCRTHTTPClient,
    AWSCRTHTTPClientConfig,
    AWSCRTHTTPResponse,
    _AWSCRTEventLoop,
)

from voicewire.aws_domains import dns_suffix
from voicewire.speech_link.errors import SpeechStreamError

logger = logging.getLogger(__name__)


@cache
def shared_boto3_session() -> boto3.Session:
    """One boto3 session per process: building one reads botocore's data files (10-50 ms)."""
    return boto3.Session()


@cache
def _shared_crt_event_loop() -> _AWSCRTEventLoop:
    """One CRT I/O event loop (a native thread) for every client of the process; the SDK's
    default makes a new one per client."""
    return _AWSCRTEventLoop()


def default_region() -> str:
    return shared_boto3_session().region_name or "us-east-1"


def runtime_endpoint(region: str) -> str:
    """SageMaker's bidirectional-streaming front door in ``region`` (HTTP/2 on port 8443)."""
    return f"https://runtime.sagemaker.{region}.{dns_suffix(region)}:8443"


class Boto3CredentialsResolver(IdentityResolver[AWSCredentialsIdentity, AWSIdentityProperties]):
    """SDK credentials from boto3's chain: environment, profiles, container and instance roles."""

    def __init__(self, session: boto3.Session | None = None) -> None:
        self._session = session or shared_boto3_session()

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


class PinnedCredentials(IdentityResolver[AWSCredentialsIdentity, AWSIdentityProperties]):
    """One identity for everything a client signs: a stream's request and each of its events."""

    def __init__(self, identity: AWSCredentialsIdentity) -> None:
        self._identity = identity

    async def get_identity(self, *, properties: AWSIdentityProperties) -> AWSCredentialsIdentity:
        return self._identity


@dataclass(kw_only=True)
class UnmodeledServiceError(CallError):
    """An error answer the service's model does not list, with what AWS said: ``message`` is
    "403 InvalidSignatureException: Signature expired: ...". The SDK's own ``CallError`` for
    these keeps neither the message nor a field for the type."""

    status: int = 0
    error_type: str | None = None


class RestJsonKeepingErrorMessages(RestJsonClientProtocol):
    """The service's protocol (restJson1), with unmodelled errors as ``UnmodeledServiceError``;
    modelled ones (``InputValidationError``, ``ModelError``...) are the SDK's classes as ever."""

    async def _create_error(
        self,
        operation: Any,
        request: Any,
        response: Any,
        response_body: Any,
        error_registry: Any,
        context: Any,
    ) -> CallError:
        error = await super()._create_error(
            operation=operation,
            request=request,
            response=response,
            response_body=response_body,
            error_registry=error_registry,
            context=context,
        )
        if type(error) is not CallError:
            return error
        error_type = None
        if "x-amzn-errortype" in response.fields:
            # "InvalidSignatureException" or "InvalidSignatureException:http://internal..."
            error_type = response.fields["x-amzn-errortype"].values[0].split(":")[0]
        message = _json_message(response_body) or error.message
        return UnmodeledServiceError(
            message=f"{response.status} {error_type or 'error'}: {message}",
            fault=error.fault,
            is_retry_safe=error.is_retry_safe,
            retry_after=error.retry_after,
            is_throttling_error=error.is_throttling_error,
            is_timeout_error=error.is_timeout_error,
            status=response.status,
            error_type=error_type,
        )


def _json_message(body: object) -> str | None:
    """``message`` (AWS's common errors) or ``Message`` of a JSON error body, if it has one."""
    if not isinstance(body, bytes | bytearray):
        return None
    try:
        document = json.loads(body)
    except ValueError:
        return None
    if not isinstance(document, dict):
        return None
    message = document.get("message", document.get("Message"))
    return message if isinstance(message, str) else None


class DuplexCRTClient(AWSCRTHTTPClient):
    """The SDK's CRT transport, with two of awscrt's warts handled.

    - **A TLS context per client.** The constructor loads the trust store into a new TLS context
      (~15 ms of CPU), and the SDK deep-copies the transport when it sets a client up, which
      constructs another. A TLS context is immutable and meant to be shared, so copies here
      share it (and the I/O event loop), and only the connection pool is a copy's own:
      ``new_client`` copies a prototype built once per trust setting.
    - **An error nobody collects.** awscrt writes a stream's request body from a task of its
      own, which ends by writing the end of the body. When the server has ended the stream
      first (the container closed the session, or SageMaker failed it), that last write fails
      with ``AWS_ERROR_HTTP_STREAM_HAS_COMPLETED`` and asyncio logs "Task exception was never
      retrieved" for every such session. The writer's outcome is collected here: expected
      failures at debug level, anything else as a warning.
    """

    def new_client(self) -> Self:
        return deepcopy(self)

    def __deepcopy__(self, memo: Any) -> Self:
        copy = object.__new__(type(self))
        copy.__dict__.update(self.__dict__)  # the event loop, bootstrap, TLS context: shared
        copy._config = deepcopy(self._config)
        copy._connections = {}  # a pool of its own
        copy._closed = False
        return copy

    async def _await_response(self, stream: Any) -> AWSCRTHTTPResponse:
        writer = getattr(stream, "_writer", None)  # awscrt's body-writer task, if it has one
        if isinstance(writer, asyncio.Task):
            writer.add_done_callback(_collect_writer_outcome)
        return await super()._await_response(stream)


def _collect_writer_outcome(writer: asyncio.Task[None]) -> None:
    if writer.cancelled():
        return
    error = writer.exception()
    if error is None:
        return
    if "HTTP_STREAM_HAS_COMPLETED" in str(error):
        logger.debug("request body writer stopped: the server had ended the stream")
    else:
        logger.warning("request body writer failed: %r", error)


class LocalCATrustingCRTClient(DuplexCRTClient):
    """The transport, trusting one extra CA file instead of the system store (local only)."""

    def __init__(
        self,
        ca_file: Path,
        eventloop: Any = None,
        client_config: AWSCRTHTTPClientConfig | None = None,
    ) -> None:
        super().__init__(eventloop=eventloop, client_config=client_config)
        self.ca_file = Path(ca_file)
        if not self.ca_file.is_file():
            raise SpeechStreamError("connect_failed", f"no CA file at {self.ca_file}")
        options = crt_io.TlsContextOptions()
        options.override_default_trust_store_from_path(ca_filepath=str(self.ca_file))
        self._tls_ctx = crt_io.ClientTlsContext(options)


@cache
def _prototype_transport(trusted_ca_file: Path | None) -> DuplexCRTClient:
    config = AWSCRTHTTPClientConfig(force_http_2=True)
    eventloop = _shared_crt_event_loop()
    if trusted_ca_file is None:
        return DuplexCRTClient(eventloop=eventloop, client_config=config)
    return LocalCATrustingCRTClient(trusted_ca_file, eventloop=eventloop, client_config=config)


def duplex_transport(trusted_ca_file: Path | None = None) -> AWSCRTHTTPClient:
    """The HTTP transport that can carry a bidirectional stream: CRT, HTTP/2 only; a new
    connection pool each time, the costly parts shared."""
    return _prototype_transport(trusted_ca_file).new_client()


async def build_client(
    region: str,
    *,
    endpoint_uri: str | None = None,
    trusted_ca_file: Path | None = None,
    credentials: IdentityResolver[AWSCredentialsIdentity, AWSIdentityProperties] | None = None,
) -> AsyncSageMakerRuntimeHTTP2Client:
    """The client production uses; ``endpoint_uri`` and ``trusted_ca_file`` point it at the
    local SageMaker runtime instead, with everything else unchanged."""
    config = await AsyncSageMakerRuntimeHTTP2Config.resolve(
        endpoint_uri=endpoint_uri or runtime_endpoint(region),
        region=region,
        aws_credentials_identity_resolver=credentials or Boto3CredentialsResolver(),
        transport=duplex_transport(trusted_ca_file),
        protocol=RestJsonKeepingErrorMessages,  # the SDK builds it with the service's settings
    )
    return AsyncSageMakerRuntimeHTTP2Client(config=config)
