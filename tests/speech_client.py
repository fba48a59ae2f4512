"""A minimal speech-link client for tests: send messages, collect each request's frames."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

from websockets.asyncio.client import ClientConnection


@dataclass
class Reply:
    """Everything the server sent for one request, in order."""

    start: dict[str, Any]
    audio: bytearray = field(default_factory=bytearray)
    frames: int = 0
    complete: dict[str, Any] | None = None


async def next_control(ws: ClientConnection, wait: float = 60) -> dict[str, Any]:
    """The next text frame as JSON, failing if a binary frame comes first."""
    frame = await asyncio.wait_for(ws.recv(), wait)
    assert isinstance(frame, str), f"expected a control frame, got {len(frame)} bytes of audio"
    return json.loads(frame)


async def collect_reply(ws: ClientConnection, wait: float = 120) -> Reply:
    """Read one request's answer: synthesis_start, binary frames, synthesis_complete."""
    start = await next_control(ws, wait)
    assert start["type"] == "synthesis_start", start
    reply = Reply(start)
    while True:
        frame = await asyncio.wait_for(ws.recv(), wait)
        if isinstance(frame, bytes):
            reply.audio += frame
            reply.frames += 1
            continue
        message = json.loads(frame)
        assert message["type"] == "synthesis_complete", message
        assert message["request_id"] == start["request_id"]
        reply.complete = message
        return reply
