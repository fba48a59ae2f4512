"""Where a turn's frames go on AgentCore Runtime: a ``/ws`` WebSocket, or an ``/invocations``
response as the seed's server-sent events.

The turn posts its frames through ``functions.adapters.relay.Relay`` on both front doors: the
same lanes (ordered frames, coalesced text), the same audio split, the same counters. On API
Gateway the relay's client is boto3's ``@connections`` client; here it is one of the two classes
below, each with the one method the relay calls, ``post_to_connection(ConnectionId, Data)``,
called from the relay's threads. A client that is gone raises what API Gateway answers then
(``GoneException``), so the turn ends as it does there.
"""

from __future__ import annotations

import asyncio
import json
import threading
from concurrent.futures import Future
from typing import Any

from botocore.exceptions import ClientError
from starlette.websockets import WebSocket

from voicewire.client_protocol import AUDIO_FRAME_MARKER
from voicewire.speech_protocol import SAMPLE_RATE

# A frame the client's side of the socket has not taken within this long is a client that is
# gone in all but name (a healthy socket takes a frame in microseconds).
SEND_TIMEOUT_SECONDS = 10.0


def gone() -> ClientError:
    """What ``@connections`` answers for a client that left (the relay reads its code)."""
    return ClientError(
        {"Error": {"Code": "GoneException", "Message": "the client is gone"},
         "ResponseMetadata": {"HTTPStatusCode": 410}},
        "PostToConnection",
    )  # fmt: skip


class WebSocketSender:
    """Frames to one ``/ws`` client: binary audio frames (their first byte is the audio marker,
    never the start of JSON) as binary WebSocket frames, the rest as text.

    The socket belongs to the loop that serves it (uvicorn's); the turn runs on the app's worker
    loop, and the relay posts from threads: each frame is handed to the socket's loop and
    waited for, so frames leave in the order they were posted."""

    def __init__(self, websocket: WebSocket, loop: asyncio.AbstractEventLoop) -> None:
        self._websocket = websocket
        self._loop = loop
        self._lock = threading.Lock()  # one frame on the socket at a time, in order
        self.closed = False

    def post_to_connection(self, ConnectionId: str, Data: bytes) -> None:  # boto3's names
        with self._lock:
            if self.closed:
                raise gone()
            future = asyncio.run_coroutine_threadsafe(self._send(Data), self._loop)
            self._wait(future)

    async def send(self, data: bytes) -> None:
        """A frame from a coroutine of any loop (an error, the voice list, the history)."""
        await asyncio.to_thread(self.post_to_connection, ConnectionId="", Data=data)

    async def _send(self, data: bytes) -> None:
        if data[:1] == bytes([AUDIO_FRAME_MARKER]):
            await self._websocket.send_bytes(data)
        else:
            await self._websocket.send_text(data.decode("utf-8"))

    def _wait(self, future: Future[None]) -> None:
        try:
            future.result(timeout=SEND_TIMEOUT_SECONDS)
        except Exception as error:  # closed, reset, timed out: the client is gone
            future.cancel()
            self.closed = True
            raise gone() from error


class SeedEvents:
    """Frames of one turn as the seed's server-sent events, for ``/invocations``.

    The seed's contract (its ``BedrockAgentCoreApp`` entrypoint's typed events): ``agent_start``,
    ``text_delta {text}``, ``audio_stream_start {format: "pcm16", sample_rate}``, ``audio_chunk
    {data: base64 PCM}``, ``audio_stream_end``, ``agent_end``, ``error``. voicewire's frames map
    onto it one to one (audio is posted base64: ``Relay(delivery="base64")``); its frames the
    seed has no event for (``sentence``, ``words``, ``tool_start``, ``tool_end``) are left out,
    unless ``extra`` asks for them, so that a client written for the seed works unchanged.

    Events are put on a queue of the loop the turn runs on; ``next()`` takes them in order."""

    def __init__(self, loop: asyncio.AbstractEventLoop, extra: bool = False) -> None:
        self._loop = loop
        self._queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self._extra = extra
        self._audio_started = False
        self.closed = False

    def post_to_connection(self, ConnectionId: str, Data: bytes) -> None:  # boto3's names
        if self.closed:
            raise gone()
        for event in self.translate(json.loads(Data)):
            self._loop.call_soon_threadsafe(self._queue.put_nowait, event)

    def close(self) -> None:
        """The caller left (any thread): later posts fail as ``GoneException``, and ``next()``
        ends."""
        if not self.closed:
            self.closed = True
            self._loop.call_soon_threadsafe(self._queue.put_nowait, None)

    def refuse(self, error: dict[str, Any]) -> None:
        """End the stream with an ``error`` frame, no turn begun (a payload that is not one)."""
        for event in self.translate(error):
            self._queue.put_nowait(event)
        self._queue.put_nowait(None)

    async def next(self) -> dict[str, Any] | None:
        """The next event; None after the last (``agent_end``, or a refusal's ``error``)."""
        event = await self._queue.get()
        if event is not None and event["type"] == "agent_end":
            self._queue.put_nowait(None)
        return event

    def translate(self, frame: dict[str, Any]) -> list[dict[str, Any]]:
        """The seed's events for one voicewire frame (a posted frame is handled in order, so
        the audio's start and end are known here)."""
        match frame.get("type"):
            case "turn_start":
                return [{"type": "agent_start", "turn_id": frame["turn_id"],
                         "mode": frame["mode"]}]  # fmt: skip
            case "text_delta":
                return [{"type": "text_delta", "text": frame["text"]}]
            case "audio":
                events = []
                if not self._audio_started:
                    self._audio_started = True
                    events.append(
                        {"type": "audio_stream_start", "format": "pcm16",
                         "sample_rate": SAMPLE_RATE}
                    )  # fmt: skip
                events.append({"type": "audio_chunk", "data": frame["data"]})
                return events
            case "error":
                return [{"type": "error", "code": frame["code"], "message": frame["message"]}]
            case "turn_end":
                events = [{"type": "audio_stream_end"}] if self._audio_started else []
                end = {key: frame[key] for key in ("turn_id", "status", "timings", "audio_bytes")}
                return [*events, {"type": "agent_end", **end}]
            case _:
                return [frame] if self._extra else []
