"""Connection tokens: HMAC-SHA256 JWTs that name a principal and expire.

Browsers cannot set headers on a WebSocket, so the token travels as the ``token`` query
parameter of the ``$connect`` request, where the authorizer checks it. ``agent-infra token``
(and tests) mint them with ``mint_token``.
"""

from __future__ import annotations

import time

import jwt

ALGORITHM = "HS256"
ISSUER = "voicewire"
DEFAULT_TTL_SECONDS = 3600
# Where a deployment keeps the HMAC secret (an SSM SecureString made by ``agent-infra deploy``).
TOKEN_SECRET_PARAMETER = "/voicewire/token-secret"


class InvalidToken(Exception):
    """Missing, malformed, wrongly signed or expired: the reason is logged, never returned."""


def mint_token(
    secret: str, principal: str, ttl_seconds: int = DEFAULT_TTL_SECONDS, now: float | None = None
) -> str:
    issued = int(now if now is not None else time.time())
    claims = {"sub": principal, "iss": ISSUER, "iat": issued, "exp": issued + ttl_seconds}
    return jwt.encode(claims, secret, algorithm=ALGORITHM)


def verify_token(secret: str, token: str | None) -> str:
    """The token's principal, or ``InvalidToken``."""
    if not token:
        raise InvalidToken("no token")
    try:
        claims = jwt.decode(
            token,
            secret,
            algorithms=[ALGORITHM],  # never "none", never an asymmetric algorithm
            issuer=ISSUER,
            options={"require": ["exp", "sub", "iss"]},
        )
    except jwt.PyJWTError as error:
        raise InvalidToken(str(error)) from None
    return str(claims["sub"])
