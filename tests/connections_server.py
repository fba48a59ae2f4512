"""A tiny real ``@connections`` endpoint on a loopback port, for the relay's tests.

It answers ``POST /@connections/{id}`` as a script says (status, error type, delay) and logs
every HTTP request with when it started and ended, so a test can count what really went over
the wire and see which posts overlapped.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler

from loopback_http import LoopbackServer


@dataclass(frozen=True)
class Answer:
    status: int = 200
    error_type: str | None = None  # sent as ``x-amzn-ErrorType``, as API Gateway does
    delay: float = 0.0  # seconds before answering: a post's round trip

    @staticmethod
    def error(status: int, error_type: str, delay: float = 0.0) -> Answer:
        return Answer(status, error_type, delay)


@dataclass
class Request:
    connection_id: str
    body: bytes
    started: float  # time.monotonic() when the request was read
    ended: float = 0.0  # ... and when its answer was sent
    status: int = 0

    @property
    def is_text_delta(self) -> bool:
        return self.body[:1] == b"{" and json.loads(self.body).get("type") == "text_delta"


# Chooses the answer of a request: (its index among all requests, the request) -> Answer.
Script = Callable[[int, Request], Answer]


def always(answer: Answer) -> Script:
    return lambda index, request: answer


def first_then(count: int, first: Answer, then: Answer = Answer()) -> Script:
    return lambda index, request: first if index < count else then


@dataclass
class ConnectionsServer:
    script: Script = field(default_factory=lambda: always(Answer()))
    requests: list[Request] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._server = LoopbackServer(self._handler(), name="connectionsserver")

    @property
    def url(self) -> str:
        return self._server.url

    def stop(self) -> None:
        self._server.stop()

    def delivered(self) -> list[Request]:
        """The requests answered 200, in the order they were answered."""
        with self._lock:
            return sorted((r for r in self.requests if r.status == 200), key=lambda r: r.ended)

    def _answer(self, request: Request) -> Answer:
        with self._lock:
            index = len(self.requests)
            self.requests.append(request)
        return self.script(index, request)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as API Gateway: botocore reuses sockets

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                prefix = "/@connections/"
                if not self.path.startswith(prefix):
                    self.send_error(404)
                    return
                request = Request(self.path[len(prefix) :], body, time.monotonic())
                answer = server._answer(request)
                time.sleep(answer.delay)
                # Logged before the answer is written: the client must never see an answer
                # whose request the log does not show as ended yet.
                request.status, request.ended = answer.status, time.monotonic()
                payload = b""
                self.send_response(answer.status)
                if answer.error_type is not None:
                    self.send_header("x-amzn-ErrorType", answer.error_type)
                    payload = json.dumps({"message": f"{answer.error_type} (test)"}).encode()
                    self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
                self.wfile.flush()

            def log_message(self, format: str, *args: object) -> None:
                pass  # quiet tests

        return Handler
