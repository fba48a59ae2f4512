"""What a speech link costs by itself, measured on a running local stack.

A turn's figures mix the LLM, the engine and the link. To see the link alone, open sessions the
way the worker does and time what does not depend on the engine:

- ``open_ms``: from opening a session to the pong of its first ``ping``: the set-up (over
  SageMaker: the client's set-up, TLS, HTTP/2, SigV4, the front door opening its sidecar's
  WebSocket to the container; over a WebSocket: the handshake) and one round trip. Over
  SageMaker ``SpeechSession.open`` returns before the stream is open (``sagemaker_transport``
  sends before SageMaker's answer), so only an answer shows the set-up done;
- ``round_trip_ms``: a ``ping`` answered by the container, so one message each way through all
  the framing (per chunk, the link adds this much before the engine starts and after it ends);
- ``first_audio_ms``: a one-clause text from ``send`` to its first audio frame (the engine's
  time plus the round trip).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

from voicewire.speech_link import AudioChunk, SpeechSession

SHORT_TEXT = "Hello there."


@dataclass
class LinkCost:
    link: str
    open_ms: list[float] = field(default_factory=list)
    round_trip_ms: list[float] = field(default_factory=list)
    first_audio_ms: list[float] = field(default_factory=list)

    def summary(self) -> dict[str, dict[str, float]]:
        figures = {
            "open_ms": self.open_ms,
            "round_trip_ms": self.round_trip_ms,
            "first_audio_ms": self.first_audio_ms,
        }
        return {name: summarize(values) for name, values in figures.items() if values}


def summarize(values: list[float]) -> dict[str, Any]:
    return {
        "median": round(statistics.median(values), 1),
        "min": round(min(values), 1),
        "max": round(max(values), 1),
        "values": [round(value, 1) for value in values],
    }


async def measure_link(
    open_session: Any, link: str, sessions: int = 5, pings: int = 5, texts: int = 1
) -> LinkCost:
    """``sessions`` sessions opened one after another; ``pings`` pings and ``texts`` short
    syntheses on each."""
    cost = LinkCost(link)
    for _ in range(sessions):
        session: SpeechSession = open_session()
        started = time.perf_counter()
        await session.open()
        try:
            await session.ping(within=5)
            cost.open_ms.append((time.perf_counter() - started) * 1000)
            for _ in range(pings):
                cost.round_trip_ms.append(await session.ping(within=5))
            for _ in range(texts):
                cost.first_audio_ms.append(await _first_audio_ms(session))
        finally:
            await session.close()
    return cost


async def _first_audio_ms(session: SpeechSession) -> float:
    sent = time.perf_counter()
    request_id = await session.send(SHORT_TEXT)
    first: float | None = None
    async for event in session.events(request_id):
        if first is None and isinstance(event, AudioChunk):
            first = (time.perf_counter() - sent) * 1000
    if first is None:
        raise RuntimeError("the short text produced no audio")
    return first


def measure_links(stack: Any, links: tuple[str, ...], sessions: int = 5) -> list[LinkCost]:
    """Each link of a running ``LocalStack``, interleaved session by session."""

    async def run() -> list[LinkCost]:
        costs = {link: LinkCost(link) for link in links}
        for _ in range(sessions):
            for link in links:
                one = await measure_link(stack.speech_session_factory(link), link, sessions=1)
                costs[link].open_ms += one.open_ms
                costs[link].round_trip_ms += one.round_trip_ms
                costs[link].first_audio_ms += one.first_audio_ms
        return list(costs.values())

    return asyncio.run(run())
