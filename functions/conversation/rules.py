"""The conversation's rules, once: starting a turn (the rate limit, barge-in), cancelling one,
and what the history keeps of a turn and of what the listener heard.

Both front doors call these over their own ``ConversationState``: the WebSocket API's message
route and worker over DynamoDB, the AgentCore app over memory. What happens around them differs
(a worker invoked, or a task started; a claim and a lease, or none), the decisions do not:

- **a turn starts** if the rate window admits it, with a ``turn_id`` not used before in the
  conversation; it becomes the active turn, and the turn active before it is cancelled with
  the ``heard_ms`` the client sent (barge-in). With no turn running, that ``heard_ms`` is about
  the turn before, which ended while its audio still played at the client: the history's last
  exchange is cut to it before the new turn reads the history;
- **a cancel** stops the active turn (the one named, if named), noting ``heard_ms``; with no turn
  running, its ``heard_ms`` cuts the last exchange as above; a turn that is neither running nor
  the last exchange is unknown;
- **what was heard** of a cut turn is what the client said, never more than the audio sent, else
  the turn's own estimate (``heard.heard_of``);
- **the history keeps** an ask's exchange as heard (``history.with_exchange``), and a cut comes
  at most once per exchange.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum

from functions.conversation.heard import Heard
from functions.conversation.history import SpokenAnswer, SpokenExchange, cut_to_heard, with_exchange
from functions.conversation.state import ConversationState, StartedTurn


class Admission(StrEnum):
    STARTED = "started"
    OVER_LIMIT = "over_limit"  # the rate window is full


@dataclass(frozen=True)
class TurnAdmission:
    verdict: Admission
    turn: StartedTurn | None = None  # when started
    # The turn this one cancelled (barge-in): its answer keeps what was heard before this one
    # reads the history. None when no running turn was cancelled.
    replaced: str | None = None


def start_turn(
    state: ConversationState,
    turn_id: str,
    mode: str,
    heard_ms: float | None,
    limit: int,
    now: float,
) -> TurnAdmission:
    """Admit and start a turn (see the module). Raises the state's ``DuplicateTurn`` and
    ``ConversationClosed``."""
    if not state.admit_turn(limit, now):
        return TurnAdmission(Admission.OVER_LIMIT)
    started = state.start_turn(turn_id, mode, now)
    replaced = started.replaced
    if replaced is None or not state.cancel_turn(replaced, heard_ms):
        replaced = None  # nothing cancelled: no answer will keep a history to wait for
        if heard_ms is not None:
            # The turn before ended here but still played there.
            cut_heard(state, heard_ms, turn=started.turn - 1)
    return TurnAdmission(Admission.STARTED, started, replaced)


class CancelVerdict(StrEnum):
    CANCELLED = "cancelled"  # the active turn was cancelled
    CUT = "cut"  # no turn ran; the last exchange was cut to what was heard (or heard whole)
    UNKNOWN_TURN = "unknown_turn"  # no such turn is running


@dataclass(frozen=True)
class CancelOutcome:
    verdict: CancelVerdict
    turn_id: str | None = None  # the turn cancelled


def cancel(state: ConversationState, turn_id: str | None, heard_ms: float | None) -> CancelOutcome:
    """A client's cancel (see the module); ``turn_id`` None: whichever turn runs."""
    view = state.read()
    active = view.active_turn_id if view is not None else None
    if view is not None and active is None and heard_ms is not None:
        # The turn ended here while its audio still played there (bidi's audio arrives faster
        # than it plays): the cancel still says how much was heard, and the history keeps that.
        turn = None if turn_id is not None else view.turn_counter
        if cut_heard(state, heard_ms, turn_id, turn):
            return CancelOutcome(CancelVerdict.CUT)
    if active is None or (turn_id is not None and turn_id != active):
        return CancelOutcome(CancelVerdict.UNKNOWN_TURN)
    state.cancel_turn(active, heard_ms)
    return CancelOutcome(CancelVerdict.CANCELLED, active)


def cut_heard(
    state: ConversationState,
    heard_ms: float,
    turn_id: str | None = None,
    turn: int | None = None,
) -> bool:
    """Cut the history's last exchange to the words heard in its first ``heard_ms`` of audio, if
    it is the turn named (by ``turn_id`` or its number ``turn``) and was not cut before. True if
    the turn is that exchange's: cut now, or heard to its end (then only marked, so a later
    ``heard_ms`` cuts nothing either)."""
    view = state.read()
    spoken = view.last_spoken if view is not None else None
    if spoken is None or spoken.cut or not spoken.names(turn_id, turn):
        return False

    def change(
        history: list[dict], latest: SpokenExchange | None
    ) -> tuple[list[dict], SpokenExchange] | None:
        if latest is None or latest.turn_id != spoken.turn_id or latest.cut:
            return None  # a newer exchange, or another cut, came first
        cut = cut_to_heard(history, latest, heard_ms)
        return (history if cut is None else cut), replace(latest, cut=True)

    state.change_history(change)
    return True


def keep_exchange(
    state: ConversationState,
    prompt: str,
    outcome: SpokenAnswer,
    spoken: SpokenExchange,
    heard: Heard | None,
) -> bool:
    """Keep an ask's exchange in the history, as heard when it was cut (``heard``); False when
    the turn leaves nothing to keep or the conversation is gone."""
    heard_ms = heard.ms if heard is not None else None
    return state.change_history(
        lambda history, _: with_exchange(history, prompt, outcome, spoken, heard_ms)
    )
