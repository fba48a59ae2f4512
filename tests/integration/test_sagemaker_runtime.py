"""The local SageMaker runtime, spoken to by a client that is not the SDK (httpx over HTTP/2,
botocore's event-stream decoder; requests and events signed by ``aws_sdk_signers``, see
``sigv4_signing``): what it accepts and refuses does not depend on the SDK agreeing with itself.
Signatures themselves: ``test_sagemaker_signatures``."""

from __future__ import annotations

import json
import ssl

import httpx
import pytest
from botocore.eventstream import EventStreamBuffer
from conftest import refused_event
from sigv4_signing import PATH, SignedRequest
from smithy_aws_event_stream.events import EventMessage


async def signed_request(runtime, **options) -> SignedRequest:
    """A request signed with the key the runtime issued; ``options`` as ``SignedRequest.sign``."""
    return await SignedRequest.sign(runtime.running.endpoint_url, runtime.credentials, **options)


def client_for(runtime, http2: bool = True) -> httpx.AsyncClient:
    context = ssl.create_default_context(cafile=str(runtime.tls.ca_file))
    return httpx.AsyncClient(
        base_url=runtime.running.endpoint_url, http2=http2, verify=context, timeout=30
    )


def payload_part(data: bytes, data_type: str = "UTF8") -> bytes:
    return EventMessage(
        headers={":message-type": "event", ":event-type": "PayloadPart", "DataType": data_type},
        payload=data,
    ).encode()


def decode(body: bytes) -> list:
    buffer = EventStreamBuffer()
    buffer.add_data(body)
    return list(buffer)


@pytest.mark.parametrize(
    ("signed", "after", "status", "error_type"),
    [
        ({}, {"authorization": None}, 403, "MissingAuthenticationTokenException"),
        ({}, {"authorization": "Bearer abc"}, 403, "IncompleteSignatureException"),
        ({"service": "s3"}, {}, 403, "InvalidSignatureException"),
        ({}, {"content-type": "application/json"}, 403, "InvalidSignatureException"),
        (
            {"headers": {"x-amz-content-sha256": "UNSIGNED-PAYLOAD"}},
            {},
            400,
            "InputValidationError",
        ),
        ({"headers": {"content-type": "application/json"}}, {}, 400, "InputValidationError"),
    ],
)
async def test_requests_without_a_proper_signature_are_refused(
    sagemaker_runtime, signed, after, status, error_type
):
    """``signed``: how the request is signed (``SignedRequest``'s options); ``after``: header
    changes after signing (None: left out). Authentication comes before validation."""
    changed = {**(await signed_request(sagemaker_runtime, **signed)).headers, **after}
    request_headers = {name: value for name, value in changed.items() if value is not None}
    async with client_for(sagemaker_runtime) as client:
        response = await client.post(PATH, headers=request_headers, content=b"")
    assert response.http_version == "HTTP/2"
    assert (response.status_code, response.headers["x-amzn-errortype"]) == (status, error_type)


async def test_an_unknown_endpoint_is_a_validation_error(sagemaker_runtime):
    async with client_for(sagemaker_runtime) as client:
        path = "/endpoints/nope/invocations-bidirectional-stream"
        headers = (await signed_request(sagemaker_runtime, path=path)).headers
        response = await client.post(path, headers=headers, content=b"")
    assert response.status_code == 400
    assert response.headers["x-amzn-errortype"] == "InputValidationError"
    assert "Endpoint nope of account" in response.json()["Message"]


async def test_http_1_1_is_refused(sagemaker_runtime):
    async with client_for(sagemaker_runtime, http2=False) as client:
        headers = (await signed_request(sagemaker_runtime)).headers
        response = await client.post(PATH, headers=headers, content=b"")
    assert response.status_code == 400 and "HTTP/2" in response.json()["Message"]


async def test_signed_payload_parts_reach_the_container_and_come_back(sagemaker_runtime):
    """A ping through the whole path: signed event up, the container's pong down as a UTF8
    ResponsePayloadPart; the signed empty event ends the session."""
    request = await signed_request(sagemaker_runtime)
    body = await request.events(payload_part(b'{"type": "ping", "request_id": "p1"}'))
    async with client_for(sagemaker_runtime) as client:
        response = await client.post(PATH, headers=request.headers, content=body)
    assert response.status_code == 200
    assert response.headers["x-amzn-invoked-production-variant"] == "AllTraffic"
    events = decode(response.content)
    pongs = [e for e in events if e.headers.get(":event-type") == "PayloadPart"]
    # The input ended right after the ping: SageMaker may drop answers still on their way, so
    # the pong is there or not, but nothing else is.
    for event in pongs:
        assert event.headers["DataType"] == "UTF8"
        assert json.loads(event.payload) == {"type": "pong", "request_id": "p1"}
    assert all(e.headers[":message-type"] == "event" for e in events)


async def test_an_unsigned_event_is_refused(sagemaker_runtime):
    """Held for (refused before the answer: 403) or not (the stream's InternalStreamFailure)."""
    body = payload_part(b'{"type": "ping"}')  # no signature envelope
    async with client_for(sagemaker_runtime) as client:
        headers = (await signed_request(sagemaker_runtime)).headers
        response = await client.post(PATH, headers=headers, content=body)
    message = refused_event(sagemaker_runtime, response)
    assert message.startswith("IncompleteSignatureException: a request event is not signed")


async def test_a_corrupt_event_is_refused(sagemaker_runtime):
    """Held for (refused before the answer: 400) or not (the stream's InternalStreamFailure)."""
    request = await signed_request(sagemaker_runtime)
    event = bytearray(await request.event(payload_part(b'{"type": "ping"}')))
    event[-1] ^= 0xFF  # the message CRC no longer matches
    async with client_for(sagemaker_runtime) as client:
        response = await client.post(PATH, headers=request.headers, content=bytes(event))
    message = refused_event(sagemaker_runtime, response)
    assert message.removeprefix("InputValidationError: ").startswith("unreadable request event")
    if response.status_code != 200:
        assert (response.status_code, response.headers["x-amzn-errortype"]) == (
            400,
            "InputValidationError",
        )


async def test_an_input_ended_before_any_event_is_answered_and_ended(sagemaker_runtime):
    """Nothing to relay: a held answer is a 200 with an empty stream, no container opened."""
    counters = sagemaker_runtime.runtime.counters
    opened = counters.streams_opened
    request = await signed_request(sagemaker_runtime)
    async with client_for(sagemaker_runtime) as client:
        response = await client.post(PATH, headers=request.headers, content=await request.end())
    assert response.status_code == 200 and decode(response.content) == []
    held = sagemaker_runtime.runtime.initial_response == "after_first_event"
    assert counters.streams_opened == opened + (0 if held else 1)
