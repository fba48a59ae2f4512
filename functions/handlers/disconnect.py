"""``$disconnect``: mark the connection gone and cancel its active turn."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from functions.events import DisconnectEvent
from functions.observability import logger
from functions.wiring import Adapters, current_adapters


def disconnect(raw: dict[str, Any], adapters: Adapters) -> dict[str, Any]:
    event = DisconnectEvent.model_validate(raw)
    connection_id = event.request_context.connection_id
    active = adapters.connections.mark_gone(connection_id)
    if active is not None:
        adapters.turns.cancel(connection_id, active)  # the worker sees it and stops
    logger.info("disconnected", connection_id=connection_id, cancelled_turn=active)
    return {"statusCode": 200}


@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return disconnect(event, current_adapters())
