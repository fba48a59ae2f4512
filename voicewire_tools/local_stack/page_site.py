"""The browser page as a static host serves it, beside whichever front door runs locally (the
API Gateway emulator, or the AgentCore Runtime app).

- ``GET /``: the page (``web/index.html``); ``GET /{name}`` the files it loads from its own
  folder (``app.js``, ``style.css``, ...), nothing else: a static host's view of ``web/``.
- ``GET /config.json``: what the page needs to know of the API that served it, as the VoicePage
  stack's ``config.json`` tells a deployed page: its ``url`` and whether connecting needs a
  connect ``tickets``; the page connects by itself where none is needed.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from voicewire_tools.page_headers import SECURITY_HEADERS

# The page's own files, by name: one folder deep, no dot files, only what a page loads.
PAGE_ASSET = re.compile(r"[a-z][a-z0-9_-]*\.(?:js|css|svg|png|ico)")
PAGE_CONFIG = "/config.json"  # fetched by web/app.js, relative to the page
WS_PATH = "/ws"


@dataclass
class PageSite:
    page: Path | None
    # Whether connecting needs a connect ticket (the authorizer runs: ``--tokens``), and where
    # one is minted (POST, with the API key ``voicewire up`` prints), when this stack mints them.
    tickets: Callable[[], bool] = lambda: False
    ticket_path: Callable[[], str | None] = lambda: None

    def routes(self, *before_assets: Route) -> list[Route]:
        """The page's routes; ``before_assets``: other routes, matched before ``/{name}``."""
        return [
            Route("/", self.index, methods=["GET"]),
            Route(PAGE_CONFIG, self.config, methods=["GET"]),
            *before_assets,
            Route("/{name}", self.asset, methods=["GET"]),  # last: every other route first
        ]

    async def index(self, request: Request) -> Response:
        if self.page is None or not self.page.is_file():
            return PlainTextResponse(f"voicewire local stack: WebSocket at {WS_PATH}\n")
        return FileResponse(self.page, headers=SECURITY_HEADERS)

    async def config(self, request: Request) -> Response:
        """The page's ``config.json``, the same fields as a deployed page's (``stacks/
        voice_page.py``): ``url``, this stack's WebSocket URL as the browser reached it (its
        ``Host`` header and scheme, so ``--host 0.0.0.0``, another machine or a forwarded port
        get the address they used, not 127.0.0.1); ``tickets``; ``ticket_url``.

        Why answer it at all: the page fetches it on every load, and a 404 was an error line in
        every browser console; and only the host knows whether a ticket is needed, which the
        page must know to connect by itself (without one) or to say that one is needed. Never
        cached (``no-store``): a stack restarted with ``--tokens``, or on another port, must be
        what the next load reads."""
        host = request.headers.get("host") or request.url.netloc
        secure = request.url.scheme in ("https", "wss")
        body: dict[str, Any] = {
            "url": f"{'wss' if secure else 'ws'}://{host}{WS_PATH}",
            "tickets": self.tickets(),
        }
        ticket_path = self.ticket_path()
        if body["tickets"] and ticket_path is not None:
            body["ticket_url"] = f"{'https' if secure else 'http'}://{host}{ticket_path}"
        return JSONResponse(body, headers={**SECURITY_HEADERS, "cache-control": "no-store"})

    async def asset(self, request: Request) -> Response:
        """A file next to the page (its scripts and style), as a static host would serve it."""
        name = request.path_params["name"]
        if self.page is None or not PAGE_ASSET.fullmatch(name):
            return PlainTextResponse("Not Found", 404)
        path = self.page.parent / name
        if not path.is_file():
            return PlainTextResponse("Not Found", 404)
        return FileResponse(path, headers=SECURITY_HEADERS)
