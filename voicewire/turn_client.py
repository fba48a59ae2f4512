"""A client of the client link: send one ``ask`` or ``speak``, follow its turn to ``turn_end``.

Used by ``voicewire ask`` and ``voicewire demo`` (and the end-to-end tests). It keeps every
event with its arrival time since the message was sent, and the turn's audio.

A gateway that delivers ``@connections`` posts of raw bytes as *text* frames (whether API
Gateway does is undocumented: docs/protocol.md) turns a binary audio frame into a text frame
that is not UTF-8, and this client, like every standards-compliant one, fails the connection
with 1007. ``run_turn`` then says so in one line, asks again on a new connection with
``?audio=base64``, and remembers the API for the rest of the process: its later turns ask for
base64 at once.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import sys
import time
import wave
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from voicewire.client_protocol import decode_audio_frame
from voicewire.speech_protocol import SAMPLE_RATE, SAMPLE_WIDTH


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
    # The turn had to be asked again with ?audio=base64: binary frames arrived as text (1007).
    fell_back_to_base64: bool = False
    # What the turn's messages weighed (frames' payloads; an SSE response's body), for the
    # cost of each transport per second of audio.
    bytes_received: int = 0

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
# Before a turn's message, on its connection: (the socket, emit(kind, data, at)) -> the
# message's fields it decided (run_turn's ``prepare``); ``at``: a ``time.perf_counter()``
# moment other than now.
Emit = Callable[..., None]
Prepare = Callable[[Any, Emit], Awaitable[dict[str, Any]]]

INVALID_UTF8_CLOSE = 1007  # a text frame that is not UTF-8 (RFC 6455 7.4.1)
TEXT_FRAMES_NOTICE = (
    "binary audio frames arrive from this API as text frames (closed 1007: not UTF-8): "
    "asking again with ?audio=base64, and using base64 for the rest of this run"
)

# The APIs (scheme, host and path) found in this process to deliver binary frames as text:
# every later connection to them asks for base64 at once.
_TEXT_FRAME_APIS: set[str] = set()


def with_query(url: str, **params: str | None) -> str:
    """``url`` with these query parameters set (``None``: left as they are)."""
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    query.update({name: value for name, value in params.items() if value is not None})
    return urlunsplit(parts._replace(query=urlencode(query)))


def _api(url: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(query="", fragment=""))


def _notice_on_stderr(line: str) -> None:
    print(f"note: {line}", file=sys.stderr, flush=True)


def binary_arrived_as_text(closed: ConnectionClosed) -> bool:
    """The connection failed on a text frame that is not UTF-8: what a binary audio frame
    becomes on a gateway that posts raw bytes as text (this client sent 1007, or the peer
    did)."""
    return any(
        frame is not None and frame.code == INVALID_UTF8_CLOSE
        for frame in (closed.sent, closed.rcvd)
    )


async def run_turn(
    url: ConnectionUrl,
    message: dict[str, Any],
    on_event: Callable[[TimedEvent], None] | None = None,
    limit_seconds: float = 180,
    on_notice: Callable[[str], None] | None = None,
    prepare: Prepare | None = None,
) -> TurnResult:
    """Open a connection (to ``url``, or to the one ``url()`` gives), send ``message``, collect
    its turn until ``turn_end`` (or an error that ends it before it started).

    ``prepare``: what happens on the connection before the message, which it completes (a
    spoken question: ``listen``, the recording streamed to Transcribe, the transcript as the
    prompt: ``voicewire.speech_in.spoken_question``); its events go to ``on_event`` with the
    turn's, on the same clock.

    If the connection fails with 1007 because binary audio arrived as a text frame, the turn is
    asked again on a new connection with ``?audio=base64`` (``on_notice``, else standard error,
    gets one line saying so). Why after the fact, and not a probe before the first turn: where
    binary frames work (the local stack, a deployment ``agent-infra check`` proved) it costs
    nothing, and a deployed API sends base64 by default anyway; a probe would cost a whole
    turn's first audio on every run. Where they do not, the cut turn had only its first text
    and no audio, so asking again loses nothing a listener heard, and costs that turn's time to
    first audio once per run: the API is remembered, and later turns ask for base64 at once.
    The times of the result count from the first send, so what the detour cost shows in them."""
    result = TurnResult()
    sent = time.perf_counter()
    deadline = asyncio.get_running_loop().time() + limit_seconds
    address = url() if callable(url) else url
    if _api(address) in _TEXT_FRAME_APIS:
        address = with_query(address, audio="base64")
    try:
        await _follow_turn(address, message, result, sent, deadline, on_event, prepare)
    except ConnectionClosed as closed:
        asked_base64 = dict(parse_qsl(urlsplit(address).query)).get("audio") == "base64"
        if asked_base64 or not binary_arrived_as_text(closed):
            raise
        _TEXT_FRAME_APIS.add(_api(address))
        # Never silent: a bench's figures include the detour, and its reader must know why.
        (on_notice or _notice_on_stderr)(TEXT_FRAMES_NOTICE)
        # The cut turn's frames are dropped: the turn asked again is the one the result holds.
        result = TurnResult(fell_back_to_base64=True)
        again = url() if callable(url) else url
        await _follow_turn(
            with_query(again, audio="base64"), message, result, sent, deadline, on_event, prepare
        )
    return result


def heard_ms_of(audio_bytes: int) -> float:
    """Milliseconds of the turn's audio in ``audio_bytes`` of PCM (24 kHz, 16-bit)."""
    return round(audio_bytes / SAMPLE_WIDTH / SAMPLE_RATE * 1000, 1)


async def _follow_turn(
    address: str,
    message: dict[str, Any],
    result: TurnResult,
    sent: float,
    deadline: float,
    on_event: Callable[[TimedEvent], None] | None,
    prepare: Prepare | None = None,
) -> None:
    """One connection: send ``message`` and collect its turn into ``result``. Cancelled
    mid-turn (Ctrl-C), it cancels the turn, saying how much audio arrived (``heard_ms``)."""
    async with connect(address, max_size=None, open_timeout=30) as websocket:
        if prepare is not None:

            def emit(kind: str, data: dict[str, Any], at: float | None = None) -> None:
                moment = time.perf_counter() if at is None else at
                event = TimedEvent(round((moment - sent) * 1000, 1), kind, data)
                result.events.append(event)
                if on_event is not None:
                    on_event(event)

            message = {**message, **await prepare(websocket, emit)}
        await websocket.send(json.dumps(message))
        try:
            await _collect(websocket, result, sent, deadline, on_event)
        except asyncio.CancelledError:  # Ctrl-C (asyncio.run cancels the task): stop the turn
            started = [event for event in result.events if event.kind == "turn_start"]
            turn_id = started[-1].data["turn_id"] if started else None
            if turn_id is not None and result.end is None:
                # This client does not play audio: the audio received is the most that can have
                # been heard, and the agent keeps no more than that of the answer.
                cancel = {
                    "action": "cancel",
                    "turn_id": turn_id,
                    "heard_ms": heard_ms_of(len(result.audio)),
                }
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(websocket.send(json.dumps(cancel)), 2)
            raise


async def _collect(
    websocket: Any,
    result: TurnResult,
    sent: float,
    deadline: float,
    on_event: Callable[[TimedEvent], None] | None,
) -> None:
    """Collect the turn's frames into ``result`` until its ``turn_end``."""
    current_turn: int | None = None
    async with asyncio.timeout_at(deadline):
        async for frame in websocket:
            at = round((time.perf_counter() - sent) * 1000, 1)
            result.bytes_received += len(frame if isinstance(frame, bytes) else frame.encode())
            if isinstance(frame, bytes):
                turn, seq, payload = decode_audio_frame(frame)
                if turn != current_turn:
                    continue  # audio of another turn is never played
                result.audio += payload
                event = TimedEvent(at, "audio", {"turn": turn, "seq": seq, "bytes": len(payload)})
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
                    return  # refused before the turn started
            if event.kind == "turn_end":
                result.end = event.data
                return


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
