"""Connect tickets: short-lived, single-use HMAC-SHA256 JWTs that name a principal.

Browsers cannot set headers on a WebSocket, so the ticket travels as the ``token`` query
parameter of the ``$connect`` request, where the authorizer checks it. A URL ends up in places a
header does not (browser history, proxies' logs), so a ticket is worth little once seen: it
expires within minutes (``MAX_TICKET_SECONDS``) and opens one connection (its ``jti`` is recorded
when it is used, and a second use is refused). An application's backend mints one per
connection with the shared secret; ``agent-infra token`` and ``voicewire up --tokens`` do it for
people trying things.

Every check is the verifier's, never the token's say: the algorithm is HS256 only (no ``none``,
no RS/ES algorithm whose "public key" could be this secret), and ``exp``, ``iat``, ``sub``,
``iss``, ``aud`` and ``jti`` are all required, with a small leeway for clocks that disagree.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass

import jwt

ALGORITHM = "HS256"
ISSUER = "voicewire"
AUDIENCE = "voicewire-connect"
DEFAULT_TTL_SECONDS = 120  # long enough to open a connection after fetching the ticket
MAX_TICKET_SECONDS = 600  # a ticket that claims to live longer is refused, whoever signed it
LEEWAY_SECONDS = 30  # clock skew between the minting backend and the authorizer
REQUIRED_CLAIMS = ("exp", "iat", "sub", "iss", "aud", "jti")
# Where a deployment keeps the HMAC secret (an SSM SecureString made by ``agent-infra deploy``).
TOKEN_SECRET_PARAMETER = "/voicewire/token-secret"


class InvalidToken(Exception):
    """Missing, malformed, wrongly signed, expired or reused: the reason is logged (never the
    token), and the client only hears 403."""


@dataclass(frozen=True)
class Ticket:
    principal: str
    ticket_id: str  # the jti: recorded at first use, refused at the second
    expires_at: float


def mint_token(
    secret: str,
    principal: str,
    ttl_seconds: int = DEFAULT_TTL_SECONDS,
    now: float | None = None,
) -> str:
    """A ticket for one connection by ``principal``, valid ``ttl_seconds`` (at most
    ``MAX_TICKET_SECONDS``)."""
    if not 0 < ttl_seconds <= MAX_TICKET_SECONDS:
        raise ValueError(f"a ticket lives 1..{MAX_TICKET_SECONDS} s, not {ttl_seconds}")
    issued = int(now if now is not None else time.time())
    claims = {
        "sub": principal,
        "iss": ISSUER,
        "aud": AUDIENCE,
        "iat": issued,
        "exp": issued + ttl_seconds,
        "jti": secrets.token_urlsafe(16),
    }
    return jwt.encode(claims, secret, algorithm=ALGORITHM)


def verify_token(secret: str, token: str | None, now: float | None = None) -> Ticket:
    """The ticket's claims once every check passed, or ``InvalidToken`` saying which failed.
    Single use is the caller's to enforce, with the returned ``ticket_id``."""
    if not token:
        raise InvalidToken("no token")
    moment = now if now is not None else time.time()
    try:
        claims = jwt.decode(
            token,
            secret,
            algorithms=[ALGORITHM],
            issuer=ISSUER,
            audience=AUDIENCE,
            leeway=LEEWAY_SECONDS,
            options={"require": list(REQUIRED_CLAIMS), "verify_exp": False, "verify_iat": False},
        )
    except jwt.PyJWTError as error:
        raise InvalidToken(f"{type(error).__name__}: {error}") from None
    # Time is checked here rather than by PyJWT so that ``now`` can be given (tests, replays).
    issued, expires = _number(claims, "iat"), _number(claims, "exp")
    if expires + LEEWAY_SECONDS < moment:
        raise InvalidToken("ExpiredSignatureError: the ticket has expired")
    if issued - LEEWAY_SECONDS > moment:
        raise InvalidToken("ImmatureSignatureError: the ticket was issued in the future")
    if expires - issued > MAX_TICKET_SECONDS:
        raise InvalidToken(f"the ticket claims to live {expires - issued:.0f} s, over the limit")
    subject, ticket_id = claims["sub"], claims["jti"]
    if not isinstance(subject, str) or not subject or not isinstance(ticket_id, str):
        raise InvalidToken("sub and jti must be non-empty strings")
    return Ticket(principal=subject, ticket_id=ticket_id, expires_at=expires)


def _number(claims: dict[str, object], name: str) -> float:
    value = claims[name]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidToken(f"{name} must be a number")
    return float(value)
