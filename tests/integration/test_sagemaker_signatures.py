"""The local SageMaker runtime checks signatures as AWS does, and refuses as AWS does.

Through the production client (``SageMakerTransport``: the real ``aws_sdk_sagemaker_runtime_http2``
client, CRT transport, HTTP/2 over TLS, real sockets): each error a stream can meet before it
opens raises the exception class AWS's answer makes the SDK raise, and our transport turns it into
``SpeechStreamError("connect_failed")`` with the type and message a person needs. Clients that
sign wrongly are made with the SDK's own configuration hooks (its plugins, its auth schemes and
signers), never by mocking the SDK.

Through httpx (``sigv4_signing``: the SDK's signing code without its client), the event chain:
replayed, reordered, foreign-key and stale events end the stream, or, for the first event of a
front door that holds its answer for it, are refused before the answer.
"""

from __future__ import annotations

import functools
import re
import ssl
from datetime import UTC, datetime, timedelta

import boto3
import httpx
import pytest
from aws_sdk_sagemaker_runtime_http2 import client as sdk_client
from aws_sdk_sagemaker_runtime_http2.models import (
    InputValidationError,
    InternalStreamFailure,
    InvokeEndpointWithBidirectionalStreamInput,
    ModelError,
    RequestPayloadPart,
    RequestStreamEventPayloadPart,
)
from aws_sdk_signers import AsyncEventSigner
from botocore.eventstream import EventStreamBuffer
from conftest import INITIAL_RESPONSES, refusal, refused_event, start_runtime_for
from sigv4_signing import PATH, SignedRequest
from smithy_aws_core.auth import SigV4AuthScheme
from smithy_aws_core.identity import AWSCredentialsIdentity
from smithy_aws_event_stream.events import EventHeaderEncoder, EventMessage

from voicewire.speech_link import SpeechSession, SpeechStreamError, sagemaker_client
from voicewire.speech_link.sagemaker_client import (
    Boto3CredentialsResolver,
    UnmodeledServiceError,
    build_client,
)
from voicewire_tools.local_stack.sigv4_verifier import AccessKey

SIGV4_TIME = "%Y%m%dT%H%M%SZ"
MISMATCH = (
    "The request signature we calculated does not match the signature you provided. Check your "
    "AWS Secret Access Key and signing method. Consult the service documentation for details."
)
PING = b'{"type": "ping", "request_id": "p1"}'


# --- helpers ---------------------------------------------------------------------------------


@pytest.fixture
def sdk_plugins(monkeypatch):
    """SDK plugins (the SDK's public hook for changing a client's configuration) for every
    client the production code builds in this test."""
    plugins: list = []
    monkeypatch.setattr(
        sagemaker_client,
        "AsyncSageMakerRuntimeHTTP2Client",
        functools.partial(sdk_client.AsyncSageMakerRuntimeHTTP2Client, plugins=plugins),
    )
    return plugins


async def refused(runtime, transport) -> SpeechStreamError:
    """A session over ``transport``, opened and sent a text: the typed error its events end
    with (the transport sends before SageMaker answers, so a refusal surfaces there), after
    checking nothing opened."""
    counters = runtime.runtime.counters
    opened, refused_before = counters.streams_opened, counters.streams_refused
    error = await refusal(SpeechSession(transport))
    assert counters.streams_opened == opened
    assert counters.streams_refused == refused_before + 1
    assert error.code == "connect_failed"
    return error


def session_with(runtime, key: AccessKey, **options) -> SpeechSession:
    """A production session to ``runtime`` whose credentials are ``key``'s."""
    session = boto3.Session(region_name="us-east-1", **key.boto3_kwargs())
    return SpeechSession(runtime.transport(boto3_session=session, **options))


def also_accepted(runtime, monkeypatch) -> AccessKey:
    """A second key the runtime accepts, for this test."""
    other = AccessKey.issue()
    verifier = runtime.runtime.verifier
    keys = {**verifier.keys, other.access_key_id: other.secret_access_key}
    monkeypatch.setattr(verifier, "keys", keys)
    return other


class NoAuth:
    """An auth scheme resolver that chooses no scheme: the SDK sends the request unsigned."""

    def resolve_auth_scheme(self, *, auth_parameters):
        return []


class CorruptingEventSigner(AsyncEventSigner):
    """The SDK's event signer with a bug: the ``corrupt``-th event's signature is altered."""

    def __init__(self, corrupt: int, **options) -> None:
        super().__init__(**options)
        self.corrupt, self.signed = corrupt, 0

    async def sign(self, *, event, identity, properties):
        signed = await super().sign(event=event, identity=identity, properties=properties)
        self.signed += 1
        if self.signed == self.corrupt:
            signature = bytearray(signed.headers[":chunk-signature"])
            signature[0] ^= 0x01
            signed.headers[":chunk-signature"] = bytes(signature)
        return signed


class CorruptingScheme(SigV4AuthScheme):
    """SigV4 as the SDK does it, with a ``CorruptingEventSigner`` for the events."""

    def __init__(self, corrupt: int) -> None:
        super().__init__(service="sagemaker")
        self.corrupt = corrupt

    def event_signer(self, *, request):
        seed = request.fields["Authorization"].as_string().rsplit("Signature=", 1)[1]
        return CorruptingEventSigner(
            self.corrupt, initial_signature=seed.encode(), event_encoder_cls=EventHeaderEncoder
        )


class RotatingCredentials:
    """A credential source that returns another key each time it is asked (a role's
    credentials refreshed mid-stream, at its extreme); what ``boto3.Session`` offers to
    ``Boto3CredentialsResolver``."""

    def __init__(self, *keys: AccessKey) -> None:
        self.keys, self.asked = keys, 0

    def get_credentials(self):
        return self

    def get_frozen_credentials(self):
        from botocore.credentials import ReadOnlyCredentials

        key = self.keys[self.asked % len(self.keys)]
        self.asked += 1
        return ReadOnlyCredentials(key.access_key_id, key.secret_access_key, None)


def client_for(runtime) -> httpx.AsyncClient:
    context = ssl.create_default_context(cafile=str(runtime.tls.ca_file))
    return httpx.AsyncClient(
        base_url=runtime.running.endpoint_url, http2=True, verify=context, timeout=30
    )


def payload_part(data: bytes) -> bytes:
    return EventMessage(
        headers={":message-type": "event", ":event-type": "PayloadPart", "DataType": "UTF8"},
        payload=data,
    ).encode()


async def post(runtime, request: SignedRequest, body: bytes) -> httpx.Response:
    async with client_for(runtime) as client:
        return await client.post(PATH, headers=request.headers, content=body)


# --- before the stream opens: the production client's view --------------------------------------


async def test_an_unknown_endpoint_is_an_input_validation_error(sagemaker_runtime):
    error = await refused(sagemaker_runtime, sagemaker_runtime.transport("no-such-endpoint"))
    cause = error.__cause__
    assert type(cause) is InputValidationError
    assert cause.message == "Endpoint no-such-endpoint of account 000000000000 not found."
    assert cause.error_code == "ValidationError"
    assert "InputValidationError: Endpoint no-such-endpoint" in error.message


async def test_a_production_variant_that_is_not_there_is_an_input_validation_error(
    sagemaker_runtime,
):
    """Our transport never names a variant; the SDK's client, given one, gets AWS's answer."""
    client = await build_client(
        "us-east-1",
        endpoint_uri=sagemaker_runtime.running.endpoint_url,
        trusted_ca_file=sagemaker_runtime.tls.ca_file,
        credentials=Boto3CredentialsResolver(
            boto3.Session(**sagemaker_runtime.credentials.boto3_kwargs())
        ),
    )
    try:
        stream = await client.invoke_endpoint_with_bidirectional_stream(
            InvokeEndpointWithBidirectionalStreamInput(
                endpoint_name="kokoro-82m", target_variant="Canary"
            )
        )
        with pytest.raises(InputValidationError) as raised:
            await stream.await_output()
        await stream.input_stream.close()
    finally:
        await client.close()
    assert raised.value.message == "Endpoint kokoro-82m has no production variant Canary."


@pytest.mark.parametrize("initial_response", INITIAL_RESPONSES)
async def test_a_model_container_that_refuses_the_stream_is_a_model_error(
    speech_server, tmp_path, initial_response
):
    """The container answers the sidecar's WebSocket handshake with an HTTP error (a front
    door holding its answer for the first event opens the container only then)."""
    local = start_runtime_for(
        speech_server.base_url.replace("http://", "ws://") + "/no-such-route",
        tmp_path,
        initial_response=initial_response,
    )
    try:
        error = await refused(local, local.transport())
    finally:
        local.running.stop()
    cause = error.__cause__
    assert type(cause) is ModelError
    assert cause.error_code == "ModelError"
    assert isinstance(cause.original_status_code, int) and cause.original_status_code >= 400
    assert error.message.startswith("cannot open SageMaker endpoint 'kokoro-82m': ModelError: ")


async def test_an_unsigned_request_is_missing_authentication_token(sagemaker_runtime, sdk_plugins):
    sdk_plugins.append(lambda config: setattr(config, "auth_scheme_resolver", NoAuth()))
    error = await refused(sagemaker_runtime, sagemaker_runtime.transport())
    cause = error.__cause__
    assert type(cause) is UnmodeledServiceError
    assert (cause.status, cause.error_type) == (403, "MissingAuthenticationTokenException")
    assert error.message.endswith(
        ": 403 MissingAuthenticationTokenException: Missing Authentication Token"
    )


async def test_a_wrong_secret_is_a_signature_mismatch(sagemaker_runtime):
    key = sagemaker_runtime.credentials
    wrong = AccessKey(key.access_key_id, AccessKey.issue().secret_access_key)
    error = await refused(sagemaker_runtime, session_with(sagemaker_runtime, wrong)._transport)
    cause = error.__cause__
    assert type(cause) is UnmodeledServiceError
    assert (cause.status, cause.error_type) == (403, "InvalidSignatureException")
    assert f"403 InvalidSignatureException: {MISMATCH}" in error.message
    # AWS's message goes on with what it computed, for the client's author to compare.
    assert "The Canonical String for this request should have been\n'POST\n" in error.message
    assert "/us-east-1/sagemaker/aws4_request\n" in error.message


async def test_a_key_the_stack_did_not_issue_is_an_unrecognized_client(sagemaker_runtime):
    error = await refused(
        sagemaker_runtime, session_with(sagemaker_runtime, AccessKey.issue())._transport
    )
    cause = error.__cause__
    assert type(cause) is UnmodeledServiceError
    assert (cause.status, cause.error_type) == (403, "UnrecognizedClientException")
    assert error.message.endswith(
        ": 403 UnrecognizedClientException: The security token included in the request is invalid."
    )


async def test_a_signature_older_than_five_minutes_has_expired(sagemaker_runtime, monkeypatch):
    now = datetime.now(UTC).replace(microsecond=0) + timedelta(minutes=10)
    monkeypatch.setattr(sagemaker_runtime.runtime.verifier, "clock", lambda: now)
    error = await refused(sagemaker_runtime, sagemaker_runtime.transport())
    cause = error.__cause__
    assert type(cause) is UnmodeledServiceError
    assert (cause.status, cause.error_type) == (403, "InvalidSignatureException")
    bound = now - timedelta(minutes=5)
    assert re.search(
        r": 403 InvalidSignatureException: Signature expired: \d{8}T\d{6}Z is now earlier than "
        + re.escape(f"{bound:{SIGV4_TIME}} ({now:{SIGV4_TIME}} - 5 min.)")
        + "$",
        error.message,
    )


async def test_a_signature_scoped_to_another_region_is_invalid(sagemaker_runtime):
    error = await refused(sagemaker_runtime, sagemaker_runtime.transport(region="eu-west-1"))
    assert type(error.__cause__) is UnmodeledServiceError
    assert error.message.endswith(
        ": 403 InvalidSignatureException: "
        "Credential should be scoped to a valid region, not 'eu-west-1'. "
    )


async def test_a_signature_scoped_to_another_service_is_invalid(sagemaker_runtime, sdk_plugins):
    sdk_plugins.append(
        lambda config: config.set_auth_scheme(SigV4AuthScheme(service="sagemaker-runtime"))
    )
    error = await refused(sagemaker_runtime, sagemaker_runtime.transport())
    assert type(error.__cause__) is UnmodeledServiceError
    assert error.message.endswith(
        ": 403 InvalidSignatureException: "
        "Credential should be scoped to correct service: 'sagemaker'. "
    )


# --- the request signature, exactly (the SDK's signer over httpx) -------------------------------


@pytest.mark.parametrize(
    ("signed_at", "clock", "message"),
    [
        (
            "20261201T000000Z",
            "20261201T001000Z",
            "Signature expired: 20261201T000000Z is now earlier than 20261201T000500Z "
            "(20261201T001000Z - 5 min.)",
        ),
        (
            "20261201T002000Z",
            "20261201T001000Z",
            "Signature not yet current: 20261201T002000Z is still later than 20261201T001500Z "
            "(20261201T001000Z + 5 min.)",
        ),
    ],
)
async def test_a_clock_skew_over_five_minutes_is_refused_in_aws_words(
    sagemaker_runtime, monkeypatch, signed_at, clock, message
):
    server_now = datetime.strptime(clock, SIGV4_TIME).replace(tzinfo=UTC)
    monkeypatch.setattr(sagemaker_runtime.runtime.verifier, "clock", lambda: server_now)
    request = await SignedRequest.sign(
        sagemaker_runtime.running.endpoint_url, sagemaker_runtime.credentials, date=signed_at
    )
    response = await post(sagemaker_runtime, request, b"")
    assert response.status_code == 403
    assert response.headers["x-amzn-errortype"] == "InvalidSignatureException"
    assert response.json() == {"message": message}


async def test_a_header_changed_after_signing_is_a_mismatch_showing_the_canonical_request(
    sagemaker_runtime,
):
    request = await SignedRequest.sign(
        sagemaker_runtime.running.endpoint_url, sagemaker_runtime.credentials
    )
    request.headers["content-type"] = "application/vnd.amazon.eventstream; charset=utf-8"
    response = await post(sagemaker_runtime, request, b"")
    assert (response.status_code, response.headers["x-amzn-errortype"]) == (
        403,
        "InvalidSignatureException",
    )
    message = response.json()["message"]
    assert message.startswith(MISMATCH)
    assert "content-type:application/vnd.amazon.eventstream; charset=utf-8\n" in message


async def test_a_session_token_the_stack_did_not_issue_is_an_unrecognized_client(
    sagemaker_runtime,
):
    request = await SignedRequest.sign(
        sagemaker_runtime.running.endpoint_url,
        sagemaker_runtime.credentials,
        headers={"x-amz-security-token": "token"},
    )
    response = await post(sagemaker_runtime, request, b"")
    assert (response.status_code, response.headers["x-amzn-errortype"]) == (
        403,
        "UnrecognizedClientException",
    )


# --- the event chain -------------------------------------------------------------------------


async def test_a_signed_event_chain_is_accepted(sagemaker_runtime):
    request = await SignedRequest.sign(
        sagemaker_runtime.running.endpoint_url, sagemaker_runtime.credentials
    )
    body = await request.events(payload_part(PING), payload_part(PING))
    response = await post(sagemaker_runtime, request, body)
    assert response.status_code == 200
    buffer = EventStreamBuffer()
    buffer.add_data(response.content)
    assert all(event.headers[":message-type"] == "event" for event in buffer)


@pytest.mark.parametrize("order", ["replayed", "reordered"])
async def test_a_replayed_or_reordered_event_ends_the_stream(sagemaker_runtime, order):
    request = await SignedRequest.sign(
        sagemaker_runtime.running.endpoint_url, sagemaker_runtime.credentials
    )
    first = await request.event(payload_part(PING))
    second = await request.event(payload_part(PING))
    body = first + first + second if order == "replayed" else second + first
    before = sagemaker_runtime.runtime.counters.request_parts
    response = await post(sagemaker_runtime, request, body)
    event = 2 if order == "replayed" else 1
    message = refused_event(sagemaker_runtime, response, first=event == 1)
    assert message == f"InvalidSignatureException: {MISMATCH} (request event {event})"
    # Nothing after the broken link reached the container.
    assert sagemaker_runtime.runtime.counters.request_parts == before + event - 1


async def test_an_event_signed_with_another_key_ends_the_stream(sagemaker_runtime, monkeypatch):
    """Even a key the runtime accepts: the chain is the request's key's."""
    other = AccessKey.issue()
    verifier = sagemaker_runtime.runtime.verifier
    monkeypatch.setattr(
        verifier, "keys", {**verifier.keys, other.access_key_id: other.secret_access_key}
    )
    request = await SignedRequest.sign(
        sagemaker_runtime.running.endpoint_url, sagemaker_runtime.credentials
    )
    foreign = SignedRequest(
        AWSCredentialsIdentity(
            access_key_id=other.access_key_id, secret_access_key=other.secret_access_key
        ),
        request.properties,
        request.headers,  # the same seed: only the key differs
    )
    body = await foreign.events(payload_part(PING))
    message = refused_event(sagemaker_runtime, await post(sagemaker_runtime, request, body))
    assert message == f"InvalidSignatureException: {MISMATCH} (request event 1)"


async def test_an_event_signed_over_five_minutes_ago_ends_the_stream(
    sagemaker_runtime, monkeypatch
):
    """The request is checked at once; by the time its first event is, the clock has moved."""
    verifier = sagemaker_runtime.runtime.verifier
    calls = []

    def clock() -> datetime:
        calls.append(None)
        return datetime.now(UTC) + (timedelta(minutes=10) if len(calls) > 1 else timedelta())

    monkeypatch.setattr(verifier, "clock", clock)
    request = await SignedRequest.sign(
        sagemaker_runtime.running.endpoint_url, sagemaker_runtime.credentials
    )
    message = refused_event(
        sagemaker_runtime,
        await post(sagemaker_runtime, request, await request.events(payload_part(PING))),
    )
    assert message.startswith("InvalidSignatureException: Signature expired: ")
    assert message.endswith("- 5 min.) (request event 1)")


async def test_an_unsigned_event_ends_the_stream(sagemaker_runtime):
    request = await SignedRequest.sign(
        sagemaker_runtime.running.endpoint_url, sagemaker_runtime.credentials
    )
    message = refused_event(
        sagemaker_runtime, await post(sagemaker_runtime, request, payload_part(PING))
    )
    assert message.startswith("IncompleteSignatureException: a request event is not signed")


# --- the event chain through the production client ----------------------------------------------


async def test_an_event_signer_bug_is_an_internal_stream_failure(sagemaker_runtime, sdk_plugins):
    """The SDK's signer, broken on the second event: the first ping is answered, the second
    ends the stream, and the session says so with a stable code."""
    sdk_plugins.append(lambda config: config.set_auth_scheme(CorruptingScheme(corrupt=2)))
    session = sagemaker_runtime.session()
    await session.open()
    try:
        await session.ping(within=10)
        with pytest.raises(SpeechStreamError) as raised:
            await session.ping(within=10)
    finally:
        await session.close()
    assert raised.value.code == "internal_stream_failure"
    assert raised.value.message == f"InvalidSignatureException: {MISMATCH} (request event 2)"


async def test_a_bad_first_event_signature_reaches_the_session(sagemaker_runtime, sdk_plugins):
    """The SDK's signer, broken on the first event, the one a front door may hold its answer
    for: refused before the answer (403, ``connect_failed``) or once the stream has opened
    (``internal_stream_failure``), the session's requests are told AWS's words either way."""
    sdk_plugins.append(lambda config: config.set_auth_scheme(CorruptingScheme(corrupt=1)))
    error = await refusal(sagemaker_runtime.session())
    expected = f"InvalidSignatureException: {MISMATCH} (request event 1)"
    if sagemaker_runtime.runtime.initial_response == "after_first_event":
        assert error.code == "connect_failed"
        assert type(error.__cause__) is UnmodeledServiceError
        assert error.message == f"cannot open SageMaker endpoint 'kokoro-82m': 403 {expected}"
    else:
        assert error.code == "internal_stream_failure"
        assert error.message == expected


async def test_credentials_refreshed_mid_stream_keep_the_streams_key(
    sagemaker_runtime, monkeypatch
):
    """A stream's events are signed with its request's key even when the credential source
    moves on (the production transport pins the identity per stream); the SDK left to ask for
    every event would sign with the next key, and AWS would end the stream."""
    other = AccessKey.issue()
    verifier = sagemaker_runtime.runtime.verifier
    monkeypatch.setattr(
        verifier, "keys", {**verifier.keys, other.access_key_id: other.secret_access_key}
    )

    rotating = RotatingCredentials(sagemaker_runtime.credentials, other)
    async with SpeechSession(sagemaker_runtime.transport(boto3_session=rotating)) as session:
        await session.ping(within=10)
        await session.ping(within=10)
    assert rotating.asked == 1

    # The SDK's client with a resolver asked per event: the chain breaks at the first event.
    client = await build_client(
        "us-east-1",
        endpoint_uri=sagemaker_runtime.running.endpoint_url,
        trusted_ca_file=sagemaker_runtime.tls.ca_file,
        credentials=Boto3CredentialsResolver(
            RotatingCredentials(sagemaker_runtime.credentials, other)
        ),
    )
    try:
        stream = await client.invoke_endpoint_with_bidirectional_stream(
            InvokeEndpointWithBidirectionalStreamInput(endpoint_name="kokoro-82m")
        )
        # Sent before the answer, which a front door may hold until this first event.
        await stream.input_stream.send(
            RequestStreamEventPayloadPart(value=RequestPayloadPart(bytes_=PING, data_type="UTF8"))
        )
        with pytest.raises((InternalStreamFailure, UnmodeledServiceError)) as raised:
            _, output = await stream.await_output()  # held: refused before the answer (403)
            await output.receive()  # at once: the stream's InternalStreamFailure
        await stream.input_stream.close()
    finally:
        await client.close()
    assert raised.value.message.endswith(f"InvalidSignatureException: {MISMATCH} (request event 1)")
