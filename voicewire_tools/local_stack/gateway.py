"""An API Gateway WebSocket API emulator: the client side, the route selection, the limits, and
the ``@connections`` management API, so the functions' boto3 code runs unchanged.

- ``WS /ws``: ``$connect`` (with the query string, through the authorizer when tokens are on),
  each text message routed on ``$request.body.action`` (``$default`` otherwise), ``$disconnect``.
  Like API Gateway: a binary frame from a client closes the connection with 1003; a *frame* over
  32 KB, or a *message* over 128 KB in any number of frames, closes it with 1009. A message of
  up to 128 KB sent as frames of up to 32 KB is reassembled and handled whole.
- ``POST /@connections/{id}``: the body goes to the client as one message, in frames of at most
  32 KB (so over 32 KB it arrives fragmented, as the quota says it must); 410
  ``GoneException`` for a closed or unknown connection, 413 ``PayloadTooLargeException`` over
  128 KB. Which frame type it goes out as is ``post_frames`` (``voicewire up --post-frames``):
  ``binary`` (the default): a *text* frame when the body is UTF-8 text, a *binary* frame
  otherwise (voicewire's audio frames start with 0xA1, which is never valid UTF-8); ``text``:
  always a text frame carrying the posted bytes exactly, invalid UTF-8 included, as a gateway
  that sends text frames would, so a standards-following client fails the connection with 1007
  on raw audio. AWS documents neither (``docs/aws-facts.md``); ``text`` shows what the base64
  fallback is for. ``GET`` returns the connection's info, ``DELETE`` closes it.
- ``GET /``, ``GET /config.json`` and the page's files: ``voicewire_tools.local_stack.page_site``.

Frames are judged as frames. An ASGI server hands an application whole reassembled messages,
which cannot tell one 120 KB frame (refused) from four 30 KB ones (accepted). So uvicorn serves
the HTTP routes (a Starlette app), and hands each WebSocket upgrade on the same port to this
module's connection class (uvicorn's ``ws=`` protocol hook), a ``websockets`` asyncio
connection whose frame parser enforces both limits as it reads each frame header: a frame's
payload over 32 KB, or one that would take its message past 128 KB, fails the connection with
1009 before the payload is read. One port and one base URL still serve the page, ``/ws`` and
``@connections``. No compression extension is negotiated, so the sizes judged are the sizes on
the wire; the gateway sends no pings of its own (clients keep a connection alive, as on AWS).

As unkind as AWS, by default: the messages of one connection are handled concurrently (API
Gateway invokes the route's function for each message as it arrives, and nothing orders two
invocations), and ``@connections`` posts can be given a latency (a signed HTTPS round trip on
AWS takes tens of ms) and throttled on request (``PostFaults``). ``ordered_messages=True`` handles
one message at a time per connection, in arrival order, for a person trying things by hand.

The limits are API Gateway's quotas ("Quotas for configuring and running a WebSocket in API
Gateway"): WebSocket frame size 32 KB, message payload size 128 KB, and its footnote: a message
larger than 32 KB must be split into frames of 32 KB or less, which applies to ``@connections``
commands too, and a larger message (or a larger frame) closes the connection with code 1009.
https://docs.aws.amazon.com/apigateway/latest/developerguide/apigateway-execution-service-websocket-limits-table.html
Binary frames from clients ("Binary media types for WebSocket APIs in API Gateway"): rejected,
the client disconnected with code 1003.
https://docs.aws.amazon.com/apigateway/latest/developerguide/websocket-api-develop-binary-media-types.html
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import contextlib
import json
import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http import HTTPStatus
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qsl, urlsplit

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from websockets.asyncio.server import Server, ServerConnection
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed
from websockets.frames import CloseCode
from websockets.http11 import Request as HandshakeRequest
from websockets.http11 import Response as HandshakeResponse
from websockets.protocol import State
from websockets.server import ServerProtocol

from voicewire.client_protocol import CLIENT_ACTIONS, MAX_FRAME_BYTES, MAX_MESSAGE_BYTES
from voicewire_tools.local_stack.page_site import WS_PATH, PageSite

logger = logging.getLogger(__name__)
# websockets' own logger, not ours: at DEBUG it logs every handshake's request line, and a
# connect ticket travels in the query string (docs/security.md: no ticket in any log line).
WEBSOCKETS_LOGGER = logging.getLogger("websockets.server")

ROUTES = frozenset(CLIENT_ACTIONS)
API_ID = "local"
STAGE = "local"
METHOD_ARN = f"arn:aws:execute-api:local:000000000000:{API_ID}/{STAGE}/$connect"
OPEN_TIMEOUT = 10.0  # seconds for a client to finish its opening handshake
CLOSE_TIMEOUT = 10.0  # seconds to wait for a client's answer to a close frame

# How ``@connections`` bodies go out: see the module's docstring.
PostFrames = Literal["binary", "text"]
POST_FRAMES: tuple[PostFrames, ...] = ("binary", "text")

Handler = Callable[[dict[str, Any]], dict[str, Any]]

TICKETS_PATH = "/tickets"  # the local stack's ticket mint (POST), a route it adds with tokens on


@dataclass
class GatewayFunctions:
    """The Lambda handlers the gateway invokes (sync functions, run on worker threads)."""

    connect: Handler
    disconnect: Handler
    message: Handler
    authorizer: Handler | None = None  # None: no token needed
    # Routes with a function of their own and a route response (two-way): API Gateway sends
    # the body the function returns to the client (``listen``, stacks/voice_api.py).
    two_way: Mapping[str, Handler] = field(default_factory=dict)


@dataclass
class PostFaults:
    """What the ``@connections`` API does to posts, to show their cost locally."""

    latency_seconds: float = 0.0  # added to every POST, outside the connection's send lock
    throttle_next: int = 0  # the next N posts answer 429 LimitExceededException
    posts: int = 0  # every POST received (throttled ones included)


@dataclass
class LocalConnection:
    connection_id: str
    websocket: ServerConnection
    source_ip: str
    user_agent: str
    connected_at: float = field(default_factory=time.time)
    last_active_at: float = field(default_factory=time.time)
    open: bool = True
    send_lock: asyncio.Lock = field(default_factory=asyncio.Lock)


def _epoch_ms(moment: float) -> int:
    return int(moment * 1000)


def _request_context(
    connection: LocalConnection, route: str, event_type: str, domain: str, **extra: Any
) -> dict[str, Any]:
    now = time.time()
    request_id = base64.b64encode(os.urandom(9)).decode()
    return {
        "routeKey": route,
        "eventType": event_type,
        "extendedRequestId": request_id,
        "requestTime": datetime.fromtimestamp(now, UTC).strftime("%d/%b/%Y:%H:%M:%S +0000"),
        "messageDirection": "IN",
        "stage": STAGE,
        "connectedAt": _epoch_ms(connection.connected_at),
        "requestTimeEpoch": _epoch_ms(now),
        "identity": {"sourceIp": connection.source_ip, "userAgent": connection.user_agent},
        "requestId": request_id,
        "domainName": domain,
        "connectionId": connection.connection_id,
        "apiId": API_ID,
        **extra,
    }


def route_for(body: str) -> str:
    """``$request.body.action`` if it names a route, else ``$default``."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):  # not JSON, a 5,000-digit number, nesting too deep
        return "$default"
    action = data.get("action") if isinstance(data, dict) else None
    return action if isinstance(action, str) and action in ROUTES else "$default"


def frames_of(data: bytes) -> Iterator[bytes]:
    """``data`` in pieces of at most 32 KB: the frames of one ``@connections`` message."""
    for start in range(0, len(data), MAX_FRAME_BYTES):
        yield data[start : start + MAX_FRAME_BYTES]


def is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


@dataclass
class _Handshake:
    """What ``$connect`` learned, kept for the connection's life and its ``$disconnect``."""

    connection: LocalConnection
    headers: dict[str, str]
    multi_headers: dict[str, list[str]]
    domain: str


class _Handovers(Server):
    """websockets' bookkeeping for connections that uvicorn accepted and handed over: the
    handler task each one starts. It listens on nothing (uvicorn does); ``is_serving`` says
    yes for as long as uvicorn gives it connections."""

    def __init__(self, handler: Callable[[ServerConnection], Any]) -> None:
        super().__init__(_not_listening, handler, WEBSOCKETS_LOGGER)

    def is_serving(self) -> bool:
        return True


async def _not_listening() -> asyncio.Server:
    raise RuntimeError("the gateway's WebSocket connections come from uvicorn's listener")


class GatewaySocket(ServerConnection):
    """One client connection, from the upgrade on: a ``websockets`` asyncio connection (an
    asyncio protocol) that uvicorn's HTTP protocol hands the transport to, as it would its own
    WebSocket protocol. It joins uvicorn's connections so that stopping the server closes it
    (1001, going away) and waits for it."""

    def __init__(self, gateway: Gateway, server_state: Any) -> None:
        protocol = ServerProtocol(
            # (message, frame): the parser checks each frame's length against what is left of
            # 32 KB and of the message's 128 KB before reading it, and fails with 1009.
            max_size=(MAX_MESSAGE_BYTES, MAX_FRAME_BYTES),
            extensions=None,  # no permessage-deflate: the sizes judged are the sizes sent
            logger=WEBSOCKETS_LOGGER,
        )
        super().__init__(
            protocol,
            gateway.handovers(),
            ping_interval=None,
            ping_timeout=None,
            close_timeout=CLOSE_TIMEOUT,
        )
        self.uvicorn_state = server_state
        self.handshake_info: _Handshake | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.uvicorn_state.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self.uvicorn_state.connections.discard(self)

    def shutdown(self) -> None:
        """uvicorn is stopping."""
        if self.protocol.state is State.OPEN:
            closing = self.loop.create_task(self.close(CloseCode.GOING_AWAY, "Going away"))
            self.uvicorn_state.tasks.add(closing)
            closing.add_done_callback(self.uvicorn_state.tasks.discard)
        elif self.protocol.state is State.CONNECTING:
            self.transport.close()


class Gateway:
    def __init__(
        self,
        functions: GatewayFunctions,
        page: Path | None = None,
        ordered_messages: bool = False,
        post_faults: PostFaults | None = None,
        extra_routes: list[Route] | None = None,
        post_frames: PostFrames = "binary",
    ) -> None:
        if post_frames not in POST_FRAMES:
            raise ValueError(f"post_frames must be one of {POST_FRAMES}, not {post_frames!r}")
        self.functions = functions
        self.extra_routes = extra_routes or []
        self.page = page
        self.ordered_messages = ordered_messages
        self.post_faults = post_faults or PostFaults()
        self.post_frames: PostFrames = post_frames
        self.connections: dict[str, LocalConnection] = {}
        self._handling: set[asyncio.Task[Any]] = set()
        self._handovers: _Handovers | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # the serving loop, once it serves

    # --- serving --------------------------------------------------------------------------

    def app(self) -> Starlette:
        """The HTTP routes. WebSocket upgrades never reach it: see ``websocket_protocol``."""
        site = PageSite(
            self.page,
            tickets=lambda: self.functions.authorizer is not None,
            ticket_path=lambda: TICKETS_PATH if self._mints_tickets() else None,
        )
        return Starlette(
            routes=site.routes(
                Route(
                    "/@connections/{connection_id}",
                    self.management,
                    methods=["POST", "GET", "DELETE"],
                ),
                *self.extra_routes,
            )
        )

    def _mints_tickets(self) -> bool:
        return any(
            isinstance(route, Route) and route.path == TICKETS_PATH and "POST" in route.methods
            for route in self.extra_routes
        )

    def websocket_protocol(self) -> type[GatewaySocket]:
        """uvicorn's ``ws=`` setting for ``app()``: every WebSocket upgrade on the port becomes
        one of this gateway's connections (upgrades to any path but ``/ws`` answer 404)."""
        gateway = self

        class Socket(GatewaySocket):
            def __init__(self, config: Any, server_state: Any, app_state: Any) -> None:
                super().__init__(gateway, server_state)

        return Socket

    def uvicorn_settings(self) -> dict[str, Any]:
        """What ``uvicorn.Config`` needs, beside the app, to serve this gateway."""
        return {"ws": self.websocket_protocol()}

    def handovers(self) -> _Handovers:
        if self._handovers is None:  # made on the serving loop, by its first connection
            self._handovers = _Handovers(self._serve_socket)
            self._loop = asyncio.get_running_loop()
        return self._handovers

    async def close_connections(self) -> None:
        """Close every client connection (1001, going away) and wait for each one's
        ``$disconnect``, which cancels its turn. The listener and the management API stay up:
        a worker still speaking is then told ``GoneException`` for its next post, as on AWS,
        instead of finding the port closed and retrying into it."""
        handlers = list(self.handovers().handler_tasks)
        closing = [
            self._close(connection, CloseCode.GOING_AWAY, "Going away")
            for connection in list(self.connections.values())
            if connection.open
        ]
        await asyncio.gather(*closing, return_exceptions=True)
        await asyncio.gather(*handlers, return_exceptions=True)

    def close_connections_from_outside(self, within: float) -> None:
        """``close_connections`` from another thread (the stack stopping), waiting at most
        ``within`` seconds; nothing to do if no client ever connected."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            closed = asyncio.run_coroutine_threadsafe(self.close_connections(), loop)
        except RuntimeError:  # the loop ended meanwhile: nothing is served any more
            return
        try:
            closed.result(within)
        except concurrent.futures.TimeoutError:
            closed.cancel()  # the listener's own stop closes whatever is left

    # --- the client side ------------------------------------------------------------------

    async def _serve_socket(self, socket: ServerConnection) -> None:
        """A handed-over connection's life: the handshake (``$connect`` decides it), the
        messages, ``$disconnect``. As websockets' own server runs a connection."""
        assert isinstance(socket, GatewaySocket)
        try:
            try:
                async with asyncio.timeout(OPEN_TIMEOUT):
                    await socket.handshake(None, self._connect, server_header=None)
            except Exception:  # a client gone or too slow mid-handshake; a function's failure
                # is already logged by websockets, and answered 500 as API Gateway would.
                logger.debug("a WebSocket handshake did not complete", exc_info=True)
                socket.transport.abort()
                return
            info = socket.handshake_info
            if socket.protocol.state is not State.OPEN or info is None:
                socket.transport.abort()  # refused: the answer is written, nothing follows
                return
            try:
                async with socket:
                    await self._session(info)
            except Exception:
                logger.exception("a gateway connection failed")
                socket.transport.abort()
        finally:
            task = asyncio.current_task()
            if task is not None:
                self.handovers().handler_tasks.discard(task)

    async def _connect(
        self, socket: ServerConnection, request: HandshakeRequest, response: HandshakeResponse
    ) -> HandshakeResponse | None:
        """After websockets has checked the upgrade request: the route, the authorizer and
        ``$connect``, which may refuse the connection with their own answer."""
        assert isinstance(socket, GatewaySocket)
        if response.status_code != HTTPStatus.SWITCHING_PROTOCOLS:
            return None  # a malformed upgrade: websockets' 400 or 426, no function runs
        target = urlsplit(request.path)
        if target.path != WS_PATH:
            return _handshake_answer(404, "Not Found\n")
        peer = socket.remote_address
        connection = LocalConnection(
            connection_id=base64.b64encode(os.urandom(12)).decode().replace("/", "_"),
            websocket=socket,
            source_ip=peer[0] if peer else "127.0.0.1",
            user_agent=request.headers.get("User-Agent", ""),
        )
        domain = request.headers.get("Host", "127.0.0.1")
        # API Gateway keeps the client's spelling of header names (events/apigw/connect.json);
        # uvicorn, which parsed the upgrade, hands it over lowercased, so the functions must (and
        # do) read names without regard to case.
        headers = dict(request.headers.raw_items())
        multi_headers: dict[str, list[str]] = {}
        for name, value in request.headers.raw_items():
            multi_headers.setdefault(name, []).append(value)
        query = dict(parse_qsl(target.query, keep_blank_values=True)) or None
        authorizer_context = None
        if self.functions.authorizer is not None:
            verdict = await asyncio.to_thread(
                self.functions.authorizer,
                {
                    "type": "REQUEST",
                    "methodArn": METHOD_ARN,
                    "headers": headers,
                    "queryStringParameters": query,
                },
            )
            effect = verdict["policyDocument"]["Statement"][0]["Effect"]
            if effect != "Allow":
                return _handshake_answer(
                    403, json.dumps({"message": "Forbidden"}), "application/json"
                )
            authorizer_context = {
                "principalId": verdict["principalId"],
                **verdict.get("context", {}),
            }
        connect_event = {
            "headers": headers,
            "multiValueHeaders": multi_headers,
            "queryStringParameters": query,
            "requestContext": _request_context(
                connection, "$connect", "CONNECT", domain, authorizer=authorizer_context
            ),
            "isBase64Encoded": False,
        }
        result = await asyncio.to_thread(self.functions.connect, connect_event)
        status = int(result.get("statusCode", 200))
        if status != 200:
            return _handshake_answer(status, str(result.get("body", "")))
        socket.handshake_info = _Handshake(connection, headers, multi_headers, domain)
        return None

    async def _session(self, info: _Handshake) -> None:
        connection = info.connection
        self.connections[connection.connection_id] = connection
        close_code, reason = 1000, "Client closed the connection"
        try:
            close_code, reason = await self._receive(connection, info.domain)
        finally:
            connection.open = False
            disconnect_event = {
                "headers": info.headers,
                "multiValueHeaders": info.multi_headers,
                "requestContext": _request_context(
                    connection,
                    "$disconnect",
                    "DISCONNECT",
                    info.domain,
                    disconnectStatusCode=close_code,
                    disconnectReason=reason,
                ),
                "isBase64Encoded": False,
            }
            await asyncio.to_thread(self.functions.disconnect, disconnect_event)

    async def _receive(self, connection: LocalConnection, domain: str) -> tuple[int, str]:
        socket = connection.websocket
        while True:
            try:
                # A whole message: the parser has already refused an oversize frame or message
                # (1009) and a text frame that is not UTF-8 (1007), which end up here.
                body = await socket.recv()
            except ConnectionClosed as closed:
                return _how_it_closed(closed)
            connection.last_active_at = time.time()
            if isinstance(body, bytes):
                await self._close(connection, 1003, "Binary frames are not supported")
                return 1003, "Binary frames are not supported"
            route = route_for(body)
            handler = self.functions.two_way.get(route, self.functions.message)
            event = {
                "requestContext": _request_context(
                    connection,
                    route,
                    "MESSAGE",
                    domain,
                    messageId=base64.b64encode(os.urandom(9)).decode(),
                ),
                "body": body,
                "isBase64Encoded": False,
            }
            if route in self.functions.two_way:
                # Its answer is sent when the function returns; nothing orders it with the
                # one-way routes' posts (as on API Gateway).
                task = asyncio.create_task(self._answer(connection, handler, event))
                self._handling.add(task)
                task.add_done_callback(self._handled)
                continue
            if self.ordered_messages:
                await asyncio.to_thread(handler, event)
                continue
            # As API Gateway: each message's invocation starts as it arrives, and a "cancel"
            # right after an "ask" may be handled before it, or while it runs.
            task = asyncio.create_task(asyncio.to_thread(handler, event))
            self._handling.add(task)
            task.add_done_callback(self._handled)

    async def _answer(
        self, connection: LocalConnection, handler: Handler, event: dict[str, Any]
    ) -> None:
        """A two-way route: the integration's response body, sent to the client as API Gateway
        sends a route response (a text frame; nothing when the function returned no body). A
        function that fails is answered as API Gateway answers it."""
        try:
            result = await asyncio.to_thread(handler, event)
        except Exception:
            logger.exception("a two-way route's function failed")
            body = json.dumps(
                {
                    "message": "Internal server error",
                    "connectionId": connection.connection_id,
                    "requestId": event["requestContext"]["requestId"],
                }
            )
        else:
            body = result.get("body") if isinstance(result, dict) else None
        if not isinstance(body, str) or not connection.open:
            return
        async with connection.send_lock:
            with contextlib.suppress(ConnectionClosed):
                await connection.websocket.send(body, text=True)

    def _handled(self, task: asyncio.Task[Any]) -> None:
        self._handling.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.error("the message function failed", exc_info=task.exception())

    async def _close(self, connection: LocalConnection, code: int, reason: str) -> None:
        connection.open = False
        async with connection.send_lock:
            await connection.websocket.close(code, reason)  # idempotent; waits for the reply

    # --- the management API ---------------------------------------------------------------

    async def management(self, request: Request) -> Response:
        connection = self.connections.get(request.path_params["connection_id"])
        if connection is None or not connection.open:
            return _aws_error(410, "GoneException", "The connection is gone")
        if request.method == "GET":
            # The wire names of GetConnection's response (boto3 maps them to ConnectedAt...).
            return JSONResponse(
                {
                    "connectedAt": _iso(connection.connected_at),
                    "identity": {
                        "sourceIp": connection.source_ip,
                        "userAgent": connection.user_agent,
                    },
                    "lastActiveAt": _iso(connection.last_active_at),
                }
            )
        if request.method == "DELETE":
            await self._close(connection, 1000, "Closed by the server")
            return Response(status_code=204)
        data = await request.body()
        faults = self.post_faults
        faults.posts += 1
        if faults.latency_seconds:
            await asyncio.sleep(faults.latency_seconds)
        if faults.throttle_next > 0:
            faults.throttle_next -= 1
            return _aws_error(429, "LimitExceededException", "Rate exceeded")
        if len(data) > MAX_MESSAGE_BYTES:
            return _aws_error(413, "PayloadTooLargeException", "Payload is over 128 KB")
        # "text": the posted bytes in a text frame whatever they are; websockets writes bytes
        # given with text=True as they are, without checking that they are UTF-8.
        text = self.post_frames == "text" or is_utf8(data)
        # One frame up to 32 KB; past it, 32 KB frames of one message (the quota's footnote).
        message = data if len(data) <= MAX_FRAME_BYTES else list(frames_of(data))
        async with connection.send_lock:
            try:
                await connection.websocket.send(message, text=text)
            except ConnectionClosed:
                connection.open = False
                return _aws_error(410, "GoneException", "The connection is gone")
        return Response(status_code=200)


def _how_it_closed(closed: ConnectionClosed) -> tuple[int, str]:
    """The ``$disconnect`` event's code and reason: the side that closed first says."""
    if closed.rcvd is not None and (closed.sent is None or closed.rcvd_then_sent):
        return closed.rcvd.code, "Client closed the connection"
    if closed.sent is not None:
        return closed.sent.code, closed.sent.reason or "Closed by the gateway"
    return int(CloseCode.ABNORMAL_CLOSURE), "Connection lost"


def _handshake_answer(
    status: int, body: str, content_type: str = "text/plain"
) -> HandshakeResponse:
    """An HTTP answer instead of the upgrade (a browser sees only close 1006)."""
    data = body.encode()
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = ""
    headers = Headers(
        [
            ("Connection", "close"),
            ("Content-Length", str(len(data))),
            ("Content-Type", f"{content_type}; charset=utf-8"),
        ]
    )
    return HandshakeResponse(status, phrase, headers, data)


def _iso(moment: float) -> str:
    return datetime.fromtimestamp(moment, UTC).isoformat()


def _aws_error(status: int, kind: str, message: str) -> JSONResponse:
    """The shape boto3's rest-json parser turns into the named exception."""
    return JSONResponse({"message": message}, status, headers={"x-amzn-ErrorType": kind})
