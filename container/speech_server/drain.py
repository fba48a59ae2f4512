"""Draining on SIGTERM: open speech sessions finish their turn; nothing new is taken on.

SageMaker stops a container it scales in or replaces with SIGTERM, then SIGKILL 30 s later, and
documents no draining of its own. A worker holds a session for a whole turn, a sentence at a
time, so cutting sessions at SIGTERM loses the turn's audio. While the server drains:

- every open session keeps working, new requests on it included (a turn keeps sending);
- a session with nothing in flight for ``IDLE_GRACE_SECONDS`` is closed with 1001 (a worker's
  warm, idle session goes at once, and its next turn opens one elsewhere);
- new sessions are refused with HTTP 503, and ``GET /ping`` answers 503 (``DrainGate``);
- at the deadline every session still open is closed with 1001 (``Drain.seconds``);
- once no session is open, the process exits.

``Drain`` holds that state in one place: ``server.DrainingServer`` starts it on the first signal
and asks it every tick whether the process may stop; ``bidi_session.BidiSession`` registers with
it and asks it how long to wait for the next message.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from typing import Literal, Protocol

from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocket

logger = logging.getLogger(__name__)

# SageMaker sends SIGKILL 30 s after SIGTERM. 25 s of drain, CUT_GRACE_SECONDS for the sessions
# cut at the deadline to send their close, and uvicorn's own shutdown (server.SHUTDOWN_SECONDS)
# all fit inside those 30 s.
DRAIN_SECONDS = 25.0
# How long a session must have nothing in flight before the drain closes it: long enough for
# the next sentence of a turn in progress to arrive (an LLM writing a long sentence takes a few
# seconds), short enough that an idle session goes well before the deadline.
IDLE_GRACE_SECONDS = 5.0
# After the deadline, how long the cut sessions get to send their close frames.
CUT_GRACE_SECONDS = 1.0

GOING_AWAY = 1001
GOING_AWAY_REASON = "the server is shutting down"

Ending = Literal["idle", "client", "cut"]
"""How a session ended: closed idle by the drain, by its client (or a failure), or cut at the
deadline."""


class DrainableSession(Protocol):
    def drain_started(self) -> None:
        """The drain began: stop waiting without a time limit for the next message."""

    def cut(self) -> None:
        """The deadline passed: stop whatever is in flight and close with 1001."""


class Drain:
    def __init__(
        self,
        seconds: float = DRAIN_SECONDS,
        idle_grace: float = IDLE_GRACE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.seconds = seconds
        self.idle_grace = idle_grace
        self.clock = clock
        self.sessions: set[DrainableSession] = set()
        self.started_at: float | None = None
        self.cut_at: float | None = None
        self.endings: Counter[Ending] = Counter()

    @property
    def draining(self) -> bool:
        return self.started_at is not None

    def opened(self, session: DrainableSession) -> None:
        self.sessions.add(session)

    def ended(self, session: DrainableSession, ending: Ending) -> None:
        self.sessions.discard(session)
        if self.draining:
            self.endings[ending] += 1

    def start(self) -> None:
        """Begin draining (in the event loop: sessions are told at once)."""
        if self.draining:
            return
        self.started_at = self.clock()
        logger.info(
            "draining: %d session(s) open; new sessions refused, idle ones closed, "
            "the rest cut in %g s",
            len(self.sessions),
            self.seconds,
        )
        for session in list(self.sessions):
            session.drain_started()

    def finished(self) -> bool:
        """Whether the process may stop now: no session is open, or the deadline has passed and
        the cut sessions have had their grace. Cuts the open sessions at the deadline. Called on
        every tick of the server's main loop; logs the drain's end when it says True."""
        if self.started_at is None:
            return False
        now = self.clock()
        if self.cut_at is None and now >= self.started_at + self.seconds and self.sessions:
            self.cut_at = now
            for session in list(self.sessions):
                session.cut()
        if self.sessions and (self.cut_at is None or now < self.cut_at + CUT_GRACE_SECONDS):
            return False
        logger.info(
            "drained in %.1f s: %d session(s) closed idle, %d closed by their clients, "
            "%d cut at the deadline, %d still open",
            now - self.started_at,
            self.endings["idle"],
            self.endings["client"],
            self.endings["cut"],
            len(self.sessions),
        )
        return True

    @staticmethod
    def of(app: Starlette) -> Drain | None:
        """The drain ``server.serve`` attached to the app, if any (the tests' servers have none)."""
        return getattr(app.state, "drain", None)


def draining_response() -> JSONResponse:
    return JSONResponse({"status": "draining", "message": GOING_AWAY_REASON}, 503)


class DrainGate:
    """ASGI middleware: while the server drains, a new WebSocket session is refused with HTTP 503
    (a denial response, as while the model loads) and ``GET /ping`` answers 503, so SageMaker
    stops routing here. Everything else, ``POST /invocations`` included, passes through."""

    def __init__(self, app: ASGIApp, drain: Drain) -> None:
        self.app = app
        self.drain = drain

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.drain.draining:
            if scope["type"] == "websocket":
                await WebSocket(scope, receive, send).send_denial_response(draining_response())
                return
            if scope["type"] == "http" and scope["path"] == "/ping":
                await draining_response()(scope, receive, send)
                return
        await self.app(scope, receive, send)
