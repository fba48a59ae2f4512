"""``$connect`` authorizer: allow the connection if its ``token`` query parameter is valid."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from functions.auth_tokens import InvalidToken, verify_token
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


def authorize(raw: dict[str, Any], adapters: Adapters) -> dict[str, Any]:
    event = AuthorizerEvent.model_validate(raw)
    token = (event.query_string_parameters or {}).get("token")
    try:
        principal = verify_token(adapters.token_secret(), token)
    except InvalidToken as error:
        logger.info("connection denied", reason=str(error))
        return policy("anonymous", "Deny", event.method_arn)
    return policy(principal, "Allow", event.method_arn)


@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return authorize(event, current_adapters())
