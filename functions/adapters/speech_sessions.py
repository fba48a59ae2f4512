"""Speech sessions for the worker: opened early, and kept warm between turns where that is safe.

A new bidirectional session costs its set-up before the first sentence's audio: on AWS a TLS
handshake, HTTP/2, SigV4 and SageMaker opening its sidecar's WebSocket to the container; locally
the same path measures ~55 ms (``voicewire bench session``). Over SageMaker the first sentence
goes up with the request, so the set-up overlaps with it rather than coming before it. Two
things take it off the critical path:

- the worker asks for its session when the turn starts, while the LLM's first tokens are still
  coming (``TurnRunner`` waits for it only at the first sentence);
- a session that ended its turn cleanly stays open in this execution environment
  (``KeptSpeechSession``), and the next turn of the same environment reuses it.

A kept session may have gone stale: Lambda freezes the environment between invocations, so the
client cannot answer anything SageMaker or the network sends it, and a connection closed or
dropped meanwhile looks open until it is used. So a kept session is reused only if

1. it was idle for at most ``max_idle_seconds`` (SageMaker pings every 60 s and gives up on a
   peer after missed pongs; staying under a minute keeps clear of such timeouts),
2. its reader has seen no end or failure of the stream, and
3. it answers a ``ping`` within ``probe_seconds``: the round trip proves the whole path
   (front door, sidecar, container) still carries messages both ways. The probe runs while the
   LLM is still writing, so it costs the first audio nothing unless it fails.

Any doubt means a new session: the stale one is aborted, never retried. Only a session whose
every request was answered goes back, and only if its turn completed or never used it; a turn
cancelled or failed after it sent something closes its session, so no frame of an old turn can
reach a new one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from voicewire.speech_link import SpeechSession, SpeechSessionError

logger = logging.getLogger(__name__)

SessionOrigin = Literal["opened", "reused"]


@dataclass(frozen=True)
class SessionPolicy:
    keep_warm: bool = True
    max_idle_seconds: float = 55.0
    probe_seconds: float = 1.0


@dataclass
class ReadySession:
    """A session ready for a turn, and what it cost to get it."""

    session: SpeechSession
    origin: SessionOrigin
    ready_ms: float  # from asking to ready: the open, or the probe of a kept session
    stale_discarded: bool = False  # a kept session failed its checks and was replaced


@dataclass
class _Kept:
    session: SpeechSession
    loop: asyncio.AbstractEventLoop
    idle_since: float


class KeptSpeechSession:
    """At most one idle session kept per execution environment (one invocation at a time)."""

    def __init__(self, open_session: Callable[[], SpeechSession], policy: SessionPolicy) -> None:
        self._open_session = open_session
        self.policy = policy
        self._kept: _Kept | None = None

    async def acquire(self) -> ReadySession:
        """A kept session that passes its checks, else a new one; raises
        ``SpeechSessionError`` when a new one cannot be opened. Over SageMaker a refusal of
        the stream comes later, as its first request's error (``connect_failed``): the
        transport sends before SageMaker answers (``sagemaker_transport``)."""
        started = time.perf_counter()
        kept, self._kept = self._kept, None
        stale = False
        if kept is not None:
            try:
                reason = await self._check(kept)
            except BaseException:  # cancelled mid-check: the session's state is unknown
                await _abort(kept.session)
                raise
            if reason is None:
                return ReadySession(kept.session, "reused", _ms_since(started))
            logger.info("speech session kept from an earlier turn discarded: %s", reason)
            stale = True
            await _abort(kept.session)
        session = self._open_session()
        try:
            await session.open()
        except BaseException:
            await _abort(session)
            raise
        return ReadySession(session, "opened", _ms_since(started), stale_discarded=stale)

    async def release(self, session: SpeechSession, reusable: bool) -> None:
        """Keep ``session`` for the next turn if allowed and clean, else close it; one still
        waiting for answers (its turn was cancelled or failed mid-speech, or the server stalled)
        is aborted: nobody will read those answers, and a graceful close would wait for them,
        up to the session's close timeout, holding the worker and the client's ``turn_end``."""
        keep = (
            self.policy.keep_warm
            and reusable
            and session.is_open
            and session.idle
            and self._kept is None
        )
        if keep:
            self._kept = _Kept(session, asyncio.get_running_loop(), time.monotonic())
            return
        try:
            if session.idle:
                await session.close()
            else:
                await session.abort()
        except Exception:  # closing is best effort: the turn is already over
            logger.warning("closing the speech session failed", exc_info=True)

    async def close(self) -> None:
        """Close the kept session (the environment is shutting down, or settings change)."""
        kept, self._kept = self._kept, None
        if kept is not None and kept.loop is asyncio.get_running_loop():
            await _abort(kept.session)

    async def _check(self, kept: _Kept) -> str | None:
        """Why ``kept`` must not be reused, or None."""
        idle = time.monotonic() - kept.idle_since
        if kept.loop is not asyncio.get_running_loop():
            return "it belongs to another event loop"
        if idle > self.policy.max_idle_seconds:
            return f"idle for {idle:.0f} s (limit {self.policy.max_idle_seconds:g} s)"
        if not kept.session.is_open:
            return "its stream has ended"
        try:
            await kept.session.ping(within=self.policy.probe_seconds)
        except SpeechSessionError as error:
            return f"no answer to a ping ({error.code})"
        return None


async def release_or_abort(
    sessions: KeptSpeechSession, session: SpeechSession, reusable: bool
) -> None:
    """``sessions.release``, and if the pool cannot take the session back, abort it (then
    re-raise): nothing else would close it, and left open it holds its share of the engine
    until the server closes it idle, a minute later."""
    try:
        await sessions.release(session, reusable)
    except BaseException:
        await _abort(session)
        raise


def _ms_since(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 1)


async def _abort(session: SpeechSession) -> None:
    with contextlib.suppress(Exception):
        await session.abort()
