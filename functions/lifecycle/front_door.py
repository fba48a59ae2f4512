"""A client's actions answered, and a turn admitted, for any front door.

A front door (the WebSocket API's message route, AgentCore's ``/ws`` and ``/invocations``)
hands each client message to ``answer``, which parses it and does what it asks over the door's
``ConversationState`` by the conversation's rules (``functions.conversation.rules``): an ``ask``
or ``speak`` is admitted (``start``: its ids, a duplicate, the rate window, barge-in), a
``cancel`` stops the running turn, ``voices`` and ``history`` are answered. Every refusal and
failure is an ``error`` frame from ``functions.failure_frames``, told through the door.

What a door supplies (``FrontDoor``) is only what differs between them: how a frame reaches its
client, how an admitted turn is set running (a Lambda worker invoked, or a task started) and
told to stop, and whether this door signs ``listen`` URLs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import BaseModel

from functions.conversation import refusals, rules, turn_frames
from functions.conversation.heard import remembered
from functions.conversation.state import (
    ConversationClosed,
    ConversationState,
    DuplicateTurn,
    StartedTurn,
)
from functions.failure_frames import failure_frame
from functions.observability import logger
from voicewire.client_protocol import (
    AskAction,
    CancelAction,
    HistoryAction,
    HistoryFrame,
    ListenAction,
    SpeakAction,
    VoiceList,
    VoicesAction,
    parse_action,
)
from voicewire.error_codes import ProtocolError
from voicewire.voice_catalog import OFFICIAL_VOICES

TurnAction = AskAction | SpeakAction


@dataclass(frozen=True)
class AdmittedTurn:
    """A turn the rules started: recorded running, the conversation's active turn."""

    action: TurnAction
    started: StartedTurn
    mode: str
    accepted_at: float  # epoch seconds, when its message arrived

    @property
    def turn_id(self) -> str:
        return self.started.turn_id

    @property
    def turn(self) -> int:
        return self.started.turn

    @property
    def replaced(self) -> str | None:
        """The turn it cancelled (barge-in), whose answer keeps what was heard first."""
        return self.started.replaced


class FrontDoor(Protocol):
    """What one client's front door supplies to the lifecycle."""

    scope: refusals.Scope  # what the client's words call the conversation
    state: ConversationState
    voices: frozenset[str] | None  # the voices this deployment speaks (None: the official ones)
    max_turns_per_minute: int

    async def offload[T](self, call: Callable[..., T], *args: Any) -> T:
        """Run a state call: in a thread for DynamoDB (boto3 blocks), inline for memory (one
        loop owns it, and each call is atomic on it)."""
        ...

    async def tell(self, frame: BaseModel) -> None:
        """Send a control frame to the client (best effort: a client that left is not told)."""
        ...

    async def launch(self, turn: AdmittedTurn) -> None:
        """Set the admitted turn running; raise if nothing could be started for it."""
        ...

    async def stop(self, turn_id: str) -> None:
        """A cancel stopped ``turn_id`` in the state: stop what runs it, if this door can."""
        ...

    async def listen(self, action: ListenAction) -> None:
        """Answer ``listen`` (a Transcribe URL, or the error that says why not)."""
        ...


async def answer(door: FrontDoor, body: str, accepted_at: float | None = None) -> None:
    """One client message: parsed, then done, refused or answered through ``door``."""
    accepted_at = time.time() if accepted_at is None else accepted_at
    try:
        action = parse_action(body, door.voices)
    except ProtocolError as error:
        await door.tell(failure_frame(error))
        return
    match action:
        case AskAction() | SpeakAction():
            await start(door, action, accepted_at)
        case CancelAction():
            await cancel(door, action)
        case VoicesAction():
            await door.tell(VoiceList.of(door.voices or frozenset(OFFICIAL_VOICES)))
        case HistoryAction():
            view = await door.offload(door.state.read)
            await door.tell(HistoryFrame(messages=remembered(view.history if view else [])))
        case ListenAction():
            await door.listen(action)


async def start(door: FrontDoor, action: TurnAction, accepted_at: float) -> AdmittedTurn | None:
    """Admit ``action``'s turn and launch it; None when it was refused or ended unstarted (the
    client was told, unless its conversation is gone)."""
    turn_id, mode = refusals.turn_id_of(action), refusals.mode_of(action)
    limit = door.max_turns_per_minute
    try:
        admission = await door.offload(
            rules.start_turn, door.state, turn_id, mode, action.heard_ms, limit, accepted_at
        )
    except DuplicateTurn:
        await door.tell(refusals.duplicate_turn(turn_id, door.scope))
        return None
    except ConversationClosed:
        logger.info("turn refused: conversation not open", turn_id=turn_id)
        return None
    except Exception as failure:
        # The state could not be written (DynamoDB throttled or unavailable past its retries):
        # a turn that is not recorded must not run, and the client hears why.
        logger.exception("the turn could not be recorded", turn_id=turn_id)
        await door.tell(failure_frame(failure, action.turn_id))
        return None
    if admission.verdict == rules.Admission.OVER_LIMIT:
        view = await door.offload(door.state.read)
        if view is None or not view.open:
            logger.info("turn refused: conversation not open", turn_id=turn_id)
        else:
            await door.tell(refusals.too_many_turns(action, limit, door.scope))
            logger.info("turn refused: turns per minute", turn_id=turn_id, limit=limit)
        return None
    assert admission.turn is not None  # started
    turn = AdmittedTurn(action, admission.turn, mode, accepted_at)
    named = turn_frames.TurnName(turn_id, turn.turn, mode)
    if admission.replaced is not None:
        logger.info(
            "barge-in: previous turn cancelled",
            turn_id=admission.replaced,
            heard_ms=action.heard_ms,
        )
    if turn.started.status != "running":
        # Cancelled while it was being recorded (a cancel, a newer turn, a disconnect at the
        # same time): nothing runs it, and the client hears that it ended.
        await _tell_all(door, turn_frames.unspoken(named, turn.started.status))
        logger.info("turn cancelled before it started", turn_id=turn_id)
        return None
    try:
        await door.launch(turn)
    except Exception as failure:
        # Nothing runs this turn, so it must not stay active; the client hears why, and the
        # conversation stays usable.
        logger.exception("the turn could not be launched", turn_id=turn_id)
        error = failure_frame(failure, turn_id)
        await door.offload(door.state.fail_turn, turn_id, error.code)
        await _tell_all(door, turn_frames.unspoken(named, "failed", error=error))
        return None
    logger.info("turn accepted", turn_id=turn_id, turn=turn.turn, mode=mode)
    return turn


async def cancel(door: FrontDoor, action: CancelAction) -> None:
    outcome = await door.offload(rules.cancel, door.state, action.turn_id, action.heard_ms)
    match outcome.verdict:
        case rules.CancelVerdict.CUT:
            logger.info("history cut to what was heard", heard_ms=action.heard_ms)
        case rules.CancelVerdict.UNKNOWN_TURN:
            await door.tell(refusals.unknown_turn(action.turn_id, door.scope))
        case rules.CancelVerdict.CANCELLED:
            assert outcome.turn_id is not None
            await door.stop(outcome.turn_id)
            logger.info(
                "turn cancelled by the client", turn_id=outcome.turn_id, heard_ms=action.heard_ms
            )


async def _tell_all(door: FrontDoor, frames: list) -> None:
    for frame in frames:
        await door.tell(frame)
