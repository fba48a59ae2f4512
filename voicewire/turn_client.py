"""A client of the client link: send one ``ask`` or ``speak``, follow its turn to ``turn_end``.

Used by ``voicewire ask`` and ``voicewire demo`` (and the end-to-end tests). It keeps every
event with its arrival time since the message was sent, and the turn's audio.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
import wave
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from websockets.asyncio.client import connect

from voicewire.client_protocol import decode_audio_frame
from voicewire.speech_protocol import SAMPLE_RATE


@dataclass
class TimedEvent:
    at_ms: float
    kind: str  # a control frame's type, or "audio"
    data: dict[str, Any]


@dataclass
class TurnResult:
    events: list[TimedEvent] = field(default_factory=list)
    audio: bytearray = field(default_factory=bytearray)
    end: dict[str, Any] | None = None
    errors: list[dict[str, Any]] = field(default_factory=list)

    @property
    def status(self) -> str:
        return self.end["status"] if self.end else "no_turn_end"

    def first(self, kind: str) -> float | None:
        return next((event.at_ms for event in self.events if event.kind == kind), None)

    def last(self, kind: str) -> float | None:
        times = [event.at_ms for event in self.events if event.kind == kind]
        return times[-1] if times else None

    def write_wav(self, path: Path) -> None:
        with wave.open(str(path), "wb") as out:
            out.setnchannels(1)
            out.setsampwidth(2)
            out.setframerate(SAMPLE_RATE)
            out.writeframes(bytes(self.audio))


# A client link's URL, or a function giving a fresh one per connection: a connect ticket opens
# one connection, so a client that connects more than once against a ticketed API mints anew.
ConnectionUrl = str | Callable[[], str]


async def run_turn(
    url: ConnectionUrl,
    message: dict[str, Any],
    on_event: Callable[[TimedEvent], None] | None = None,
    limit_seconds: float = 180,
) -> TurnResult:
    """Open a connection (to ``url``, or to the one ``url()`` gives), send ``message``, collect
    its turn until ``turn_end`` (or an error that ends it before it started)."""
    result = TurnResult()
    current_turn: int | None = None
    address = url() if callable(url) else url
    async with connect(address, max_size=None, open_timeout=30) as websocket:
        sent = time.perf_counter()
        await websocket.send(json.dumps(message))
        async with asyncio.timeout(limit_seconds):
            async for frame in websocket:
                at = round((time.perf_counter() - sent) * 1000, 1)
                if isinstance(frame, bytes):
                    turn, seq, payload = decode_audio_frame(frame)
                    if turn != current_turn:
                        continue  # audio of another turn is never played
                    result.audio += payload
                    event = TimedEvent(
                        at, "audio", {"turn": turn, "seq": seq, "bytes": len(payload)}
                    )
                else:
                    data = json.loads(frame)
                    kind = data.get("type", "?")
                    if kind == "audio":  # ?audio=base64 delivery
                        if data["turn"] != current_turn:
                            continue
                        payload = base64.b64decode(data["data"])
                        result.audio += payload
                        data = {"turn": data["turn"], "seq": data["seq"], "bytes": len(payload)}
                    if kind == "turn_start":
                        current_turn = data["turn"]
                    event = TimedEvent(at, kind, data)
                result.events.append(event)
                if on_event is not None:
                    on_event(event)
                if event.kind == "error":
                    result.errors.append(event.data)
                    if current_turn is None:
                        return result  # refused before the turn started
                if event.kind == "turn_end":
                    result.end = event.data
                    return result
    return result


async def list_voices(url: str, limit_seconds: float = 30) -> dict[str, Any]:
    """The ``voices`` frame answering ``{"action": "voices"}``: the voices ``ask`` accepts."""
    async with connect(url, max_size=None, open_timeout=30) as websocket:
        await websocket.send(json.dumps({"action": "voices"}))
        async with asyncio.timeout(limit_seconds):
            async for frame in websocket:
                if isinstance(frame, str) and (data := json.loads(frame)).get("type") in (
                    "voices",
                    "error",
                ):
                    return dict(data)
    raise ConnectionError("the connection closed before the voices arrived")
