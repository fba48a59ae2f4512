"""A real HTTP server on a free loopback port, served from a daemon thread: what the stand-ins
that speak HTTP (API Gateway's @connections, DynamoDB in front of moto, a static web host) run
on, so that boto3, httpx and Chromium reach them over real sockets."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType


class LoopbackServer:
    """Serves ``handler`` from the moment it is made until ``stop()`` (or the ``with`` ends)."""

    def __init__(self, handler: type[BaseHTTPRequestHandler], name: str = "loopback-http") -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        # A short poll interval: stop() waits for the serving loop to notice, once per test.
        serve = lambda: self.server.serve_forever(poll_interval=0.02)  # noqa: E731
        self._thread = threading.Thread(target=serve, name=name, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> LoopbackServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
