"""Signing requests to the local SageMaker runtime without the SDK's client, for tests that speak
to it with httpx: the request signed by ``aws_sdk_signers``' SigV4 signer and each event by its
event signer (the signing code the SDK's client runs), so what the runtime accepts or refuses
does not rest on the runtime's own verifier agreeing with itself. ``await SignedRequest.sign(...)``
builds one."""

from __future__ import annotations

from urllib.parse import urlsplit

from aws_sdk_signers import (
    URI,
    AsyncEventSigner,
    AsyncSigV4Signer,
    AWSCredentialIdentity,
    AWSRequest,
    Field,
    Fields,
)
from smithy_aws_event_stream.events import EventHeaderEncoder, EventMessage

PATH = "/endpoints/kokoro-82m/invocations-bidirectional-stream"
EVENT_STREAM = "application/vnd.amazon.eventstream"
SIGNED_EVENTS = "STREAMING-AWS4-HMAC-SHA256-EVENTS"


class _Encoded:
    """An event already encoded, as the event signer takes one: it signs ``encode()`` and puts
    the envelope's headers and payload on the object it was given."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.headers: dict = {}
        self.payload = b""

    def encode(self) -> bytes:
        return self.data


class SignedRequest:
    """The headers of one signed request, and its events signed in a chain after it."""

    def __init__(self, identity: AWSCredentialIdentity, properties: dict, headers: dict) -> None:
        self.identity, self.properties, self.headers = identity, properties, headers
        signature = self.headers["authorization"].rsplit("Signature=", 1)[1]
        self._events = AsyncEventSigner(
            initial_signature=signature.encode(), event_encoder_cls=EventHeaderEncoder
        )

    @classmethod
    async def sign(
        cls,
        endpoint_url: str,
        key,  # sigv4_verifier.AccessKey
        *,
        path: str = PATH,
        region: str = "us-east-1",
        service: str = "sagemaker",
        headers: dict[str, str] | None = None,
        date: str | None = None,
    ) -> SignedRequest:
        """``headers`` are added to (or replace) the SDK's before signing; ``date``
        (``20261201T000000Z``) signs as of then rather than now."""
        identity = AWSCredentialIdentity(
            access_key_id=key.access_key_id, secret_access_key=key.secret_access_key
        )
        properties = {"region": region, "service": service}
        url = urlsplit(endpoint_url)
        signing = dict(properties, **({"date": date} if date else {}))
        fields = {
            "content-type": EVENT_STREAM,
            "x-amz-content-sha256": SIGNED_EVENTS,
            **(headers or {}),
        }
        request = AWSRequest(
            destination=URI(host=url.hostname, port=url.port, path=path, scheme="https"),
            method="POST",
            body=None,
            fields=Fields([Field(name=name, values=[value]) for name, value in fields.items()]),
        )
        signed = await AsyncSigV4Signer().sign(
            request=request, identity=identity, properties=signing
        )
        # httpx sends Host as HTTP/2's :authority (the runtime reads either).
        sent = {
            field.name.lower(): field.as_string()
            for field in signed.fields
            if field.name.lower() != "host"
        }
        return cls(identity, properties, sent)

    async def event(self, event: bytes) -> bytes:
        """``event`` (an encoded event message) in its signed envelope, next in the chain."""
        signed = await self._events.sign(
            event=_Encoded(event), identity=self.identity, properties=self.properties
        )
        return EventMessage(headers=signed.headers, payload=signed.payload).encode()

    async def end(self) -> bytes:
        """The signed empty envelope that ends the input."""
        signed = await self._events.sign_empty(
            event=EventMessage(), identity=self.identity, properties=self.properties
        )
        return signed.encode()

    async def events(self, *events: bytes) -> bytes:
        """Each of ``events`` signed in turn, then the end: a whole request body."""
        body = b"".join([await self.event(event) for event in events])
        return body + await self.end()
