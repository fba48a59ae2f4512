"""The API Gateway emulator on its own (no speech server, no functions): frames judged as frames
and messages as messages, as API Gateway's quotas say; what the ``@connections`` API sends, in
which frame type; the handshake through ``$connect``; one port for the page and ``/ws``.

Real clients on a real port: the ``websockets`` client (which fragments a message given as a
list of strings), and a lenient raw-frame reader (websockets' sans-I/O client protocol, which
does not decode text frames) to see frames as they are on the wire.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from polling import until
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from websockets.asyncio.client import connect
from websockets.client import ClientProtocol
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.frames import Frame, Opcode
from websockets.http11 import Response as HandshakeResponse
from websockets.uri import parse_uri

from speech_server.server import bind_socket
from voicewire.client_protocol import MAX_FRAME_BYTES, MAX_MESSAGE_BYTES
from voicewire_tools.local_stack.gateway import Gateway, GatewayFunctions, PostFrames
from voicewire_tools.local_stack.threaded_server import RunningServer, serve_in_thread

KB = 1024
AUDIO = b"\xa1\x00\x00\x00\x01\x00\x00\x00\x00" + bytes(range(256)) * 8  # 0xA1: never UTF-8


@dataclass
class Recorder:
    """The functions, as the gateway calls them (on worker threads)."""

    refuse_with: int | None = None
    allow: bool = True
    events: dict[str, list[dict[str, Any]]] = field(
        default_factory=lambda: {"connect": [], "message": [], "disconnect": [], "authorizer": []}
    )
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, kind: str, event: dict[str, Any]) -> None:
        with self.lock:
            self.events[kind].append(event)

    def connect(self, event: dict[str, Any]) -> dict[str, Any]:
        self.record("connect", event)
        if self.refuse_with is not None:
            return {"statusCode": self.refuse_with, "body": "refused by $connect"}
        return {"statusCode": 200}

    def message(self, event: dict[str, Any]) -> dict[str, Any]:
        self.record("message", event)
        return {"statusCode": 200}

    def disconnect(self, event: dict[str, Any]) -> dict[str, Any]:
        self.record("disconnect", event)
        return {"statusCode": 200}

    def authorizer(self, event: dict[str, Any]) -> dict[str, Any]:
        self.record("authorizer", event)
        effect = "Allow" if self.allow else "Deny"
        return {
            "principalId": "alice",
            "policyDocument": {"Statement": [{"Effect": effect}]},
            "context": {"team": "voice"},
        }


@dataclass
class LocalGateway:
    gateway: Gateway
    functions: Recorder
    running: RunningServer
    port: int

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/ws"

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def only_connection_id(self, before: set[str]) -> str:
        await until(lambda: set(self.gateway.connections) - before, "the connection is known")
        (connection_id,) = set(self.gateway.connections) - before
        return connection_id

    async def post(self, connection_id: str, data: bytes) -> httpx.Response:
        async with httpx.AsyncClient() as client:
            return await client.post(f"{self.base_url}/@connections/{connection_id}", content=data)


def start_gateway(
    functions: Recorder,
    post_frames: PostFrames = "binary",
    authorizer: bool = False,
    extra_routes: list[Route] | None = None,
) -> LocalGateway:
    gateway = Gateway(
        GatewayFunctions(
            connect=functions.connect,
            disconnect=functions.disconnect,
            message=functions.message,
            authorizer=functions.authorizer if authorizer else None,
        ),
        post_frames=post_frames,
        extra_routes=extra_routes,
    )
    sock = bind_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    running = serve_in_thread(gateway.app(), sock, "gateway", **gateway.uvicorn_settings())
    return LocalGateway(gateway, functions, running, port)


@pytest.fixture
def local() -> Iterator[LocalGateway]:
    started = start_gateway(Recorder())
    yield started
    started.running.stop()


@pytest.fixture
def text_posts() -> Iterator[LocalGateway]:
    started = start_gateway(Recorder(), post_frames="text")
    yield started
    started.running.stop()


def message_of(size: int, action: str = "speak") -> str:
    """A JSON message naming ``action`` of exactly ``size`` bytes."""
    envelope = len(json.dumps({"action": action, "pad": ""}))
    message = json.dumps({"action": action, "pad": "x" * (size - envelope)})
    assert len(message.encode()) == size
    return message


def pieces(text: str, size: int) -> list[str]:
    return [text[start : start + size] for start in range(0, len(text), size)]


async def closed_with(ws: Any) -> int | None:
    with pytest.raises(ConnectionClosed):
        await asyncio.wait_for(ws.recv(), 10)
    return ws.close_code


async def disconnected(local: LocalGateway, count: int = 1) -> dict[str, Any]:
    await until(lambda: len(local.functions.events["disconnect"]) >= count, "$disconnect runs")
    return local.functions.events["disconnect"][count - 1]["requestContext"]


# --- client -> gateway: frames and messages ----------------------------------------------------


async def test_a_120_kb_message_in_four_30_kb_frames_is_handled_whole(local):
    body = message_of(120 * KB)
    async with connect(local.ws_url) as ws:
        await ws.send(pieces(body, 30 * KB))  # four frames of 30 KB (and an empty last one)
        await until(lambda: local.functions.events["message"], "the message is handled")
        await ws.send(json.dumps({"action": "voices"}))  # the connection goes on
        await until(lambda: len(local.functions.events["message"]) == 2, "the next one too")
    first, second = local.functions.events["message"]
    assert first["body"] == body
    assert first["requestContext"]["routeKey"] == "speak"
    assert second["requestContext"]["routeKey"] == "voices"
    assert (await disconnected(local))["disconnectStatusCode"] == 1000


async def test_a_single_frame_over_32_kb_closes_with_1009(local):
    async with connect(local.ws_url) as ws:
        await ws.send(message_of(MAX_FRAME_BYTES))  # at the limit: handled
        await until(lambda: local.functions.events["message"], "the 32 KB frame is handled")
        await ws.send(message_of(33 * KB))  # one frame, whatever its message's size
        assert await closed_with(ws) == 1009
    assert len(local.functions.events["message"]) == 1
    assert (await disconnected(local))["disconnectStatusCode"] == 1009


async def test_a_129_kb_message_in_32_kb_frames_closes_with_1009(local):
    """API Gateway's quota footnote: a message over 128 KB closes the connection with 1009,
    whatever its frames. The handler's ``message_too_large`` is never reached through it."""
    async with connect(local.ws_url) as ws:
        await ws.send(pieces(message_of(129 * KB), MAX_FRAME_BYTES))
        assert await closed_with(ws) == 1009
    assert local.functions.events["message"] == []
    assert (await disconnected(local))["disconnectStatusCode"] == 1009


async def test_a_message_of_exactly_128_kb_is_handled(local):
    body = message_of(MAX_MESSAGE_BYTES)
    async with connect(local.ws_url) as ws:
        await ws.send(pieces(body, MAX_FRAME_BYTES))
        await until(lambda: local.functions.events["message"], "the message is handled")
    assert local.functions.events["message"][0]["body"] == body


async def test_a_binary_frame_closes_with_1003_and_invalid_utf8_text_with_1007(local):
    async with connect(local.ws_url) as ws:
        await ws.send(b'{"action": "speak", "text": "Hi."}')
        assert await closed_with(ws) == 1003
    async with connect(local.ws_url) as ws:
        await ws.send(b"\xa1 not text", text=True)
        assert await closed_with(ws) == 1007
    assert local.functions.events["message"] == []
    codes = [(await disconnected(local, n))["disconnectStatusCode"] for n in (1, 2)]
    assert sorted(codes) == [1003, 1007]


async def test_messages_of_one_connection_are_handled_concurrently(local):
    """Two messages at once: the second is handled while the first's function still runs."""
    release = threading.Event()
    started: list[str] = []
    slow = local.functions.message

    def message(event: dict[str, Any]) -> dict[str, Any]:
        started.append(event["body"])
        if len(started) == 1:
            release.wait(10)
        return slow(event)

    local.gateway.functions.message = message
    async with connect(local.ws_url) as ws:
        await ws.send(json.dumps({"action": "ask", "prompt": "first"}))
        await ws.send(json.dumps({"action": "cancel"}))
        await until(lambda: len(started) == 2, "both run at once")
        release.set()
        await until(lambda: len(local.functions.events["message"]) == 2, "both end")


# --- the handshake ------------------------------------------------------------------------------


async def test_connect_gets_the_query_string_and_the_clients_headers(local):
    async with connect(
        local.ws_url + "?audio=base64&token=abc", additional_headers={"Origin": "https://a.b"}
    ):
        pass
    (event,) = local.functions.events["connect"]
    assert event["queryStringParameters"] == {"audio": "base64", "token": "abc"}
    # API Gateway keeps the client's spelling of a name; uvicorn hands the upgrade over with the
    # names lowercased, so the functions read names without regard to case
    # (functions/access/origins.py).
    headers = {name.lower(): value for name, value in event["headers"].items()}
    assert headers["origin"] == "https://a.b"
    multi = {name.lower(): value for name, value in event["multiValueHeaders"].items()}
    assert multi["origin"] == ["https://a.b"]
    context = event["requestContext"]
    assert (context["routeKey"], context["eventType"]) == ("$connect", "CONNECT")
    assert context["identity"]["sourceIp"] == "127.0.0.1"
    assert context["domainName"] == f"127.0.0.1:{local.port}"


async def test_connect_and_the_authorizer_can_refuse():
    refusing = start_gateway(Recorder(refuse_with=400))
    try:
        with pytest.raises(InvalidStatus) as refused:
            async with connect(refusing.ws_url):
                pass
        assert refused.value.response.status_code == 400
        assert refused.value.response.body == b"refused by $connect"
        assert refusing.gateway.connections == {}
    finally:
        refusing.running.stop()
    guarded = start_gateway(Recorder(allow=False), authorizer=True)
    try:
        with pytest.raises(InvalidStatus) as denied:
            async with connect(guarded.ws_url + "?token=x"):
                pass
        assert denied.value.response.status_code == 403
        assert json.loads(denied.value.response.body) == {"message": "Forbidden"}
        assert guarded.functions.events["connect"] == []  # the authorizer said no first
        guarded.functions.allow = True
        async with connect(guarded.ws_url + "?token=x"):
            pass
        (event,) = guarded.functions.events["connect"]
        assert event["requestContext"]["authorizer"] == {"principalId": "alice", "team": "voice"}
        assert guarded.functions.events["authorizer"][-1]["queryStringParameters"] == {"token": "x"}
    finally:
        guarded.running.stop()


async def test_one_port_serves_the_http_routes_and_only_ws_upgrades(local):
    async with httpx.AsyncClient() as client:
        page = await client.get(local.base_url + "/")
        gone = await client.post(f"{local.base_url}/@connections/nobody", content=b"x")
    assert page.status_code == 200 and "/ws" in page.text
    assert gone.status_code == 410 and gone.headers["x-amzn-errortype"] == "GoneException"
    with pytest.raises(InvalidStatus) as elsewhere:
        async with connect(local.ws_url.replace("/ws", "/other")):
            pass
    assert elsewhere.value.response.status_code == 404
    assert local.functions.events["connect"] == []


async def test_the_pages_config_names_this_gateways_ws_url_as_the_browser_reached_it(local):
    # The page fetches config.json beside itself on every load: answered, never cached, and
    # the URL is the one the browser used (its Host header), not the address bound.
    async with httpx.AsyncClient() as client:
        plain = await client.get(f"{local.base_url}/config.json")
        forwarded = await client.get(
            f"{local.base_url}/config.json", headers={"Host": "voice.example:9443"}
        )
        # Behind a TLS proxy on this machine (uvicorn trusts 127.0.0.1's X-Forwarded-Proto).
        proxied = await client.get(
            f"{local.base_url}/config.json",
            headers={"Host": "voice.example", "X-Forwarded-Proto": "https"},
        )
    assert plain.status_code == 200
    assert plain.headers["content-type"] == "application/json"
    assert plain.headers["cache-control"] == "no-store"
    assert plain.headers["x-content-type-options"] == "nosniff"
    assert plain.json() == {"url": local.ws_url, "tickets": False}
    assert forwarded.json() == {"url": "ws://voice.example:9443/ws", "tickets": False}
    assert proxied.json() == {"url": "wss://voice.example/ws", "tickets": False}
    # The URL works: a client that takes it from config.json connects.
    async with connect(plain.json()["url"]):
        pass
    assert len(local.functions.events["connect"]) == 1


async def test_the_pages_config_says_when_connecting_needs_a_ticket_and_where_to_mint_one():
    guarded = start_gateway(Recorder(), authorizer=True)
    minting = start_gateway(
        Recorder(),
        authorizer=True,
        extra_routes=[Route("/tickets", lambda request: PlainTextResponse(""), methods=["POST"])],
    )
    try:
        async with httpx.AsyncClient() as client:
            ticketed = await client.get(f"{guarded.base_url}/config.json")
            minted = await client.get(f"{minting.base_url}/config.json")
    finally:
        guarded.running.stop()
        minting.running.stop()
    assert ticketed.status_code == 200 and ticketed.headers["cache-control"] == "no-store"
    assert ticketed.json() == {"url": guarded.ws_url, "tickets": True}
    assert minted.json() == {
        "url": minting.ws_url,
        "tickets": True,
        "ticket_url": f"{minting.base_url}/tickets",
    }


async def test_stopping_the_gateway_closes_its_connections_with_1001():
    started = start_gateway(Recorder())
    async with connect(started.ws_url) as ws:
        await started.only_connection_id(set())
        await asyncio.to_thread(started.running.stop)
        assert await closed_with(ws) == 1001
    assert (await disconnected(started))["disconnectStatusCode"] == 1001


# --- gateway -> client: @connections ------------------------------------------------------------


class RawClient:
    """A lenient WebSocket client: every frame as it arrives, its opcode and its bytes, text
    frames never decoded (a browser would fail the connection on invalid UTF-8)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.protocol = ClientProtocol(parse_uri("ws://localhost/ws"), max_size=None)
        self.pending: list[Any] = []

    @classmethod
    async def open(cls, url: str) -> RawClient:
        address = urlsplit(url)
        reader, writer = await asyncio.open_connection(address.hostname, address.port)
        client = cls(reader, writer)
        client.protocol.wsuri = parse_uri(url)
        client.protocol.send_request(client.protocol.connect())
        client.flush()
        response = await client.event()
        assert isinstance(response, HandshakeResponse) and response.status_code == 101
        return client

    def flush(self) -> None:
        self.writer.write(b"".join(self.protocol.data_to_send()))

    async def event(self) -> Any:
        while not self.pending:
            data = await asyncio.wait_for(self.reader.read(65536), 10)
            assert data, "the connection ended"
            self.protocol.receive_data(data)
            self.pending.extend(self.protocol.events_received())
        return self.pending.pop(0)

    async def message_frames(self) -> list[Frame]:
        """The frames of the next data message."""
        frames: list[Frame] = []
        while not frames or not frames[-1].fin:
            frame = await self.event()
            assert isinstance(frame, Frame)
            if frame.opcode in (Opcode.TEXT, Opcode.BINARY, Opcode.CONT):
                frames.append(frame)
        return frames

    def close(self) -> None:
        self.writer.close()


async def test_binary_posts_go_out_as_binary_frames_and_text_as_text(local):
    async with connect(local.ws_url) as ws:
        connection_id = await local.only_connection_id(set())
        assert (await local.post(connection_id, b'{"type": "voices"}')).status_code == 200
        assert await ws.recv() == '{"type": "voices"}'
        assert (await local.post(connection_id, AUDIO)).status_code == 200
        assert await ws.recv() == AUDIO
    raw = await RawClient.open(local.ws_url)
    try:
        connection_id = await local.only_connection_id({connection_id})
        await local.post(connection_id, AUDIO)
        (frame,) = await raw.message_frames()
        assert (frame.opcode, bytes(frame.data)) == (Opcode.BINARY, AUDIO)
        await local.post(connection_id, b'{"type": "turn_end"}')
        (frame,) = await raw.message_frames()
        assert (frame.opcode, bytes(frame.data)) == (Opcode.TEXT, b'{"type": "turn_end"}')
    finally:
        raw.close()


async def test_text_posts_carry_raw_bytes_in_text_frames_which_clients_refuse_with_1007(
    text_posts,
):
    local = text_posts
    raw = await RawClient.open(local.ws_url)
    try:
        connection_id = await local.only_connection_id(set())
        assert (await local.post(connection_id, AUDIO)).status_code == 200
        (frame,) = await raw.message_frames()
        assert (frame.opcode, bytes(frame.data)) == (Opcode.TEXT, AUDIO)  # exactly, not UTF-8
        await local.post(connection_id, b'{"type": "turn_end"}')
        (frame,) = await raw.message_frames()
        assert (frame.opcode, bytes(frame.data)) == (Opcode.TEXT, b'{"type": "turn_end"}')
    finally:
        raw.close()
    async with connect(local.ws_url) as ws:
        connection_id = await local.only_connection_id({connection_id})
        await local.post(connection_id, AUDIO)
        with pytest.raises(ConnectionClosed):
            await asyncio.wait_for(ws.recv(), 10)
    assert ws.protocol.close_sent.code == 1007  # the client failed the connection


async def test_a_post_over_32_kb_arrives_in_frames_of_at_most_32_kb(local):
    body = message_of(100 * KB).encode()
    raw = await RawClient.open(local.ws_url)
    try:
        connection_id = await local.only_connection_id(set())
        assert (await local.post(connection_id, body)).status_code == 200
        frames = await raw.message_frames()
    finally:
        raw.close()
    assert frames[0].opcode == Opcode.TEXT
    assert all(frame.opcode == Opcode.CONT for frame in frames[1:])
    assert all(len(frame.data) <= MAX_FRAME_BYTES for frame in frames)
    assert b"".join(bytes(frame.data) for frame in frames) == body
    async with connect(local.ws_url) as ws:  # a client reassembles it
        connection_id = await local.only_connection_id({connection_id})
        await local.post(connection_id, body)
        assert (await ws.recv()).encode() == body


async def test_posts_over_128_kb_are_413_and_delete_closes_the_connection(local):
    async with connect(local.ws_url) as ws:
        connection_id = await local.only_connection_id(set())
        too_large = await local.post(connection_id, b"x" * (MAX_MESSAGE_BYTES + 1))
        assert too_large.status_code == 413
        assert too_large.headers["x-amzn-errortype"] == "PayloadTooLargeException"
        assert (await local.post(connection_id, b"x" * MAX_MESSAGE_BYTES)).status_code == 200
        assert len(await ws.recv()) == MAX_MESSAGE_BYTES
        async with httpx.AsyncClient() as client:
            url = f"{local.base_url}/@connections/{connection_id}"
            info = (await client.get(url)).json()
            assert info["identity"]["sourceIp"] == "127.0.0.1"
            assert (await client.delete(url)).status_code == 204
        assert await closed_with(ws) == 1000
    assert (await local.post(connection_id, b"x")).status_code == 410


def test_post_frames_must_be_binary_or_text():
    with pytest.raises(ValueError, match="post_frames"):
        Gateway(
            GatewayFunctions(connect=dict, disconnect=dict, message=dict),
            post_frames="base64",  # type: ignore[arg-type]
        )
