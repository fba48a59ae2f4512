"""A model hub on a local port, speaking the hub's download route: tests never reach a real hub.

``GET /<owner>/<repo>/resolve/<revision>/<path>`` answers a small file itself and redirects a
large one (``redirect_over`` bytes) to ``/cdn/<sha256>`` with a 302, as the hub hands large files
to its CDN; an unknown revision or path is a 404. ``served`` lets a test change the bytes behind a
path (a tampered file); ``requests`` records every path asked for.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class HubStandIn:
    repo: str
    revision: str
    served: dict[str, bytes]
    redirect_over: int = 1024
    requests: list[str] = field(default_factory=list)
    url: str = ""

    def answer(self, path: str) -> tuple[int, dict[str, str], bytes]:
        self.requests.append(path)
        if path.startswith("/cdn/"):
            digest = path.removeprefix("/cdn/")
            for data in self.served.values():
                if hashlib.sha256(data).hexdigest() == digest:
                    return 200, {}, data
            return 404, {}, b"Entry not found"
        prefix = f"/{self.repo}/resolve/{self.revision}/"
        if not path.startswith(prefix) or path.removeprefix(prefix) not in self.served:
            return 404, {}, b"Revision Not Found"
        data = self.served[path.removeprefix(prefix)]
        if len(data) > self.redirect_over:
            return 302, {"Location": f"/cdn/{hashlib.sha256(data).hexdigest()}"}, b""
        return 200, {"X-Repo-Commit": self.revision}, data


@contextmanager
def running_hub(hub: HubStandIn) -> Iterator[HubStandIn]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            status, headers, body = hub.answer(self.path)
            self.send_response(status)
            for name, value in {**headers, "Content-Length": str(len(body))}.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    hub.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield hub
    finally:
        server.shutdown()
        server.server_close()
