"""API Gateway WebSocket events as the handlers receive them (pydantic, from Powertools' models).

Powertools' WebSocket models leave out two fields the pipeline needs: the ``$connect`` query
string (``token`` for the authorizer, ``audio`` for the delivery) and the authorizer's context
that API Gateway adds to ``requestContext`` once a Lambda authorizer allowed the connection.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.parser.models import (
    APIGatewayWebSocketConnectEventModel,
    APIGatewayWebSocketConnectEventRequestContext,
    APIGatewayWebSocketDisconnectEventModel,
    APIGatewayWebSocketMessageEventModel,
)
from pydantic import BaseModel, Field


class ConnectRequestContext(APIGatewayWebSocketConnectEventRequestContext):
    authorizer: dict[str, Any] | None = None


class ConnectEvent(APIGatewayWebSocketConnectEventModel):
    request_context: ConnectRequestContext = Field(alias="requestContext")
    query_string_parameters: dict[str, str] | None = Field(
        default=None, alias="queryStringParameters"
    )


class AuthorizerEvent(BaseModel):
    """A REQUEST authorizer event for ``$connect`` (identity source: the ``token`` query)."""

    type: str = "REQUEST"
    method_arn: str = Field(alias="methodArn")
    headers: dict[str, str] | None = None
    query_string_parameters: dict[str, str] | None = Field(
        default=None, alias="queryStringParameters"
    )


MessageEvent = APIGatewayWebSocketMessageEventModel
DisconnectEvent = APIGatewayWebSocketDisconnectEventModel
