"""``$connect``: record the connection, its principal and how its audio is delivered: as it asks
(``?audio=binary|base64``), else the API's default (``VOICEWIRE_AUDIO_DELIVERY``)."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from functions.access.origins import origin_allowed
from functions.events import ConnectEvent
from functions.observability import logger
from functions.wiring import Adapters, current_adapters


def connect(raw: dict[str, Any], adapters: Adapters) -> dict[str, Any]:
    event = ConnectEvent.model_validate(raw)
    context = event.request_context
    if not origin_allowed(event.headers, adapters.settings.allowed_origins):
        # Also here, not only in the authorizer: a stack without tickets has no authorizer.
        logger.info("connection refused: origin not allowed")
        return {"statusCode": 403, "body": "this origin may not connect"}
    audio = (event.query_string_parameters or {}).get("audio", adapters.settings.audio_delivery)
    if audio not in ("binary", "base64"):
        logger.info("connection refused: bad audio parameter", audio=audio)
        return {"statusCode": 400, "body": "audio must be 'binary' or 'base64'"}
    authorizer = context.authorizer or {}
    principal = str(authorizer.get("principal") or authorizer.get("principalId") or "anonymous")
    adapters.connections.put(
        context.connection_id, principal, audio, now=context.request_time_epoch.timestamp()
    )
    logger.info("connected", connection_id=context.connection_id, principal=principal, audio=audio)
    return {"statusCode": 200}


@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return connect(event, current_adapters())
