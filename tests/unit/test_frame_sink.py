"""The frame sinks under the relay, without a network: ``ApiGatewaySink`` over a stubbed boto3
client (botocore's ``Stubber``: the real client, its real error shapes, no HTTP), and the
AgentCore sinks (``WebSocketSink`` over a Starlette WebSocket, in-process; ``SeedEvents``)."""

from __future__ import annotations

import asyncio
import json
import queue
import threading

import boto3
import pytest
from botocore.exceptions import EndpointConnectionError
from botocore.stub import Stubber
from starlette.applications import Starlette
from starlette.routing import WebSocketRoute
from starlette.testclient import TestClient
from starlette.websockets import WebSocket
from uvicorn.protocols.utils import ClientDisconnected

from functions.adapters.frame_sink import ApiGatewaySink, ClientGone, RelayError
from functions.agentcore import transports
from functions.agentcore.transports import SeedEvents, WebSocketSink

CALLBACK_URL = "https://abc123.execute-api.us-east-1.amazonaws.com/prod"


def stubbed_client() -> tuple[object, Stubber]:
    client = boto3.client(
        "apigatewaymanagementapi",
        endpoint_url=CALLBACK_URL,
        region_name="us-east-1",
        aws_access_key_id="x",
        aws_secret_access_key="y",
    )
    stubber = Stubber(client)
    stubber.activate()
    return client, stubber


def fail_with(stubber: Stubber, code: str, status: int) -> None:
    stubber.add_client_error("post_to_connection", service_error_code=code, http_status_code=status)


# --- ApiGatewaySink -----------------------------------------------------------------------------


async def test_a_throttled_post_is_retried_then_delivered():
    client, stubber = stubbed_client()
    fail_with(stubber, "LimitExceededException", 429)
    fail_with(stubber, "InternalServerError", 500)
    # A str frame goes as its UTF-8 bytes, bytes as they are: API Gateway carries them as given.
    stubber.add_response(
        "post_to_connection", {}, {"ConnectionId": "c1", "Data": b'{"a": "\xc3\xa9"}'}
    )
    sink = ApiGatewaySink(client, "c1", first_backoff=0.001)
    await sink.send('{"a": "é"}')
    stubber.assert_no_pending_responses()
    stubber.add_response("post_to_connection", {}, {"ConnectionId": "c1", "Data": b"\xa1\x00"})
    await sink.send(b"\xa1\x00")
    stubber.assert_no_pending_responses()


async def test_retries_stop_at_the_attempt_limit_with_the_error_code():
    client, stubber = stubbed_client()
    for _ in range(3):
        fail_with(stubber, "TooManyRequestsException", 429)
    sink = ApiGatewaySink(client, "c1", max_attempts=3, first_backoff=0.001)
    with pytest.raises(RelayError) as raised:
        await sink.send("{}")
    assert str(raised.value) == "posting to c1 failed: TooManyRequestsException after 3 attempts"
    assert raised.value.code == "TooManyRequestsException" and raised.value.attempts == 3
    stubber.assert_no_pending_responses()


async def test_retries_stop_within_the_retry_budget():
    client, stubber = stubbed_client()
    for _ in range(10):
        fail_with(stubber, "ThrottlingException", 429)
    # Pauses of 25-50 ms, then 50-100 ms: the second would end past a 60 ms budget.
    sink = ApiGatewaySink(
        client, "c1", max_attempts=10, first_backoff=0.05, retry_budget_seconds=0.06
    )
    with pytest.raises(RelayError) as raised:
        await sink.send("{}")
    assert raised.value.code == "ThrottlingException" and raised.value.attempts == 2


async def test_an_error_no_retry_fixes_fails_at_once():
    client, stubber = stubbed_client()
    fail_with(stubber, "ForbiddenException", 403)
    sink = ApiGatewaySink(client, "c1")
    with pytest.raises(RelayError) as raised:
        await sink.send("{}")
    assert str(raised.value) == "posting to c1 failed: ForbiddenException after 1 attempt"
    assert raised.value.code == "ForbiddenException" and raised.value.attempts == 1


async def test_gone_is_client_gone_and_is_not_retried():
    client, stubber = stubbed_client()
    fail_with(stubber, "GoneException", 410)  # a retry would find no stubbed answer and fail
    sink = ApiGatewaySink(client, "c1")
    with pytest.raises(ClientGone):
        await sink.send(b"\xa1")
    stubber.assert_no_pending_responses()


class FlakyClient:
    """``post_to_connection`` that raises botocore's connection error ``failures`` times."""

    def __init__(self, failures: int) -> None:
        self.failures, self.posts = failures, []

    def post_to_connection(self, ConnectionId: str, Data: bytes) -> dict:
        if self.failures:
            self.failures -= 1
            raise EndpointConnectionError(endpoint_url=CALLBACK_URL)
        self.posts.append((ConnectionId, Data))
        return {}


async def test_a_connection_error_is_retried_and_named_in_the_code():
    client = FlakyClient(failures=1)
    await ApiGatewaySink(client, "c1", first_backoff=0.001).send("{}")
    assert client.posts == [("c1", b"{}")]
    with pytest.raises(RelayError, match="EndpointConnectionError after 2 attempts") as raised:
        await ApiGatewaySink(FlakyClient(9), "c1", max_attempts=2, first_backoff=0.001).send("{}")
    assert raised.value.code == "EndpointConnectionError"


# --- WebSocketSink -------------------------------------------------------------------------------


def socket_app(sinks: queue.Queue, done: threading.Event) -> Starlette:
    """A ``/ws`` route that hands its sink out and holds the socket until the client leaves."""

    async def route(websocket: WebSocket) -> None:
        await websocket.accept()
        sink = WebSocketSink(websocket, asyncio.get_running_loop())
        sinks.put(sink)
        message = await websocket.receive()
        assert message["type"] == "websocket.disconnect"
        sink.closed = True  # as the AgentCore route does
        done.set()

    return Starlette(routes=[WebSocketRoute("/ws", route)])


async def test_frames_from_another_loop_keep_their_type_and_order():
    """The turn's loop is not the socket's: each frame is handed to the socket's loop (the
    TestClient's thread here) and awaited, bytes as binary frames, str as text frames."""
    sinks: queue.Queue[WebSocketSink] = queue.Queue()
    done = threading.Event()
    with TestClient(socket_app(sinks, done)) as client, client.websocket_connect("/ws") as ws:
        sink = sinks.get(timeout=5)
        frames = [b"\xa1\x00\x00\x00\x01", '{"type": "turn_end"}', b"{not text}", "é"]
        for frame in frames:
            await sink.send(frame)
        received = [ws.receive() for _ in frames]
        assert [m.get("bytes", m.get("text")) for m in received] == frames
        assert [m["type"] for m in received] == ["websocket.send"] * len(frames)
    assert done.wait(5)
    with pytest.raises(ClientGone):  # the route saw the client leave
        await sink.send("{}")


async def accepted_websocket(on_send) -> WebSocket:
    """An accepted Starlette WebSocket over an in-process ASGI connection whose sends after the
    accept go to ``on_send`` (as they would go to uvicorn)."""

    async def receive() -> dict:
        return {"type": "websocket.connect"}

    async def send(message: dict) -> None:
        if message["type"] != "websocket.accept":
            await on_send(message)

    websocket = WebSocket({"type": "websocket", "path": "/ws", "headers": []}, receive, send)
    await websocket.accept()
    return websocket


async def test_a_disconnected_client_is_client_gone_then_and_after():
    calls = []

    async def on_send(message: dict) -> None:
        calls.append(message)
        raise ClientDisconnected  # what uvicorn's send raises once the client has gone

    sink = WebSocketSink(await accepted_websocket(on_send), asyncio.get_running_loop())
    with pytest.raises(ClientGone):
        await sink.send(b"\xa1\x00")
    assert sink.closed
    with pytest.raises(ClientGone):  # and no further frame reaches the socket
        await sink.send("{}")
    assert len(calls) == 1


async def test_a_socket_the_server_closed_is_client_gone():
    async def on_send(message: dict) -> None:
        pass

    websocket = await accepted_websocket(on_send)
    await websocket.close()
    sink = WebSocketSink(websocket, asyncio.get_running_loop())
    with pytest.raises(ClientGone):
        await sink.send("{}")


async def test_a_socket_that_takes_no_frame_is_client_gone(monkeypatch):
    monkeypatch.setattr(transports, "SEND_TIMEOUT_SECONDS", 0.05)

    async def on_send(message: dict) -> None:
        await asyncio.Event().wait()  # a client that reads nothing: the send never completes

    sink = WebSocketSink(await accepted_websocket(on_send), asyncio.get_running_loop())
    with pytest.raises(ClientGone):
        await sink.send("{}")
    assert sink.closed


# --- SeedEvents ---------------------------------------------------------------------------------


async def test_seed_events_is_a_sink_of_the_seeds_events():
    events = SeedEvents(asyncio.get_running_loop())
    await events.send('{"type": "turn_start", "turn_id": "t-1", "turn": 1, "mode": "bidi"}')
    await events.send(json.dumps({"type": "audio", "turn": 1, "seq": 0, "data": "AAA="}))
    assert await events.next() == {"type": "agent_start", "turn_id": "t-1", "mode": "bidi"}
    assert (await events.next())["type"] == "audio_stream_start"
    assert await events.next() == {"type": "audio_chunk", "data": "AAA="}
    events.close()  # the caller left
    with pytest.raises(ClientGone):
        await events.send('{"type": "turn_end"}')
    assert await events.next() is None
