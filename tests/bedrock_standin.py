"""A real HTTP server on a loopback port that speaks Bedrock's ConverseStream wire protocol.

``POST /model/{modelId}/converse-stream`` answers ``200`` with
``content-type: application/vnd.amazon.eventstream`` and a chunked body of event-stream messages,
encoded as ``eventstream_encoding`` does. A real boto3 ``bedrock-runtime`` client pointed at it
(``endpoint_url``) goes through its whole HTTP stack: connection pool, timeouts, retries, the
event-stream parser. The stand-in can hold the headers or the first event, stall, or hang up, and
records the JSON request bodies it received and whether (and when) the client disconnected while
it was streaming.

Holds wait in short steps and watch the socket, so a client that closes its connection during a
hold is seen at once, and ``close()`` never waits for a long hold to end.
"""

from __future__ import annotations

import contextlib
import json
import select
import socket
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from types import TracebackType
from typing import Any

from eventstream_encoding import encode_message
from loopback_http import LoopbackServer

_POLL_S = 0.02  # how often a hold looks at the socket: the precision of ``disconnected_at``


def event(kind: str, body: dict[str, Any]) -> bytes:
    """One ConverseStream event (``messageStart``, ``contentBlockDelta``, ...), encoded."""
    headers = {":event-type": kind, ":content-type": "application/json", ":message-type": "event"}
    return encode_message(headers, json.dumps(body).encode())


def delta(text: str) -> bytes:
    return event("contentBlockDelta", {"delta": {"text": text}, "contentBlockIndex": 0})


def exception(kind: str, message: str) -> bytes:
    """An error inside the stream (``throttlingException``, ...), as Bedrock sends it."""
    headers = {
        ":exception-type": kind,
        ":content-type": "application/json",
        ":message-type": "exception",
    }
    return encode_message(headers, json.dumps({"message": message}).encode())


def tool_call(
    preamble: str, name: str, input_json: str, tool_use_id: str = "tooluse_1"
) -> list[bytes]:
    """A model message that says ``preamble``, then calls ``name`` with its input written in two
    fragments (``stopReason: tool_use``), as Bedrock streams one."""
    cut = len(input_json) // 2
    start = {"toolUse": {"toolUseId": tool_use_id, "name": name}}
    return [
        event("messageStart", {"role": "assistant"}),
        delta(preamble),
        event("contentBlockStop", {"contentBlockIndex": 0}),
        event("contentBlockStart", {"start": start, "contentBlockIndex": 1}),
        *(
            event(
                "contentBlockDelta", {"delta": {"toolUse": {"input": part}}, "contentBlockIndex": 1}
            )
            for part in (input_json[:cut], input_json[cut:])
        ),
        event("contentBlockStop", {"contentBlockIndex": 1}),
        event("messageStop", {"stopReason": "tool_use"}),
        event(
            "metadata",
            {
                "usage": {"inputTokens": 9, "outputTokens": 5, "totalTokens": 14},
                "metrics": {"latencyMs": 5},
            },
        ),
    ]


def answer(*texts: str, stop_reason: str = "end_turn") -> list[bytes]:
    """A whole model answer: messageStart, one delta per text, messageStop, metadata."""
    usage = {"inputTokens": 3, "outputTokens": len(texts), "totalTokens": 3 + len(texts)}
    return [
        event("messageStart", {"role": "assistant"}),
        *(delta(text) for text in texts),
        event("contentBlockStop", {"contentBlockIndex": 0}),
        event("messageStop", {"stopReason": stop_reason}),
        event("metadata", {"usage": usage, "metrics": {"latencyMs": 5}}),
    ]


@dataclass
class Script:
    """How the stand-in answers each request."""

    messages: Sequence[bytes] = field(default_factory=lambda: answer("Hello", " there."))
    # The messages of each request in turn (an agent's rounds); the last answers any later one.
    # None: ``messages`` answers every request.
    rounds: Sequence[Sequence[bytes]] | None = None
    hold_headers_s: float = 0.0  # before the status line: the call itself waits
    holds: Mapping[int, float] = field(default_factory=dict)  # message index: seconds before it
    hang_up_before_headers: bool = False  # close the connection without any response
    hang_up_after: int | None = None  # close the connection after this many messages


class BedrockStandin:
    """Use as a context manager; ``url`` is the ``endpoint_url`` for boto3."""

    def __init__(self, script: Script | None = None) -> None:
        self.script = script or Script()
        self.requests: list[dict[str, Any]] = []  # JSON bodies, in arrival order
        self.paths: list[str] = []
        self.client_addresses: list[tuple[str, int]] = []  # per request: same one, same connection
        self.request_received = threading.Event()
        self.headers_sent = threading.Event()
        self.headers_sent_at: float | None = None  # time.monotonic() just before they went out
        self.disconnected = threading.Event()  # the client closed the connection mid-answer
        self.disconnected_at: float | None = None  # time.monotonic() when that was seen
        self._closing = threading.Event()
        # The handler reaches this stand-in through its class: one class per stand-in.
        handler = type("Handler", (_Handler,), {"standin": self})
        self._server = LoopbackServer(handler, name="bedrock-standin")

    @property
    def url(self) -> str:
        return self._server.url

    def __enter__(self) -> BedrockStandin:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._closing.set()  # ends any hold in progress
        self._server.stop()

    # --- called by the handler threads ----------------------------------------------------------

    def _record_disconnect(self) -> None:
        if not self.disconnected.is_set():
            self.disconnected_at = time.monotonic()
            self.disconnected.set()

    def _hold(self, sock: socket.socket, seconds: float) -> bool:
        """Wait ``seconds``; False as soon as the client hung up (or the stand-in is closing)."""
        deadline = time.monotonic() + seconds
        while (remaining := deadline - time.monotonic()) > 0:
            if self._closing.is_set():
                return False
            readable, _, _ = select.select([sock], [], [], min(remaining, _POLL_S))
            if readable and _peer_closed(sock):
                self._record_disconnect()
                return False
        return True


def _peer_closed(sock: socket.socket) -> bool:
    """The client sends nothing after its request, so a readable socket means EOF or a reset."""
    try:
        return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:  # connection reset
        return True


class _Handler(BaseHTTPRequestHandler):
    standin: BedrockStandin  # set on the subclass each stand-in makes
    protocol_version = "HTTP/1.1"  # chunked bodies and keep-alive, like Bedrock's endpoint

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep test output quiet

    def do_POST(self) -> None:
        standin = self.standin
        script = standin.script
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        standin.paths.append(self.path)
        standin.client_addresses.append(self.client_address[:2])
        standin.requests.append(json.loads(body or b"{}"))
        standin.request_received.set()
        if not self.path.endswith("/converse-stream"):
            self._send_json(404, {"message": f"no route for {self.path}"})
            return
        if script.hang_up_before_headers:
            self._hang_up()
            return
        if not standin._hold(self.connection, script.hold_headers_s):
            self._hang_up()
            return
        # Recorded before they go out: once they have, the client may act on them (and a test
        # look at this) before this thread runs again.
        standin.headers_sent_at = time.monotonic()
        standin.headers_sent.set()
        self.send_response(200)
        self.send_header("Content-Type", "application/vnd.amazon.eventstream")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("x-amzn-RequestId", "standin-request")
        self.end_headers()
        self.wfile.flush()
        messages = script.messages
        if script.rounds is not None:
            messages = script.rounds[min(len(standin.requests), len(script.rounds)) - 1]
        try:
            for index, message in enumerate(messages):
                if script.hang_up_after is not None and index >= script.hang_up_after:
                    self._hang_up()
                    return
                if not standin._hold(self.connection, script.holds.get(index, 0.0)):
                    self._hang_up()
                    return
                self.wfile.write(b"%x\r\n%s\r\n" % (len(message), message))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            standin._record_disconnect()
            self.close_connection = True

    def _send_json(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _hang_up(self) -> None:
        self.close_connection = True
        with contextlib.suppress(OSError):  # the client hung up first
            self.connection.shutdown(socket.SHUT_RDWR)
