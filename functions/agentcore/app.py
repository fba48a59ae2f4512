"""The voice agent as a Bedrock AgentCore Runtime container: the SDK's ``BedrockAgentCoreApp``
with voicewire's turns behind its two routes.

- ``POST /invocations`` (payload ``{prompt, mode, voice, speed}``, the seed's): the turn as
  server-sent events in the seed's contract (``functions.agentcore.transports.SeedEvents``),
  audio base64 inside JSON, so that a client written for the seed works unchanged. A payload
  with ``text`` instead of ``prompt`` speaks that text; ``"events": "all"`` adds voicewire's
  own frames (``sentence``, ``words``, ``tool_start``, ``tool_end``).
- ``/ws``: voicewire's client-link protocol, the frames API Gateway carries
  (``voicewire.client_protocol``): ``ask``, ``speak``, ``cancel``, ``voices``, ``history``;
  audio as binary frames, or base64 text frames with ``?audio=base64`` (the default is the
  settings' ``VOICEWIRE_AUDIO_DELIVERY``: AgentCore documents no binary frame support yet).
- ``GET /ping``: the SDK's; ``HealthyBusy`` while a turn runs, so AgentCore does not take the
  session's microVM away mid-answer.

Both routes key the conversation by AgentCore's runtime session id (the
``X-Amzn-Bedrock-AgentCore-Runtime-Session-Id`` header): the history of an SSE ask is there for
the next one, and for a ``/ws`` connection of the same session.

The turn is the Lambda worker's (``functions.turn.assembly``: the same agent, chunker, speech
session and relay). Every turn runs on one loop of its own (``functions.environment_loop``),
whichever route it came from: the SDK runs async generators on its worker loop and WebSockets on
uvicorn's, and a speech session kept warm for the next turn belongs to the loop that opened it.
Nothing on the turn's path blocks that loop: boto3 calls run in threads, and a ``/ws`` frame is
handed to the socket's loop and awaited (``functions.agentcore.transports.WebSocketSink``).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from functools import partial
from typing import Any

from bedrock_agentcore.runtime import BedrockAgentCoreApp, RequestContext
from pydantic import BaseModel
from starlette.middleware import Middleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from starlette.websockets import WebSocket, WebSocketDisconnect

from functions.adapters.frame_sink import FrameSink
from functions.adapters.relay import Relay
from functions.agentcore.conversation import ActiveTurn, Conversation, Conversations
from functions.agentcore.transports import SeedEvents, WebSocketSink
from functions.environment_loop import environment_loop
from functions.failure_frames import failure_frame
from functions.lifecycle.front_door import AdmittedTurn, answer, start
from functions.observability import logger
from functions.wiring import Adapters, current_adapters
from voicewire.client_protocol import (
    AskAction,
    SpeakAction,
    dump_control,
    parse_action,
)
from voicewire.client_protocol import ClientError as ErrorFrame
from voicewire.error_codes import ErrorCode, ProtocolError

AUDIO_DELIVERIES = ("binary", "base64")


async def on_turn_loop[T](coroutine: Coroutine[Any, Any, T]) -> T:
    """Await ``coroutine`` run on the turns' loop, from any loop."""
    loop = environment_loop()
    try:
        if asyncio.get_running_loop() is loop:
            return await coroutine
    except RuntimeError:
        pass
    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coroutine, loop))


def build_app(adapters: Callable[[], Adapters] = current_adapters) -> BedrockAgentCoreApp:
    """The app; ``adapters`` gives the turns' LLM, speech sessions and settings (the
    environment's in the container, the local stack's on this machine)."""
    app = BedrockAgentCoreApp(middleware=[Middleware(CallerWatch)])
    conversations = Conversations(adapters)
    app.state.conversations = conversations  # what the local stack and its tests look into

    @app.entrypoint
    async def invocations(payload: Any, context: RequestContext) -> AsyncIterator[dict[str, Any]]:
        """One turn as the seed's server-sent events (the SDK streams what this yields)."""
        conversation = conversations.of(context.session_id)
        loop = environment_loop()
        events = SeedEvents(
            loop, extra=isinstance(payload, dict) and payload.get("events") == "all"
        )
        busy = app.add_async_task("voice turn")
        turn = None
        ended = False
        try:
            turn = await on_turn_loop(_start_invocation(conversation, payload, events))
            if turn is not None and context.request is not None:
                context.request.scope[CALLER_LEFT] = partial(_caller_left, loop, events, turn)
            while (event := await on_turn_loop(events.next())) is not None:
                yield event
            ended = True
        finally:
            app.complete_async_task(busy)
            if turn is not None and not ended:  # the SDK closed the stream early: the turn stops
                _caller_left(loop, events, turn)

    @app.websocket
    async def websocket(socket: WebSocket, context: RequestContext) -> None:
        """voicewire's client-link protocol, one conversation per runtime session."""
        delivery = socket.query_params.get("audio") or adapters().settings.audio_delivery
        if delivery not in AUDIO_DELIVERIES:
            await socket.close(code=1008, reason="audio must be binary or base64")
            return
        await socket.accept()
        conversation = conversations.of(context.session_id)
        sink = WebSocketSink(socket, asyncio.get_running_loop())
        logger.info("connected", session_id=conversation.session_id, audio=delivery)
        try:
            while True:
                message = await socket.receive()
                if message["type"] == "websocket.disconnect":
                    break
                body = message.get("text")
                if body is None:
                    await sink.send(
                        dump_control(
                            ErrorFrame(
                                code=ErrorCode.INVALID_JSON,
                                message="send actions as JSON text frames, not binary ones",
                            )
                        ).decode()
                    )
                    continue
                await on_turn_loop(_handle(conversation, body, sink, delivery, app))
        except WebSocketDisconnect:
            pass
        finally:
            sink.closed = True
            await on_turn_loop(conversation.leave(sink))
            logger.info("disconnected", session_id=conversation.session_id)

    return app


async def _handle(
    conversation: Conversation,
    body: str,
    sink: WebSocketSink,
    delivery: str,
    app: BedrockAgentCoreApp,
) -> None:
    """One client message of ``/ws``, on the turns' loop, answered by the lifecycle."""

    async def tell(frame: BaseModel) -> None:
        await sink.send(dump_control(frame).decode())  # JSON: a text frame

    def relay_for(turn: AdmittedTurn) -> Relay:
        sentences = getattr(turn.action, "text_deltas", "") == "sentence"
        return _relay(sink, delivery, "sentence" if sentences else None, turn.turn)

    def busy_while(turn: ActiveTurn) -> None:  # /ping says HealthyBusy while it runs
        if turn.task is not None:
            busy = app.add_async_task("voice turn")
            turn.task.add_done_callback(lambda _: app.complete_async_task(busy))

    door = conversation.door(tell, relay_for, client=sink, on_launch=busy_while)
    await answer(door, body)


def _relay(sink: FrameSink, delivery: str, text_flush: str | None, turn: int) -> Relay:
    return Relay(
        sink,
        turn,
        delivery,  # type: ignore[arg-type]
        text_flush=text_flush or "interval",
    )


CALLER_LEFT = "voicewire.caller_left"  # the ASGI scope's key for what to do then


class CallerWatch:
    """ASGI middleware: tells an ``/invocations`` stream that its caller left.

    The SDK streams an async generator through a thread and a queue, and closes it only when
    the next event comes after the caller left: a turn would speak to nobody until its end.
    Starlette's streaming response reads the request's ``http.disconnect`` as it comes; this
    sees it go by and calls what the invocation left in the scope (``CALLER_LEFT``)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def watched() -> Message:
            message = await receive()
            if message["type"] == "http.disconnect" and (left := scope.get(CALLER_LEFT)):
                left()
            return message

        await self.app(scope, watched, send)


def _caller_left(loop: asyncio.AbstractEventLoop, events: SeedEvents, turn: ActiveTurn) -> None:
    """The caller of an invocation left (any thread): its turn stops as on a disconnect (the
    history keeps what it can have heard), and nothing more is queued for it."""
    events.close()
    loop.call_soon_threadsafe(turn.stop)


async def _start_invocation(
    conversation: Conversation, payload: Any, events: SeedEvents
) -> ActiveTurn | None:
    """Start the invocation's turn; a payload that is not one ends the stream with the seed's
    ``error`` event."""

    async def tell(frame: BaseModel) -> None:
        events.refuse(json.loads(dump_control(frame)))

    door = conversation.door(tell, lambda turn: _relay(events, "base64", None, turn.turn), events)
    try:
        action = parse_action(json.dumps(_as_action(payload)), door.voices)
    except ProtocolError as error:
        await tell(failure_frame(error))
        return None
    assert isinstance(action, AskAction | SpeakAction)  # _as_action names one of the two
    await start(door, action, time.time())
    return door.launched


def _as_action(payload: Any) -> Any:
    """The seed's payload as voicewire's ``ask`` (or ``speak``, given ``text``); its
    ``endpoint`` is the runtime's own speech endpoint here, so it is not read."""
    if not isinstance(payload, dict):
        return payload  # parse_action says what is wrong with it
    fields = {k: v for k, v in payload.items() if k not in ("endpoint", "events", "action")}
    # Word timings cost the speech server work, and only voicewire's own events carry them.
    fields.setdefault("word_timings", payload.get("events") == "all")
    if "text" in fields and "prompt" not in fields:
        fields.pop("mode", None)
        return {"action": "speak", **fields}
    return {"action": "ask", **fields}
