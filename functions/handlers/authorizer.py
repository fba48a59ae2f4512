"""``$connect`` authorizer: allow the connection if its ``token`` query parameter is a valid
connect ticket not used before, and its browser origin (if any) is allowed.

Nothing of the request is logged but the reason for a denial: the ticket is a credential, and
the event (query string included) is never logged whole."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from functions.access.origins import origin_allowed
from functions.access.tickets import InvalidToken, verify_token
from functions.events import AuthorizerEvent
from functions.observability import logger
from functions.wiring import Adapters, current_adapters


def policy(principal: str, effect: str, method_arn: str) -> dict[str, Any]:
    return {
        "principalId": principal,
        "policyDocument": {
            "Version": "2012-10-17",
            "Statement": [
                {"Action": "execute-api:Invoke", "Effect": effect, "Resource": method_arn}
            ],
        },
        "context": {"principal": principal},
    }


def authorize(raw: dict[str, Any], adapters: Adapters, now: float | None = None) -> dict[str, Any]:
    event = AuthorizerEvent.model_validate(raw)
    if not origin_allowed(event.headers, adapters.settings.allowed_origins):
        logger.info("connection denied", reason="origin not allowed")
        return policy("anonymous", "Deny", event.method_arn)
    token = (event.query_string_parameters or {}).get("token")
    try:
        ticket = verify_token(adapters.token_secret(), token, now=now or adapters.clock())
    except InvalidToken as error:
        logger.info("connection denied", reason=str(error))
        return policy("anonymous", "Deny", event.method_arn)
    if not adapters.tickets.use(ticket.ticket_id, ticket.expires_at):
        logger.info("connection denied", reason="ticket already used", principal=ticket.principal)
        return policy("anonymous", "Deny", event.method_arn)
    return policy(ticket.principal, "Allow", event.method_arn)


@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return authorize(event, current_adapters())
