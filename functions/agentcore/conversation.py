"""One AgentCore Runtime session's conversation, the turn lifecycle's host on AgentCore's side.

AgentCore gives each runtime session its own microVM, kept for the session's life (idle 900 s
by default, 8 h at most), so the session's state lives in this process's memory
(``MemoryConversation``): no table, no claim, no lease. Every decision and every step of a turn
is the lifecycle's (``functions.lifecycle``), the same as the WebSocket API's; what this module
supplies is what differs: a client's front door (``SessionDoor``: its frames, its relays, the
listen signer), a turn run as a task (``Conversation.launch``: a barge-in waits for the turn it
cut to end, so the new answer knows what the listener heard of it), and the run's host
(``SessionHost``: state calls inline, the end recorded in memory).

Every coroutine here runs on one event loop (the app's worker loop: ``functions.agentcore.app``).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from functions.access.listen_answer import answer_listen
from functions.access.listen_signer import current_listen_signer
from functions.adapters.relay import Relay
from functions.adapters.speech_sessions import ReadySession
from functions.conversation import refusals
from functions.conversation.history import SpokenExchange
from functions.conversation.state import MemoryConversation
from functions.lifecycle.front_door import AdmittedTurn
from functions.lifecycle.turn_run import TurnPlan, TurnRun
from functions.observability import logger
from functions.turn import TurnOutcome, TurnSpec
from functions.wiring import Adapters
from voicewire.client_protocol import (
    AskAction,
    EndedStatus,
    ListenAction,
    SpeakAction,
)

# A barge-in waits this long for the turn it cut to end (it stops within one frame's post and
# its speech request's cancel): past it the new turn goes on with the history as it is.
REPLACED_TURN_WAIT_SECONDS = 5.0
MAX_SESSIONS = 1_000  # in one process (locally; AgentCore gives each session its own microVM)


@dataclass
class ActiveTurn:
    """The turn running as a task: what stops it."""

    turn_id: str
    turn: int
    mode: str
    cancelled: asyncio.Event
    state: MemoryConversation
    task: asyncio.Task[EndedStatus] | None = None
    # Where its frames go (a /ws connection, an /invocations stream): when that client leaves,
    # this turn stops, not a turn another client of the same session started.
    client: object = None

    def stop(self, heard_ms: float | None = None) -> None:
        """Cancel the turn (in the conversation's state, with what the client said it heard
        of it, if it was still running there) and stop its task."""
        self.state.cancel_turn(self.turn_id, heard_ms)
        self.cancelled.set()


RelayFor = Callable[[AdmittedTurn], Relay]  # the relay a turn's frames go through
Tell = Callable[[BaseModel], Awaitable[None]]


@dataclass
class Conversation:
    session_id: str
    adapters: Adapters
    state: MemoryConversation = field(default_factory=MemoryConversation)
    active: ActiveTurn | None = None

    @property
    def history(self) -> list[dict[str, Any]]:
        return self.state.history

    @property
    def last_spoken(self) -> SpokenExchange | None:
        return self.state.last_spoken

    def door(
        self,
        tell: Tell,
        relay_for: RelayFor,
        client: object,
        on_launch: Callable[[ActiveTurn], None] = lambda _: None,
    ) -> SessionDoor:
        """The lifecycle's front door for one client of this session (a ``/ws`` connection, an
        ``/invocations`` stream): its frames go through ``tell`` and its turns' relays."""
        return SessionDoor(self, tell, relay_for, client, on_launch)

    async def launch(self, admitted: AdmittedTurn, relay: Relay, client: object) -> ActiveTurn:
        """Run the admitted turn as a task; a turn it replaced (barge-in, already cancelled in
        the state by the rules) is stopped and waited for first, so that it keeps what was
        heard before this turn's agent reads the history."""
        replaced = self.active
        if replaced is not None:
            replaced.cancelled.set()
            await self._wait_for(replaced, REPLACED_TURN_WAIT_SECONDS)
        turn = ActiveTurn(
            admitted.turn_id, admitted.turn, admitted.mode, asyncio.Event(), self.state, client
        )
        action = admitted.action
        spec = TurnSpec(
            turn.turn_id,
            turn.turn,
            turn.mode,
            admitted.accepted_at,
            action.voice,
            action.speed,
            action.word_timings,
        )
        plan = TurnPlan(
            spec,
            prompt=action.prompt if isinstance(action, AskAction) else None,
            text=action.text if isinstance(action, SpeakAction) else None,
        )
        self.active = turn
        turn.task = asyncio.create_task(self._run(turn, plan, relay), name=f"turn-{turn.turn_id}")
        return turn

    def stop(self, turn_id: str) -> None:
        if self.active is not None and self.active.turn_id == turn_id:
            self.active.cancelled.set()

    async def leave(self, client: object) -> None:
        """``client`` left: its turn stops (nothing more can reach it), the history stays for
        the session's next connection."""
        if self.active is not None and self.active.client is client:
            self.active.stop()
            await self._wait_for(self.active, REPLACED_TURN_WAIT_SECONDS)

    async def _wait_for(self, turn: ActiveTurn, seconds: float) -> None:
        if turn.task is not None:
            await asyncio.wait({turn.task}, timeout=seconds)

    async def _run(self, turn: ActiveTurn, plan: TurnPlan, relay: Relay) -> EndedStatus:
        """The turn from its speech session to its turn_end, by the lifecycle, as the Lambda
        worker runs it."""
        run = TurnRun(plan, SessionHost(self, turn), relay)
        acquiring = asyncio.create_task(self.adapters.speech_sessions.acquire())
        await run.speak(acquiring, turn.cancelled)
        return await run.finish()


@dataclass
class SessionDoor:
    """One client of a runtime session, as the lifecycle's ``FrontDoor``."""

    conversation: Conversation
    tell_client: Tell
    relay_for: RelayFor
    client: object
    on_launch: Callable[[ActiveTurn], None]
    scope: refusals.Scope = "session"  # a runtime session outlives one /ws connection
    launched: ActiveTurn | None = None

    @property
    def state(self) -> MemoryConversation:
        return self.conversation.state

    @property
    def voices(self) -> frozenset[str] | None:
        return self.conversation.adapters.settings.voices

    @property
    def max_turns_per_minute(self) -> int:
        return self.conversation.adapters.settings.max_turns_per_minute

    async def offload[T](self, call: Callable[..., T], *args: Any) -> T:
        return call(*args)  # inline: the memory belongs to this loop, each call is atomic

    async def tell(self, frame: BaseModel) -> None:
        await self.tell_client(frame)

    async def launch(self, turn: AdmittedTurn) -> None:
        relay = self.relay_for(turn)
        self.launched = await self.conversation.launch(turn, relay, self.client)
        self.on_launch(self.launched)

    async def stop(self, turn_id: str) -> None:
        self.conversation.stop(turn_id)

    async def listen(self, action: ListenAction) -> None:
        # In a thread: on AWS the signer may first assume its role (STS). Every failure is an
        # error frame (functions.access.listen_answer): the conversation stays open.
        signer, state = current_listen_signer(), self.state
        await self.tell(await asyncio.to_thread(answer_listen, action, signer, state, time.time()))


@dataclass
class SessionHost:
    """A session's turn task as the lifecycle's ``TurnHost``: state in memory, on one loop."""

    conversation: Conversation
    turn: ActiveTurn

    @property
    def adapters(self) -> Adapters:
        return self.conversation.adapters

    @property
    def state(self) -> MemoryConversation:
        return self.conversation.state

    async def offload[T](self, call: Callable[..., T], *args: Any) -> T:
        return call(*args)  # inline: the memory belongs to this loop, each call is atomic

    async def history(self) -> list[dict[str, Any]]:
        return list(self.conversation.history)

    async def record_end(self, outcome: TurnOutcome, relay: Relay) -> EndedStatus:
        final = self.state.end_turn(self.turn.turn_id, outcome.status)
        if self.conversation.active is self.turn:
            self.conversation.active = None
        return final

    async def client_gone(self) -> None:
        """Nothing to note: the session's next client is a new connection."""

    def count(self, metric: str) -> None:
        logger.warning("turn failure counted", metric=metric)

    def ended(self, final: EndedStatus, outcome: TurnOutcome, ready: ReadySession | None) -> None:
        """No metrics of its own: AgentCore Runtime's observability has the session's."""


class Conversations:
    """The conversations of this process, by runtime session id (the newest ``MAX_SESSIONS``)."""

    def __init__(self, adapters: Callable[[], Adapters]) -> None:
        self._adapters = adapters
        self._by_session: OrderedDict[str, Conversation] = OrderedDict()

    def of(self, session_id: str | None) -> Conversation:
        """The session's conversation; a new one for a new id, or for none (a call without
        AgentCore's session header: locally, curl)."""
        session_id = session_id or f"local-{uuid.uuid4().hex}"
        conversation = self._by_session.get(session_id)
        if conversation is None:
            conversation = Conversation(session_id, self._adapters())
            self._by_session[session_id] = conversation
            while len(self._by_session) > MAX_SESSIONS:
                self._by_session.popitem(last=False)
        self._by_session.move_to_end(session_id)
        return conversation
