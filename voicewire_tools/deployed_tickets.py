"""Connect tickets for a deployed API, minted from the secret ``agent-infra deploy`` made (an SSM
SecureString): ``agent-infra token``, and a fresh ticket per connection for the tools that open
several (``agent-infra demo`` and ``check``, ``voicewire bench --mint-tickets``)."""

from __future__ import annotations

import sys
from collections.abc import Callable

from botocore.exceptions import BotoCoreError

from functions.access.tickets import TOKEN_SECRET_PARAMETER
from voicewire_tools.commands.cdk_runner import InfraError


def deployed_secret() -> str:
    import boto3
    from botocore.exceptions import ClientError

    try:
        parameter = boto3.client("ssm").get_parameter(
            Name=TOKEN_SECRET_PARAMETER, WithDecryption=True
        )
    except ClientError as error:
        raise InfraError(
            f"the token secret {TOKEN_SECRET_PARAMETER} cannot be read ({error}): deploy first "
            "(agent-infra deploy), with credentials of the same account and region"
        ) from None
    return str(parameter["Parameter"]["Value"])


def deployed_token(ttl: int, principal: str) -> str:
    """One connect ticket, good for one connection within ``ttl`` seconds (at most 600)."""
    from functions.access.tickets import mint_token

    return mint_token(deployed_secret(), principal, ttl)


def ticket_minter(principal: str, required: bool = False) -> Callable[[], str | None]:
    """A fresh connect ticket per call, from the deployed secret (read at the first call). An
    API without tickets (the local stack) needs none: when the secret cannot be read (no
    deployment, no credentials), it says so once and gives None, and connections go without.
    required: the secret is read now, and InfraError says why it cannot be."""
    from functions.access.tickets import mint_token

    secret: list[str | None] = [deployed_secret()] if required else []

    def mint() -> str | None:
        if not secret:
            try:
                secret.append(deployed_secret())
            except (InfraError, BotoCoreError) as error:
                print(f"connecting without a ticket: {error}", file=sys.stderr)
                secret.append(None)
        return mint_token(secret[0], principal) if secret[0] else None

    return mint
