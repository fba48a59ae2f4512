"""The local SageMaker runtime, spoken to by a client that is not the SDK (httpx over HTTP/2,
botocore's event-stream decoder): what it accepts and refuses does not depend on the SDK agreeing
with itself."""

from __future__ import annotations

import json
import ssl
from datetime import UTC, datetime

import httpx
import pytest
from botocore.eventstream import EventStreamBuffer
from smithy_aws_event_stream.events import EventMessage

PATH = "/endpoints/kokoro-82m/invocations-bidirectional-stream"
SIGNED = {
    "authorization": "AWS4-HMAC-SHA256 Credential=local/20261130/us-east-1/sagemaker/"
    "aws4_request, SignedHeaders=host;x-amz-date, Signature=" + "0" * 64,
    "x-amz-content-sha256": "STREAMING-AWS4-HMAC-SHA256-EVENTS",
    "content-type": "application/vnd.amazon.eventstream",
}


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


def signed(event: bytes) -> bytes:
    """The envelope the SDK's event signer puts around each event (signature not checked)."""
    return EventMessage(
        headers={":date": datetime.now(UTC), ":chunk-signature": b"\x00" * 32}, payload=event
    ).encode()


def decode(body: bytes) -> list:
    buffer = EventStreamBuffer()
    buffer.add_data(body)
    return list(buffer)


@pytest.mark.parametrize(
    ("headers", "status", "error_type"),
    [
        ({"authorization": None}, 403, "MissingAuthenticationTokenException"),
        ({"authorization": "Bearer abc"}, 403, "IncompleteSignatureException"),
        (
            {"authorization": SIGNED["authorization"].replace("/sagemaker/", "/s3/")},
            403,
            "InvalidSignatureException",
        ),
        ({"x-amz-content-sha256": "UNSIGNED-PAYLOAD"}, 400, "InputValidationError"),
        ({"content-type": "application/json"}, 400, "InputValidationError"),
    ],
)
async def test_requests_without_a_proper_signature_are_refused(
    sagemaker_runtime, headers, status, error_type
):
    """``headers`` change the signed request's headers (None: left out)."""
    changed = {**SIGNED, **headers}
    request_headers = {name: value for name, value in changed.items() if value is not None}
    async with client_for(sagemaker_runtime) as client:
        response = await client.post(PATH, headers=request_headers, content=b"")
    assert response.http_version == "HTTP/2"
    assert (response.status_code, response.headers["x-amzn-errortype"]) == (status, error_type)


async def test_an_unknown_endpoint_is_a_validation_error(sagemaker_runtime):
    async with client_for(sagemaker_runtime) as client:
        response = await client.post(
            "/endpoints/nope/invocations-bidirectional-stream", headers=SIGNED, content=b""
        )
    assert response.status_code == 400
    assert response.headers["x-amzn-errortype"] == "InputValidationError"
    assert "Endpoint nope of account" in response.json()["Message"]


async def test_http_1_1_is_refused(sagemaker_runtime):
    async with client_for(sagemaker_runtime, http2=False) as client:
        response = await client.post(PATH, headers=SIGNED, content=b"")
    assert response.status_code == 400 and "HTTP/2" in response.json()["Message"]


async def test_signed_payload_parts_reach_the_container_and_come_back(sagemaker_runtime):
    """A ping through the whole path: signed event up, the container's pong down as a UTF8
    ResponsePayloadPart; the signed empty event ends the session."""
    body = signed(payload_part(b'{"type": "ping", "request_id": "p1"}')) + signed(b"")
    async with client_for(sagemaker_runtime) as client:
        response = await client.post(PATH, headers=SIGNED, content=body)
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


async def test_an_unsigned_event_is_an_internal_stream_failure(sagemaker_runtime):
    body = payload_part(b'{"type": "ping"}')  # no signature envelope
    async with client_for(sagemaker_runtime) as client:
        response = await client.post(PATH, headers=SIGNED, content=body)
    (failure,) = [e for e in decode(response.content) if e.headers[":message-type"] == "exception"]
    assert failure.headers[":exception-type"] == "InternalStreamFailure"
    assert "not signed" in json.loads(failure.payload)["Message"]


async def test_a_corrupt_event_is_an_internal_stream_failure(sagemaker_runtime):
    event = bytearray(signed(payload_part(b'{"type": "ping"}')))
    event[-1] ^= 0xFF  # the message CRC no longer matches
    async with client_for(sagemaker_runtime) as client:
        response = await client.post(PATH, headers=SIGNED, content=bytes(event))
    (failure,) = [e for e in decode(response.content) if e.headers[":message-type"] == "exception"]
    assert failure.headers[":exception-type"] == "InternalStreamFailure"
    assert "unreadable request event" in json.loads(failure.payload)["Message"]
