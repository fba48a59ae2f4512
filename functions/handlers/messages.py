"""The message routes ``ask``, ``speak``, ``cancel``, ``voices``, ``history`` and ``$default``:
the turn lifecycle's host on the WebSocket API's side (``functions.lifecycle``).

Each message is answered by the lifecycle over the connection's record in DynamoDB
(``TableConversation``); what this route supplies is what only it knows: frames go to the client
through API Gateway's ``@connections`` (``ApiGatewaySink``: its retries, its ``ClientGone``), an
admitted turn is set running by invoking the worker asynchronously (``InvocationType="Event"``,
so this function returns in milliseconds, far inside API Gateway's 29 s integration timeout),
a cancel reaches the worker through the turn's record (it polls it), and ``listen`` has a route
of its own. Bad input gets an ``error`` frame with a stable code; the connection stays.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.exceptions import BotoCoreError, ClientError
from pydantic import BaseModel

from functions.adapters.frame_sink import ApiGatewaySink, ClientGone, RelayError
from functions.conversation import refusals
from functions.conversation.state import ConversationState
from functions.events import MessageEvent
from functions.failure_frames import WorkerUnavailable
from functions.lifecycle.front_door import AdmittedTurn, answer
from functions.observability import logger
from functions.wiring import Adapters, current_adapters
from functions.worker.job import WorkerJob
from voicewire.aws_domains import dns_suffix
from voicewire.client_protocol import AskAction, ListenAction, SpeakAction, dump_control
from voicewire.client_protocol import ClientError as ErrorFrame
from voicewire.error_codes import ErrorCode

OK = {"statusCode": 200}


def callback_url(event: MessageEvent, adapters: Adapters) -> str:
    """The ``@connections`` endpoint: the configured one, else the API's own execute-api URL.

    Not the event's ``domainName``: behind a custom domain that is the custom name, whose path
    maps to the stage (``https://voice.example.com/`` has no ``/{stage}/@connections``)."""
    settings = adapters.settings
    if settings.callback_url:
        return settings.callback_url
    context = event.request_context
    if settings.region is None:
        raise RuntimeError("AWS_REGION is not set and no VOICEWIRE_CALLBACK_URL is configured")
    domain = f"execute-api.{settings.region}.{dns_suffix(settings.region)}"
    return f"https://{context.api_id}.{domain}/{context.stage}"


@dataclass
class ConnectionDoor:
    """One API Gateway connection, as the lifecycle's ``FrontDoor``."""

    adapters: Adapters
    connection_id: str
    url: str  # the @connections endpoint
    scope: refusals.Scope = "connection"
    state: ConversationState = field(init=False)
    sink: ApiGatewaySink = field(init=False)

    def __post_init__(self) -> None:
        self.state = self.adapters.conversation(self.connection_id)
        self.sink = ApiGatewaySink(self.adapters.management_client(self.url), self.connection_id)

    @property
    def voices(self) -> frozenset[str] | None:
        return self.adapters.settings.voices

    @property
    def max_turns_per_minute(self) -> int:
        return self.adapters.settings.max_turns_per_minute

    async def offload[T](self, call: Callable[..., T], *args: Any) -> T:
        return await asyncio.to_thread(call, *args)

    async def tell(self, frame: BaseModel) -> None:
        """Post through the worker's sink (its retries of throttling and 5xx within a second);
        best effort: a client that left cannot be told, a frame that fails for good is logged."""
        try:
            await self.sink.send(dump_control(frame).decode())  # str: a text frame
        except ClientGone:
            logger.info("the client left before it was told")
        except RelayError as error:
            logger.warning("could not deliver a frame", code=error.code, attempts=error.attempts)

    async def launch(self, turn: AdmittedTurn) -> None:
        action = turn.action
        job = WorkerJob(
            connection_id=self.connection_id,
            turn_id=turn.turn_id,
            turn=turn.turn,
            mode=turn.mode,
            prompt=action.prompt if isinstance(action, AskAction) else None,
            text=action.text if isinstance(action, SpeakAction) else None,
            voice=action.voice,
            speed=action.speed,
            accepted_at=turn.accepted_at,
            callback_url=self.url,
            audio=turn.started.audio or "binary",  # type: ignore[arg-type]
            text_deltas=action.text_deltas if isinstance(action, AskAction) else "live",
            word_timings=action.word_timings,
            replaces=turn.replaced,
        )
        try:
            await asyncio.to_thread(
                self.adapters.lambda_client.invoke,
                FunctionName=self.adapters.settings.worker_function,
                InvocationType="Event",
                Payload=job.model_dump_json().encode(),
            )
        except (ClientError, BotoCoreError) as error:
            # Throttled, the function missing, the network: no worker will run this turn.
            reason = (
                error.response.get("Error", {}).get("Code", "")
                if isinstance(error, ClientError)
                else type(error).__name__
            )
            raise WorkerUnavailable(reason) from error

    async def stop(self, turn_id: str) -> None:
        """Nothing to do here: the worker sees the cancel in the turn's record (its poll)."""

    async def listen(self, action: ListenAction) -> None:
        # API Gateway routes "listen" to its own function (functions/handlers/listen.py), whose
        # role signs Transcribe URLs; this function's may not.
        await self.tell(
            ErrorFrame(
                code=ErrorCode.LISTEN_UNAVAILABLE,
                message="'listen' is answered by the listen route, which this API does not have",
            )
        )


def handle_message(raw: dict[str, Any], adapters: Adapters) -> dict[str, Any]:
    accepted_at = time.time()
    event = MessageEvent.model_validate(raw)
    connection_id = event.request_context.connection_id
    logger.append_keys(connection_id=connection_id)
    door = ConnectionDoor(adapters, connection_id, callback_url(event, adapters))
    body = event.body if isinstance(event.body, str) else json.dumps(event.body)
    # Lambda's handler is synchronous: the lifecycle and its posts run on a loop of their own.
    asyncio.run(answer(door, body, accepted_at))
    return OK


@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return handle_message(event, current_adapters())
