"""A stand-in for SageMaker's HTTP/2 front door, at the SDK's stream boundary.

``SidecarBridgeClient`` has the one method voicewire calls on ``AsyncSageMakerRuntimeHTTP2Client``
and returns a stream object with the SDK's shape (``input_stream.send/close``, ``await_output``,
``receive``), trading only in the SDK's own model types. Behind it, it does what the endpoint's
sidecar does: opens the container's ``/invocations-bidirectional-stream`` WebSocket (here the real
speech server on a real port), forwards every request payload part as a *binary* frame, and
returns every frame the container sends as a ``ResponsePayloadPart`` of bytes. It can also fail
the stream after N parts, as SageMaker reports a model or internal stream failure.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from aws_sdk_sagemaker_runtime_http2.models import (
    InternalStreamFailure,
    InvokeEndpointWithBidirectionalStreamInput,
    InvokeEndpointWithBidirectionalStreamOutput,
    ModelStreamError,
    RequestStreamEventPayloadPart,
    ResponsePayloadPart,
    ResponseStreamEvent,
    ResponseStreamEventInternalStreamFailure,
    ResponseStreamEventModelStreamError,
    ResponseStreamEventPayloadPart,
)
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosedOK


@dataclass
class Failure:
    after_parts: int
    kind: str  # "model" or "internal"


@dataclass
class SidecarBridgeClient:
    ws_url: str
    failure: Failure | None = None
    invocations: list[InvokeEndpointWithBidirectionalStreamInput] = field(default_factory=list)
    sent: list[RequestStreamEventPayloadPart] = field(default_factory=list)

    async def invoke_endpoint_with_bidirectional_stream(
        self, input: InvokeEndpointWithBidirectionalStreamInput
    ) -> BridgeStream:
        assert isinstance(input, InvokeEndpointWithBidirectionalStreamInput)
        self.invocations.append(input)
        websocket = await connect(self.ws_url, max_size=None)
        return BridgeStream(websocket, self)


class BridgePublisher:
    def __init__(self, websocket: ClientConnection, client: SidecarBridgeClient) -> None:
        self._websocket, self._client = websocket, client
        self.closed = False

    async def send(self, event: RequestStreamEventPayloadPart) -> None:
        assert isinstance(event, RequestStreamEventPayloadPart), event
        assert not self.closed, "sent on a closed input stream"
        self._client.sent.append(event)
        await self._websocket.send(event.value.bytes_)  # the sidecar forwards binary frames

    async def close(self) -> None:
        self.closed = True


class BridgeReceiver:
    def __init__(self, websocket: ClientConnection, failure: Failure | None) -> None:
        self._websocket, self._failure = websocket, failure
        self._parts = 0

    async def receive(self) -> ResponseStreamEvent | None:
        if self._failure is not None and self._parts >= self._failure.after_parts:
            if self._failure.kind == "model":
                error = ModelStreamError(message="model container crashed", error_code="ModelError")
                return ResponseStreamEventModelStreamError(value=error)
            failure = InternalStreamFailure(message="stream reset by the service")
            return ResponseStreamEventInternalStreamFailure(value=failure)
        try:
            frame = await self._websocket.recv()
        except ConnectionClosedOK:
            return None
        self._parts += 1
        data = frame.encode() if isinstance(frame, str) else frame
        data_type = "UTF8" if isinstance(frame, str) else "BINARY"
        return ResponseStreamEventPayloadPart(
            value=ResponsePayloadPart(bytes_=data, data_type=data_type)
        )

    async def close(self) -> None:
        await self._websocket.close()


class BridgeStream:
    def __init__(self, websocket: ClientConnection, client: SidecarBridgeClient) -> None:
        self.input_stream = BridgePublisher(websocket, client)
        self._receiver = BridgeReceiver(websocket, client.failure)

    async def await_output(
        self,
    ) -> tuple[InvokeEndpointWithBidirectionalStreamOutput, BridgeReceiver]:
        return InvokeEndpointWithBidirectionalStreamOutput(), self._receiver

    async def close(self) -> None:
        await self.input_stream.close()
        await self._receiver.close()
