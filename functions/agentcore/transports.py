"""Where a turn's frames go on AgentCore Runtime: a ``/ws`` WebSocket, or an ``/invocations``
response as the seed's server-sent events.

The turn sends its frames through ``functions.adapters.relay.Relay`` on both front doors: the
same lanes (ordered frames, coalesced text), the same audio split, the same counters. On API
Gateway the relay's sink is ``functions.adapters.frame_sink.ApiGatewaySink``; here it is one of
the two ``FrameSink`` classes below. A client that is gone raises ``ClientGone``, so the turn
ends as it does there.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from starlette.websockets import WebSocket

from functions.adapters.frame_sink import ClientGone
from voicewire.speech_protocol import SAMPLE_RATE

# A frame the client's side of the socket has not taken within this long is a client that is
# gone in all but name (a healthy socket takes a frame in microseconds).
SEND_TIMEOUT_SECONDS = 10.0


class WebSocketSink:
    """Frames to one ``/ws`` client: ``bytes`` (headed audio) as binary WebSocket frames,
    ``str`` (JSON) as text frames.

    The socket belongs to the loop that serves it (uvicorn's), and its sends must run there;
    the turn runs on the turns' loop (``functions.environment_loop``). A send from the socket's
    loop awaits the socket directly; one from another loop hands the send to the socket's loop
    and awaits its result, without holding a thread. Sends go one at a time, in the order they
    were made: a lock of the socket's loop, taken first come, first served.

    A socket that is closed, reset, or does not take a frame within ``SEND_TIMEOUT_SECONDS`` is
    a client that left: ``ClientGone``, then and for every later frame."""

    def __init__(self, websocket: WebSocket, loop: asyncio.AbstractEventLoop) -> None:
        self._websocket = websocket
        self._loop = loop  # the socket's
        self._lock = asyncio.Lock()  # used on the socket's loop only
        self.closed = False  # set by the route when the client disconnects

    async def send(self, frame: bytes | str) -> None:
        if self.closed:
            raise ClientGone("the /ws client")
        if _running_loop() is self._loop:
            await self._send(frame)
            return
        sending = self._send(frame)
        try:
            future = asyncio.run_coroutine_threadsafe(sending, self._loop)
        except RuntimeError as error:  # the socket's loop is closed: so is the socket
            sending.close()
            self.closed = True
            raise ClientGone("the /ws client") from error
        await asyncio.wrap_future(future)

    async def _send(self, frame: bytes | str) -> None:
        async with self._lock:  # one frame on the socket at a time, in order
            if self.closed:
                raise ClientGone("the /ws client")
            try:
                async with asyncio.timeout(SEND_TIMEOUT_SECONDS):
                    if isinstance(frame, bytes):
                        await self._websocket.send_bytes(frame)
                    else:
                        await self._websocket.send_text(frame)
            except Exception as error:  # closed, reset, timed out: the client is gone
                self.closed = True
                raise ClientGone("the /ws client") from error


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


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

    async def send(self, frame: bytes | str) -> None:
        """A ``FrameSink``'s send: the frame's events, queued (its JSON; audio comes base64)."""
        if self.closed:
            raise ClientGone("the /invocations caller")
        events = self.translate(json.loads(frame))
        if _running_loop() is self._loop:  # the turn's loop, the queue's: no hop
            for event in events:
                self._queue.put_nowait(event)
        else:
            for event in events:
                self._loop.call_soon_threadsafe(self._queue.put_nowait, event)

    def close(self) -> None:
        """The caller left (any thread): later frames fail as ``ClientGone``, and ``next()``
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
                return [{"type": "agent_start", "turn_id": frame["turn_id"], "mode": frame["mode"]}]
            case "text_delta":
                return [{"type": "text_delta", "text": frame["text"]}]
            case "audio":
                events = []
                if not self._audio_started:
                    self._audio_started = True
                    events.append(
                        {
                            "type": "audio_stream_start",
                            "format": "pcm16",
                            "sample_rate": SAMPLE_RATE,
                        }
                    )
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
