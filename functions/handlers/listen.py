"""The ``listen`` route: a presigned Amazon Transcribe streaming URL for this client's
microphone, answered on the route itself.

The route is two-way (a route response, ``stacks/voice_api.py``): API Gateway sends the body this
function returns to the client, so it needs no ``@connections`` permission, and its role may only
``transcribe:StartStreamTranscriptionWebSocket``: the URL it signs opens a Transcribe stream and
nothing else. The audio goes from the client to Transcribe; the final transcript comes back as an
``ask`` on the ``ask`` route, with every rule a typed question has. Bad input (a language not
offered, a sample rate Transcribe refuses) is an ``error`` frame with a stable code.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from functions.access.listen_answer import answer_listen
from functions.access.listen_signer import ListenSigner, current_listen_signer
from functions.conversation.state import ConversationState
from functions.events import MessageEvent
from functions.failure_frames import failure_frame
from functions.observability import logger
from functions.wiring import current_adapters
from voicewire.client_protocol import ListenAction, dump_control, parse_action
from voicewire.error_codes import ErrorCode, ProtocolError


def listen(
    raw: dict[str, Any],
    signer: ListenSigner,
    state_of: Callable[[str], ConversationState] | None = None,
) -> dict[str, Any]:
    """``state_of``: the connection's conversation (its listen window); the session table's."""
    event = MessageEvent.model_validate(raw)
    connection_id = event.request_context.connection_id
    logger.append_keys(connection_id=connection_id)
    body = event.body if isinstance(event.body, str) else None
    try:
        action = parse_action(body)
        if not isinstance(action, ListenAction):  # the route selects on the action's name
            raise ProtocolError(ErrorCode.UNKNOWN_ACTION, "the listen route takes only 'listen'")
    except ProtocolError as error:
        logger.info("listen refused", code=error.code.value)
        return {"statusCode": 200, "body": dump_control(failure_frame(error)).decode()}
    state_of = state_of or current_adapters().conversation
    answer = answer_listen(action, signer, state_of(connection_id), time.time())
    if answer.type == "listen":
        logger.info("listen offered", language_code=action.language_code)
    return {"statusCode": 200, "body": dump_control(answer).decode()}


@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return listen(event, current_listen_signer())
