"""The message routes ``ask``, ``speak``, ``cancel``, ``voices``, ``history`` and ``$default``:
validate, record, hand off.

A new turn is admitted and recorded by the conversation's rules (``functions.conversation``:
the rate limit, barge-in, the history cut to what was heard) over the connection's record in
DynamoDB, then the worker is invoked asynchronously (``InvocationType="Event"``) so this function
returns in milliseconds, far inside API Gateway's 29 s integration timeout. Bad input gets an
``error`` frame with a stable code; the connection stays.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.exceptions import BotoCoreError, ClientError
from pydantic import BaseModel

from functions.adapters.frame_sink import ApiGatewaySink, ClientGone, RelayError
from functions.conversation import refusals, rules, turn_frames
from functions.conversation.heard import remembered
from functions.conversation.state import ConversationClosed, DuplicateTurn
from functions.events import MessageEvent
from functions.observability import logger
from functions.wiring import Adapters, current_adapters
from functions.worker.job import WorkerJob
from voicewire.aws_domains import dns_suffix
from voicewire.client_protocol import (
    AskAction,
    CancelAction,
    HistoryAction,
    HistoryFrame,
    ListenAction,
    SpeakAction,
    VoiceList,
    VoicesAction,
    dump_control,
    parse_action,
)
from voicewire.client_protocol import ClientError as ErrorFrame
from voicewire.error_codes import ErrorCode, ProtocolError
from voicewire.voice_catalog import OFFICIAL_VOICES

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


def send_error(
    adapters: Adapters,
    url: str,
    connection_id: str,
    code: ErrorCode,
    message: str,
    turn_id: str | None = None,
) -> None:
    tell(adapters, url, connection_id, [ErrorFrame(code=code, message=message, turn_id=turn_id)])


SCOPE: refusals.Scope = "connection"  # what the client's words call this conversation


def tell(adapters: Adapters, url: str, connection_id: str, frames: Sequence[BaseModel]) -> None:
    """Post control frames in order through the connection's ``ApiGatewaySink``, the worker's
    sink (its retries of throttling and 5xx within a second, its ``ClientGone``); best effort:
    a client that left cannot be told, and a frame that fails for good is logged with its code.
    The handler is synchronous (Lambda's), so the posts run on a loop of their own."""
    sink = ApiGatewaySink(adapters.management_client(url), connection_id)

    async def post_in_order() -> None:
        for frame in frames:
            await sink.send(dump_control(frame).decode())  # str: a text frame

    try:
        asyncio.run(post_in_order())
    except ClientGone:
        logger.info("the client left before it was told", frames=len(frames))
    except RelayError as error:
        logger.warning("could not deliver a frame", code=error.code, attempts=error.attempts)


def handle_message(raw: dict[str, Any], adapters: Adapters) -> dict[str, Any]:
    accepted_at = time.time()
    event = MessageEvent.model_validate(raw)
    connection_id = event.request_context.connection_id
    url = callback_url(event, adapters)
    logger.append_keys(connection_id=connection_id)
    try:
        body = event.body if isinstance(event.body, str) else json.dumps(event.body)
        action = parse_action(body, adapters.settings.voices)
    except ProtocolError as error:
        send_error(adapters, url, connection_id, error.code, error.message, error.request_id)
        return OK
    match action:
        case CancelAction():
            cancel(adapters, url, connection_id, action)
        case AskAction() | SpeakAction():
            start_turn(adapters, url, connection_id, action, accepted_at)
        case VoicesAction():
            voices = adapters.settings.voices or frozenset(OFFICIAL_VOICES)
            tell(adapters, url, connection_id, [VoiceList.of(voices)])
        case ListenAction():
            # API Gateway routes "listen" to its own function (functions/handlers/listen.py),
            # whose role signs Transcribe URLs; this function's may not.
            send_error(
                adapters,
                url,
                connection_id,
                ErrorCode.LISTEN_UNAVAILABLE,
                "'listen' is answered by the listen route, which this API does not have",
            )
        case HistoryAction():
            connection = adapters.connections.get(connection_id)
            history = connection.history if connection else []
            tell(adapters, url, connection_id, [HistoryFrame(messages=remembered(history))])
    return OK


def cancel(adapters: Adapters, url: str, connection_id: str, action: CancelAction) -> None:
    conversation = adapters.conversation(connection_id)
    outcome = rules.cancel(conversation, action.turn_id, action.heard_ms)
    match outcome.verdict:
        case rules.CancelVerdict.CUT:
            logger.info("history cut to what was heard", heard_ms=action.heard_ms)
        case rules.CancelVerdict.UNKNOWN_TURN:
            tell(adapters, url, connection_id, [refusals.unknown_turn(action.turn_id, SCOPE)])
        case rules.CancelVerdict.CANCELLED:
            logger.info(
                "turn cancelled by the client", turn_id=outcome.turn_id, heard_ms=action.heard_ms
            )


def refuse_over_limit(
    adapters: Adapters,
    url: str,
    connection_id: str,
    action: AskAction | SpeakAction,
    turn_id: str,
) -> None:
    """The connection started its limit of turns this minute (or is gone): nothing is recorded
    or started, and an active turn goes on."""
    connection = adapters.connections.get(connection_id)
    if connection is None or connection.status != "open":
        logger.info("turn refused: connection not open", turn_id=turn_id)
        return
    limit = adapters.settings.max_turns_per_minute
    tell(adapters, url, connection_id, [refusals.too_many_turns(action, limit, SCOPE)])
    logger.info("turn refused: turns per minute", turn_id=turn_id, limit=limit)


def start_turn(
    adapters: Adapters,
    url: str,
    connection_id: str,
    action: AskAction | SpeakAction,
    accepted_at: float,
) -> None:
    turn_id, mode = refusals.turn_id_of(action), refusals.mode_of(action)
    conversation = adapters.conversation(connection_id)
    try:
        admission = rules.start_turn(
            conversation,
            turn_id,
            mode,
            action.heard_ms,
            limit=adapters.settings.max_turns_per_minute,
            now=accepted_at,
        )
    except DuplicateTurn:
        tell(adapters, url, connection_id, [refusals.duplicate_turn(turn_id, SCOPE)])
        return
    except ConversationClosed:
        logger.info("turn refused: connection not open", turn_id=turn_id)
        return
    except (ClientError, BotoCoreError):
        # DynamoDB failed past the client's retries (throttled, unavailable): a turn that is
        # not recorded must not run, and the client hears why rather than nothing.
        logger.exception("the turn could not be recorded", turn_id=turn_id)
        send_error(
            adapters,
            url,
            connection_id,
            ErrorCode.STATE_UNAVAILABLE,
            "the session state could not be written; the turn was not started",
            action.turn_id,
        )
        return
    if admission.verdict == rules.Admission.OVER_LIMIT:
        refuse_over_limit(adapters, url, connection_id, action, turn_id)
        return
    turn, replaced = admission.turn, admission.replaced
    assert turn is not None  # started
    if replaced is not None:
        logger.info("barge-in: previous turn cancelled", turn_id=replaced, heard_ms=action.heard_ms)
    if turn.status != "running":
        # Cancelled while it was being recorded (a cancel, a newer turn, a disconnect handled
        # at the same time): no worker runs it, and the client hears that it ended.
        named = turn_frames.TurnName(turn_id, turn.turn, mode)
        tell(adapters, url, connection_id, turn_frames.unspoken(named, turn.status))
        logger.info("turn cancelled before it started", turn_id=turn_id)
        return
    job = WorkerJob(
        connection_id=connection_id,
        turn_id=turn_id,
        turn=turn.turn,
        mode=mode,
        prompt=action.prompt if isinstance(action, AskAction) else None,
        text=action.text if isinstance(action, SpeakAction) else None,
        voice=action.voice,
        speed=action.speed,
        accepted_at=accepted_at,
        callback_url=url,
        audio=turn.audio or "binary",  # type: ignore[arg-type]
        text_deltas=action.text_deltas if isinstance(action, AskAction) else "live",
        word_timings=action.word_timings,
        replaces=replaced,
    )
    try:
        adapters.lambda_client.invoke(
            FunctionName=adapters.settings.worker_function,
            InvocationType="Event",
            Payload=job.model_dump_json().encode(),
        )
    except (ClientError, BotoCoreError) as error:
        # Throttled, the function missing, the network: no worker will run this turn, so it
        # must not stay active; the client hears why, and the connection stays usable.
        logger.exception("the worker could not be invoked", turn_id=turn_id)
        adapters.turns.fail(connection_id, turn_id, ErrorCode.WORKER_UNAVAILABLE)
        code = (
            error.response.get("Error", {}).get("Code", "")
            if isinstance(error, ClientError)
            else type(error).__name__
        )
        error = ErrorFrame(
            code=ErrorCode.WORKER_UNAVAILABLE,
            turn_id=turn_id,
            message=f"the turn's worker could not be started ({code})",
        )
        named = turn_frames.TurnName(turn_id, turn.turn, mode)
        tell(adapters, url, connection_id, turn_frames.unspoken(named, "failed", error=error))
        return
    logger.info("turn accepted", turn_id=turn_id, turn=turn.turn, mode=mode)


@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return handle_message(event, current_adapters())
