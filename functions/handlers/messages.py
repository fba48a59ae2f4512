"""The message routes ``ask``, ``speak``, ``cancel`` and ``$default``: validate, record, hand off.

A new turn is written with conditional writes (which also cancels the connection's active turn:
barge-in), then the worker is invoked asynchronously (``InvocationType="Event"``) so this function
returns in milliseconds, far inside API Gateway's 29 s integration timeout. Bad input gets an
``error`` frame with a stable code; the connection stays.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.exceptions import ClientError

from functions.adapters.session_store import ConnectionClosed, DuplicateTurn
from functions.events import MessageEvent
from functions.observability import logger
from functions.wiring import Adapters, current_adapters
from functions.worker_job import WorkerJob
from voicewire.client_protocol import (
    AskAction,
    CancelAction,
    SpeakAction,
    dump_control,
    parse_action,
)
from voicewire.client_protocol import ClientError as ErrorFrame
from voicewire.error_codes import ErrorCode, ProtocolError

OK = {"statusCode": 200}


def callback_url(event: MessageEvent, adapters: Adapters) -> str:
    if adapters.settings.callback_url:
        return adapters.settings.callback_url
    context = event.request_context
    return f"https://{context.domain_name}/{context.stage}"


def send_error(
    adapters: Adapters, url: str, connection_id: str, code: ErrorCode, message: str,
    turn_id: str | None = None,
) -> None:  # fmt: skip
    frame = ErrorFrame(code=code, message=message, turn_id=turn_id)
    try:
        adapters.management_client(url).post_to_connection(
            ConnectionId=connection_id, Data=dump_control(frame)
        )
    except ClientError as error:  # the client left: nobody to tell
        logger.info("could not deliver an error frame", code=str(code), reason=str(error))


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
    return OK


def cancel(adapters: Adapters, url: str, connection_id: str, action: CancelAction) -> None:
    connection = adapters.store.get_connection(connection_id)
    active = connection.active_turn_id if connection else None
    if active is None or (action.turn_id is not None and action.turn_id != active):
        named = f"turn {action.turn_id!r}" if action.turn_id else "a turn"
        send_error(
            adapters, url, connection_id, ErrorCode.UNKNOWN_TURN,
            f"{named} is not running on this connection", action.turn_id,
        )  # fmt: skip
        return
    adapters.store.cancel_turn(connection_id, active)
    logger.info("turn cancelled by the client", turn_id=active)


def start_turn(
    adapters: Adapters,
    url: str,
    connection_id: str,
    action: AskAction | SpeakAction,
    accepted_at: float,
) -> None:
    turn_id = action.turn_id or f"t-{uuid.uuid4().hex[:12]}"
    mode = action.mode if isinstance(action, AskAction) else "speak"
    try:
        turn, replaced = adapters.store.start_turn(connection_id, turn_id, mode, accepted_at)
    except DuplicateTurn:
        send_error(
            adapters, url, connection_id, ErrorCode.INVALID_FIELD,
            f"turn_id {turn_id!r} was already used on this connection", turn_id,
        )  # fmt: skip
        return
    except ConnectionClosed:
        logger.info("turn refused: connection not open", turn_id=turn_id)
        return
    if replaced is not None and adapters.store.cancel_turn(connection_id, replaced):
        logger.info("barge-in: previous turn cancelled", turn_id=replaced)
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
        audio=turn.audio,
    )
    adapters.lambda_client.invoke(
        FunctionName=adapters.settings.worker_function,
        InvocationType="Event",
        Payload=job.model_dump_json().encode(),
    )
    logger.info("turn accepted", turn_id=turn_id, turn=turn.turn, mode=mode)


@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return handle_message(event, current_adapters())
