"""A client of ``/invocations`` as the seed's client is: POST the seed's payload, read the turn
as server-sent events (``data: {json}``) to ``agent_end``, base64 audio inside ``audio_chunk``.

Used by ``voicewire ask --sse`` and ``voicewire bench ttfa --front-door agentcore``. Events are
timed from the moment the request was sent, like ``voicewire.turn_client``'s, and the result is
the same ``TurnResult`` (its ``end`` is the ``agent_end`` event), so both transports are
measured alike; its ``bytes_received`` counts the response's body, for the cost of
base64-in-JSON per second of audio.
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import Callable
from typing import Any

import httpx

from voicewire.sse import SseDecoder
from voicewire.turn_client import TimedEvent, TurnResult

SESSION_HEADER = "X-Amzn-Bedrock-AgentCore-Runtime-Session-Id"


def invocations_url(ws_url: str) -> str:
    """The ``/invocations`` URL of the runtime whose ``/ws`` is ``ws_url``."""
    base = ws_url.split("?", 1)[0].removesuffix("/ws")
    return base.replace("wss://", "https://", 1).replace("ws://", "http://", 1) + "/invocations"


async def run_sse_turn(
    url: str,
    payload: dict[str, Any],
    on_event: Callable[[TimedEvent], None] | None = None,
    session_id: str | None = None,
    limit_seconds: float = 180,
) -> TurnResult:
    """POST ``payload`` to ``url`` and collect its events until ``agent_end`` (or an ``error``
    that ends the stream). ``audio_chunk`` events are kept as ``{"bytes": n}``, their audio in
    the result."""
    result = TurnResult()
    headers = {SESSION_HEADER: session_id} if session_id else {}
    decoder = SseDecoder()
    sent = time.perf_counter()
    async with (
        httpx.AsyncClient(timeout=httpx.Timeout(limit_seconds, connect=30)) as client,
        asyncio.timeout(limit_seconds),
        client.stream("POST", url, json=payload, headers=headers) as response,
    ):
        if response.status_code != 200:
            body = (await response.aread()).decode("utf-8", "replace")[:300]
            raise RuntimeError(f"{url} answered {response.status_code}: {body}")
        async for chunk in response.aiter_raw():
            result.bytes_received += len(chunk)
            at = round((time.perf_counter() - sent) * 1000, 1)
            for data in decoder.feed(chunk):
                kind = str(data.get("type", "?"))
                if kind == "audio_chunk":
                    audio = base64.b64decode(data["data"])
                    result.audio += audio
                    data = {"bytes": len(audio)}
                event = TimedEvent(at, kind, data)
                result.events.append(event)
                if on_event is not None:
                    on_event(event)
                if kind == "error":
                    result.errors.append(data)
                if kind == "agent_end":
                    result.end = data
    return result
