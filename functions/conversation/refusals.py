"""What the client is told when the conversation's rules refuse an action, in one place for
both front doors: a turn id used before, the rate limit, a cancel of no turn. Codes and words
are the same on the WebSocket API (a "connection") and on AgentCore (a "session"); only the
noun differs. ``docs/protocol.md`` lists the codes.
"""

from __future__ import annotations

import uuid
from typing import Literal

from voicewire.client_protocol import AskAction, ClientError, SpeakAction
from voicewire.error_codes import ErrorCode

# What a conversation is called where the client is: API Gateway's connection, or AgentCore's
# runtime session (which outlives one /ws connection).
Scope = Literal["connection", "session"]
_WHERE: dict[Scope, str] = {"connection": "on this connection", "session": "in this session"}


def turn_id_of(action: AskAction | SpeakAction) -> str:
    """The client's ``turn_id``, or a new one when it gave none."""
    return action.turn_id or f"t-{uuid.uuid4().hex[:12]}"


def mode_of(action: AskAction | SpeakAction) -> str:
    return action.mode if isinstance(action, AskAction) else "speak"


def duplicate_turn(turn_id: str, scope: Scope) -> ClientError:
    return ClientError(
        code=ErrorCode.INVALID_FIELD,
        turn_id=turn_id,
        message=f"turn_id {turn_id!r} was already used {_WHERE[scope]}",
    )


def too_many_turns(action: AskAction | SpeakAction, limit: int, scope: Scope) -> ClientError:
    return ClientError(
        code=ErrorCode.TOO_MANY_TURNS,
        turn_id=action.turn_id,
        message=f"this {scope} started {limit} turns this minute, its limit; wait a little",
    )


def unknown_turn(turn_id: str | None, scope: Scope) -> ClientError:
    named = f"turn {turn_id!r}" if turn_id else "a turn"
    return ClientError(
        code=ErrorCode.UNKNOWN_TURN,
        turn_id=turn_id,
        message=f"{named} is not running {_WHERE[scope]}",
    )
