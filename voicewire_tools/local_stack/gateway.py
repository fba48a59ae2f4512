"""An API Gateway WebSocket API emulator: the client side, the route selection, the limits, and
the ``@connections`` management API, so the functions' boto3 code runs unchanged.

- ``WS /ws``: ``$connect`` (with the query string, through the authorizer when tokens are on),
  each text frame routed on ``$request.body.action`` (``$default`` otherwise), ``$disconnect``.
  Like API Gateway: a binary frame from a client closes the connection with 1003, a frame over
  32 KB or a message over 128 KB with 1009.
- ``POST /@connections/{id}``: the body goes to the client as a *text* frame when it is UTF-8
  text and as a *binary* frame otherwise (voicewire's audio frames start with 0xA1, which is
  never valid UTF-8); 410 ``GoneException`` for a closed or unknown connection, 413
  ``PayloadTooLargeException`` over 128 KB. ``GET`` returns the connection's info, ``DELETE``
  closes it.
- ``GET /``: the browser page (``web/index.html``); ``GET /{name}`` the files it loads from its
  own folder (``app.js``, ``style.css``, ...), nothing else: a static host's view of ``web/``.

As unkind as AWS, by default: the messages of one connection are handled concurrently (API
Gateway invokes the route's function for each message as it arrives, and nothing orders two
invocations), and ``@connections`` posts can be given a latency (a signed HTTPS round trip on
AWS takes tens of ms) and throttled on request (``PostFaults``). ``ordered_messages=True`` handles
one message at a time per connection, in arrival order, for a person trying things by hand.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from voicewire.client_protocol import CLIENT_ACTIONS, MAX_FRAME_BYTES, MAX_MESSAGE_BYTES
from voicewire_tools.page_headers import SECURITY_HEADERS

logger = logging.getLogger(__name__)

ROUTES = frozenset(CLIENT_ACTIONS)
API_ID = "local"
STAGE = "local"
METHOD_ARN = f"arn:aws:execute-api:local:000000000000:{API_ID}/{STAGE}/$connect"

Handler = Callable[[dict[str, Any]], dict[str, Any]]

# The page's own files, by name: one folder deep, no dot files, only what a page loads.
PAGE_ASSET = re.compile(r"[a-z][a-z0-9_-]*\.(?:js|css|svg|png|ico)")


@dataclass
class GatewayFunctions:
    """The Lambda handlers the gateway invokes (sync functions, run on worker threads)."""

    connect: Handler
    disconnect: Handler
    message: Handler
    authorizer: Handler | None = None  # None: no token needed


@dataclass
class PostFaults:
    """What the ``@connections`` API does to posts, to show their cost locally."""

    latency_seconds: float = 0.0  # added to every POST, outside the connection's send lock
    throttle_next: int = 0  # the next N posts answer 429 LimitExceededException
    posts: int = 0  # every POST received (throttled ones included)


@dataclass
class LocalConnection:
    connection_id: str
    websocket: WebSocket
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


class Gateway:
    def __init__(
        self,
        functions: GatewayFunctions,
        page: Path | None = None,
        ordered_messages: bool = False,
        post_faults: PostFaults | None = None,
        extra_routes: list[Route] | None = None,
    ) -> None:
        self.functions = functions
        self.extra_routes = extra_routes or []
        self.page = page
        self.ordered_messages = ordered_messages
        self.post_faults = post_faults or PostFaults()
        self.connections: dict[str, LocalConnection] = {}
        self._handling: set[asyncio.Task[Any]] = set()

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/", self.index, methods=["GET"]),
                WebSocketRoute("/ws", self.websocket),
                Route(
                    "/@connections/{connection_id}",
                    self.management,
                    methods=["POST", "GET", "DELETE"],
                ),
                *self.extra_routes,
                Route("/{name}", self.asset, methods=["GET"]),  # last: every other route first
            ]
        )

    async def index(self, request: Request) -> Response:
        if self.page is None or not self.page.is_file():
            return PlainTextResponse("voicewire local stack: WebSocket at /ws\n")
        return FileResponse(self.page, headers=SECURITY_HEADERS)

    async def asset(self, request: Request) -> Response:
        """A file next to the page (its scripts and style), as a static host would serve it."""
        name = request.path_params["name"]
        if self.page is None or not PAGE_ASSET.fullmatch(name):
            return PlainTextResponse("Not Found", 404)
        path = self.page.parent / name
        if not path.is_file():
            return PlainTextResponse("Not Found", 404)
        return FileResponse(path, headers=SECURITY_HEADERS)

    # --- the client side ------------------------------------------------------------------

    async def websocket(self, websocket: WebSocket) -> None:
        client = websocket.client
        connection = LocalConnection(
            connection_id=base64.b64encode(os.urandom(12)).decode().replace("/", "_"),
            websocket=websocket,
            source_ip=client.host if client else "127.0.0.1",
            user_agent=websocket.headers.get("user-agent", ""),
        )
        domain = websocket.headers.get("host", "127.0.0.1")
        query = dict(websocket.query_params) or None
        authorizer_context = None
        if self.functions.authorizer is not None:
            verdict = await asyncio.to_thread(
                self.functions.authorizer,
                {
                    "type": "REQUEST",
                    "methodArn": METHOD_ARN,
                    "headers": dict(websocket.headers),
                    "queryStringParameters": query,
                },
            )
            effect = verdict["policyDocument"]["Statement"][0]["Effect"]
            if effect != "Allow":
                await websocket.send_denial_response(JSONResponse({"message": "Forbidden"}, 403))
                return
            authorizer_context = {
                "principalId": verdict["principalId"],
                **verdict.get("context", {}),
            }
        headers = dict(websocket.headers)
        connect_event = {
            "headers": headers,
            "multiValueHeaders": {key: [value] for key, value in headers.items()},
            "queryStringParameters": query,
            "requestContext": _request_context(
                connection, "$connect", "CONNECT", domain, authorizer=authorizer_context
            ),
            "isBase64Encoded": False,
        }
        result = await asyncio.to_thread(self.functions.connect, connect_event)
        status = int(result.get("statusCode", 200))
        if status != 200:
            await websocket.send_denial_response(PlainTextResponse(result.get("body", ""), status))
            return
        await websocket.accept()
        self.connections[connection.connection_id] = connection
        close_code, reason = 1000, "Client closed the connection"
        try:
            close_code, reason = await self._receive(connection, domain)
        finally:
            connection.open = False
            disconnect_event = {
                "headers": headers,
                "multiValueHeaders": {key: [value] for key, value in headers.items()},
                "requestContext": _request_context(
                    connection,
                    "$disconnect",
                    "DISCONNECT",
                    domain,
                    disconnectStatusCode=close_code,
                    disconnectReason=reason,
                ),
                "isBase64Encoded": False,
            }
            await asyncio.to_thread(self.functions.disconnect, disconnect_event)

    async def _receive(self, connection: LocalConnection, domain: str) -> tuple[int, str]:
        websocket = connection.websocket
        while True:
            try:
                message = await websocket.receive()
            except WebSocketDisconnect as gone:
                return gone.code, "Client closed the connection"
            if message["type"] == "websocket.disconnect":
                return int(message.get("code", 1005)), "Client closed the connection"
            connection.last_active_at = time.time()
            if message.get("bytes") is not None:
                await self._close(connection, 1003, "Binary frames are not supported")
                return 1003, "Binary frames are not supported"
            body = message.get("text") or ""
            size = len(body.encode("utf-8"))
            if size > MAX_FRAME_BYTES:
                await self._close(connection, 1009, "Frame size exceeds the 32 KB limit")
                return 1009, "Frame too large"
            route = route_for(body)
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
            if self.ordered_messages:
                await asyncio.to_thread(self.functions.message, event)
                continue
            # As API Gateway: each message's invocation starts as it arrives, and a "cancel"
            # right after an "ask" may be handled before it, or while it runs.
            task = asyncio.create_task(asyncio.to_thread(self.functions.message, event))
            self._handling.add(task)
            task.add_done_callback(self._handled)

    def _handled(self, task: asyncio.Task[Any]) -> None:
        self._handling.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.error("the message function failed", exc_info=task.exception())

    async def _close(self, connection: LocalConnection, code: int, reason: str) -> None:
        connection.open = False
        async with connection.send_lock:
            with contextlib.suppress(RuntimeError):  # already closed
                await connection.websocket.close(code=code, reason=reason)

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
        async with connection.send_lock:
            try:
                try:
                    await connection.websocket.send_text(data.decode("utf-8"))
                except UnicodeDecodeError:
                    await connection.websocket.send_bytes(data)
            except (RuntimeError, WebSocketDisconnect, OSError):
                connection.open = False
                return _aws_error(410, "GoneException", "The connection is gone")
        return Response(status_code=200)


def _iso(moment: float) -> str:
    return datetime.fromtimestamp(moment, UTC).isoformat()


def _aws_error(status: int, kind: str, message: str) -> JSONResponse:
    """The shape boto3's rest-json parser turns into the named exception."""
    return JSONResponse({"message": message}, status, headers={"x-amzn-ErrorType": kind})
