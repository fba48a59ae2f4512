"""Where a conversation's state lives, behind one small interface the rules use.

A conversation is a connection to the WebSocket API (its state in DynamoDB, shared by the
message route and the worker: ``functions.adapters.conversation_table``) or an AgentCore Runtime
session (its state in the microVM's memory: ``MemoryConversation`` here). The rules
(``functions.conversation.rules``) read and change it only through ``ConversationState``, and
``tests/unit/test_conversation_state.py`` runs the same contract against both implementations.

Each operation is atomic where it must be: admitting a turn (the rate window), starting one
(numbering it, making it the active one), cancelling one (only while it runs), and changing the
history (a read-modify-write that loses no concurrent change).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

from functions.conversation.history import SpokenExchange, bounded_history
from functions.conversation.rate_window import RateWindow, admitted
from functions.conversation.turn_transitions import TurnChange, may
from voicewire.client_protocol import EndedStatus, TurnStatus

# A history change: the history and its last spoken exchange in, the new ones out (None: no
# change). Applied by the state with its own concurrency control, so it may run more than once.
HistoryChange = Callable[
    [list[dict[str, Any]], SpokenExchange | None],
    tuple[list[dict[str, Any]], SpokenExchange | None] | None,
]


class ConversationClosed(Exception):
    """The conversation is unknown or gone: no turn can start in it."""


class DuplicateTurn(Exception):
    """The client reused a ``turn_id`` in this conversation."""


@dataclass(frozen=True)
class ConversationView:
    """The conversation as the rules read it."""

    open: bool
    active_turn_id: str | None
    turn_counter: int  # turns started so far; the newest one's number
    history: list[dict[str, Any]]
    last_spoken: SpokenExchange | None


@dataclass(frozen=True)
class StartedTurn:
    turn_id: str
    turn: int  # its number in the conversation, from 1
    status: TurnStatus  # running, or cancelled when something cancelled it while it started
    replaced: str | None  # the turn that was active when it started (barge-in), if any
    # The connection's audio delivery, where the state records one (the WebSocket API's
    # connection record: ``?audio=base64``); None for a conversation without one.
    audio: str | None = None


class ConversationState(Protocol):
    def read(self) -> ConversationView | None:
        """The conversation now; None when it is gone."""
        ...

    def admit_turn(self, limit: int, now: float) -> bool:
        """Count one more turn in ``now``'s rate window (``rate_window``); False when ``limit``
        turns already started in it (a gone conversation is refused by ``start_turn``)."""
        ...

    def admit_listen(self, limit: int, now: float) -> bool:
        """Count one more ``listen`` (a Transcribe URL minted) in ``now``'s rate window; False
        when ``limit`` were already minted in it, or the conversation is gone."""
        ...

    def start_turn(self, turn_id: str, mode: str, now: float) -> StartedTurn:
        """Number a new turn and make it the active one. Raises ``DuplicateTurn`` for a
        ``turn_id`` used before, ``ConversationClosed`` when the conversation is gone."""
        ...

    def cancel_turn(self, turn_id: str, heard_ms: float | None) -> bool:
        """Cancel a turn still starting or running, noting what the client heard of it; False
        if it had ended."""
        ...

    def heard_ms(self, turn_id: str) -> float | None:
        """What the client said it heard of a turn, with its cancel."""
        ...

    def fail_turn(self, turn_id: str, error_code: str) -> bool:
        """End a turn that will not run (nothing could be started for it) as ``failed``, with
        the code the client was told; False if it had ended. It stops being the active turn."""
        ...

    def change_history(self, change: HistoryChange) -> bool:
        """Apply ``change`` to the history and its last spoken exchange; the new history is
        bounded (``history.bounded_history``). False when nothing was written (``change``
        returned None, or the conversation is gone)."""
        ...


@dataclass
class _MemoryTurn:
    mode: str
    status: TurnStatus
    heard_ms: float | None = None


@dataclass
class MemoryConversation:
    """A conversation kept in this process's memory: an AgentCore Runtime session's, whose
    microVM lives as long as the session. One event loop uses it, so each call is atomic."""

    active_turn_id: str | None = None
    turn_counter: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)
    last_spoken: SpokenExchange | None = None
    rate: RateWindow | None = None
    listens: RateWindow | None = None  # the listen actions' window (``admit_listen``)
    closed: bool = False
    _turns: dict[str, _MemoryTurn] = field(default_factory=dict)

    def read(self) -> ConversationView | None:
        if self.closed:
            return None
        return ConversationView(
            open=True,
            active_turn_id=self.active_turn_id,
            turn_counter=self.turn_counter,
            history=list(self.history),
            last_spoken=self.last_spoken,
        )

    def admit_turn(self, limit: int, now: float) -> bool:
        after = admitted(self.rate, now, limit)
        if after is None:
            return False
        self.rate = after
        return True

    def admit_listen(self, limit: int, now: float) -> bool:
        after = None if self.closed else admitted(self.listens, now, limit)
        if after is None:
            return False
        self.listens = after
        return True

    def start_turn(self, turn_id: str, mode: str, now: float) -> StartedTurn:
        if turn_id in self._turns:
            raise DuplicateTurn(turn_id)
        if self.closed:
            raise ConversationClosed(turn_id)
        replaced = self.active_turn_id
        self.turn_counter += 1
        self._turns[turn_id] = _MemoryTurn(mode, "running")
        self.active_turn_id = turn_id
        return StartedTurn(turn_id, self.turn_counter, "running", replaced)

    def cancel_turn(self, turn_id: str, heard_ms: float | None) -> bool:
        turn = self._turns.get(turn_id)
        if turn is None or not may(TurnChange.CANCEL, turn.status):
            return False
        turn.status, turn.heard_ms = "cancelled", heard_ms
        return True

    def heard_ms(self, turn_id: str) -> float | None:
        turn = self._turns.get(turn_id)
        return turn.heard_ms if turn is not None else None

    def fail_turn(self, turn_id: str, error_code: str) -> bool:
        turn = self._turns.get(turn_id)
        if turn is None or not may(TurnChange.FAIL, turn.status):
            return False
        turn.status = "failed"
        if self.active_turn_id == turn_id:
            self.active_turn_id = None
        return True

    def end_turn(self, turn_id: str, status: EndedStatus) -> EndedStatus:
        """Record how a turn ended; one cancelled meanwhile stays cancelled (returned)."""
        turn = self._turns[turn_id]
        if not may(TurnChange.FINISH, turn.status):  # ended meanwhile: that end stands
            status = cast(EndedStatus, turn.status)
        turn.status = status
        if self.active_turn_id == turn_id:
            self.active_turn_id = None
        return status

    def change_history(self, change: HistoryChange) -> bool:
        if self.closed:
            return False
        changed = change(list(self.history), self.last_spoken)
        if changed is None:
            return False
        history, self.last_spoken = changed
        self.history = bounded_history(history)
        return True
