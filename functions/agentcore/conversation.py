"""One AgentCore Runtime session's conversation: its history, its turn counter, its active turn.

AgentCore gives each runtime session its own microVM, kept for the session's life (idle 900 s
by default, 8 h at most), so the session's state lives in this process's memory
(``MemoryConversation``): no table, no claim, no lease. The decisions are the WebSocket API's,
made by the same rules over that state (``functions.conversation.rules``): the rate limit, a
new ``ask``/``speak`` cancelling the running turn (barge-in), a cancel's ``heard_ms`` cutting an
ended turn's exchange, what the history keeps. What differs is around them: the turn runs as a
task here, and a barge-in waits for the turn it cut to end, so the new answer knows what the
listener heard of it.

Every coroutine here runs on one event loop (the app's worker loop: ``functions.agentcore.app``).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from functions.adapters.frame_sink import ClientGone, RelayError
from functions.adapters.relay import Relay
from functions.conversation import refusals, rules, turn_frames
from functions.conversation.heard import heard_of, remembered
from functions.conversation.history import SpokenExchange
from functions.conversation.state import DuplicateTurn, MemoryConversation
from functions.observability import logger
from functions.turn import TurnOutcome, TurnRunner, TurnSpec
from functions.turn.assembly import answering_agent, hand_back, session_of, turn_runner
from functions.wiring import Adapters
from voicewire.client_protocol import (
    AskAction,
    CancelAction,
    HistoryFrame,
    SpeakAction,
    Timings,
)
from voicewire.client_protocol import ClientError as ErrorFrame
from voicewire.error_codes import ErrorCode

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
    task: asyncio.Task[TurnOutcome] | None = None
    # Where its frames go (a /ws connection, an /invocations stream): when that client leaves,
    # this turn stops, not a turn another client of the same session started.
    client: object = None

    def stop(self, heard_ms: float | None = None) -> None:
        """Cancel the turn (in the conversation's state, with what the client said it heard
        of it, if it was still running there) and stop its task."""
        self.state.cancel_turn(self.turn_id, heard_ms)
        self.cancelled.set()


SCOPE: refusals.Scope = "session"  # a runtime session outlives one /ws connection
RelayFor = Callable[[int], Relay]  # the turn's number -> the relay its frames go through


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

    async def start(
        self,
        action: AskAction | SpeakAction,
        relay_for: RelayFor,
        tell: Callable[[Any], Any],
        client: object = None,
    ) -> ActiveTurn | None:
        """Start a turn (cancelling the active one: barge-in) and return it running; None if it
        was refused (``tell`` was given the error frame). ``client``: where its frames go."""
        accepted_at = time.time()
        turn_id, mode = refusals.turn_id_of(action), refusals.mode_of(action)
        limit = self.adapters.settings.max_turns_per_minute
        try:
            admission = rules.start_turn(
                self.state, turn_id, mode, action.heard_ms, limit=limit, now=accepted_at
            )
        except DuplicateTurn:
            await tell(refusals.duplicate_turn(turn_id, SCOPE))
            return None
        if admission.verdict == rules.Admission.OVER_LIMIT:
            await tell(refusals.too_many_turns(action, limit, SCOPE))
            return None
        started = admission.turn
        assert started is not None  # admitted
        replaced = self.active
        if replaced is not None:
            # Cancelled in the state by the rules (barge-in): stop its task, and let it keep
            # what was heard before this turn's agent reads the history.
            replaced.cancelled.set()
            await self._wait_for(replaced, REPLACED_TURN_WAIT_SECONDS)
            logger.info(
                "barge-in: previous turn cancelled",
                turn_id=replaced.turn_id,
                heard_ms=action.heard_ms,
            )
        turn = ActiveTurn(turn_id, started.turn, mode, asyncio.Event(), self.state, client=client)
        spec = TurnSpec(
            turn_id, turn.turn, mode, accepted_at, action.voice, action.speed, action.word_timings
        )
        self.active = turn
        turn.task = asyncio.create_task(
            self._run(turn, spec, action, relay_for(turn.turn)), name=f"turn-{turn_id}"
        )
        logger.info(
            "turn accepted", session_id=self.session_id, turn_id=turn_id, turn=turn.turn, mode=mode
        )
        return turn

    async def cancel(self, action: CancelAction, tell: Callable[[Any], Any]) -> None:
        outcome = rules.cancel(self.state, action.turn_id, action.heard_ms)
        match outcome.verdict:
            case rules.CancelVerdict.UNKNOWN_TURN:
                await tell(refusals.unknown_turn(action.turn_id, SCOPE))
            case rules.CancelVerdict.CANCELLED:
                if self.active is not None and self.active.turn_id == outcome.turn_id:
                    self.active.cancelled.set()
                logger.info(
                    "turn cancelled by the client",
                    turn_id=outcome.turn_id,
                    heard_ms=action.heard_ms,
                )
            case rules.CancelVerdict.CUT:
                logger.info("history cut to what was heard", heard_ms=action.heard_ms)

    def remembered(self) -> HistoryFrame:
        return HistoryFrame(messages=remembered(self.history))

    async def leave(self, client: object) -> None:
        """``client`` left: its turn stops (nothing more can reach it), the history stays for
        the session's next connection."""
        if self.active is not None and self.active.client is client:
            self.active.stop()
            await self._wait_for(self.active, REPLACED_TURN_WAIT_SECONDS)

    async def _wait_for(self, turn: ActiveTurn, seconds: float) -> None:
        if turn.task is not None:
            await asyncio.wait({turn.task}, timeout=seconds)

    async def _run(
        self, turn: ActiveTurn, spec: TurnSpec, action: AskAction | SpeakAction, relay: Relay
    ) -> TurnOutcome:
        """The turn from its speech session to its turn_end, as the Lambda worker runs it."""
        adapters = self.adapters
        acquiring = asyncio.create_task(adapters.speech_sessions.acquire())
        speech = asyncio.create_task(session_of(acquiring), name="speech-session-ready")
        outcome: TurnOutcome | None = None
        runner: TurnRunner | None = None
        try:
            agent = None
            if isinstance(action, AskAction):
                agent = answering_agent(adapters, list(self.history), action.prompt)
            text = action.text if isinstance(action, SpeakAction) else None
            runner = turn_runner(
                spec,
                relay,
                speech,
                turn.cancelled,
                adapters.settings,
                agent=agent,
                text=text,
                chunking=adapters.chunking,
            )
            outcome = await runner.run(tell_end=False)
        except Exception:  # the agent could not be built: the turn still ends, and says why
            logger.exception("the turn could not start", turn_id=turn.turn_id)
            outcome = TurnOutcome("failed", Timings(total_ms=_ms_since(spec.accepted_at)))
            outcome.error = ErrorFrame(
                code=ErrorCode.INTERNAL_ERROR,
                turn_id=turn.turn_id,
                message="the turn could not start",
            )
            await tell_unstarted(relay, spec, outcome)
        finally:
            ready = await hand_back(adapters.speech_sessions, acquiring, speech, outcome, runner)
        if isinstance(action, AskAction):
            self._keep(turn, action.prompt, outcome)
        self.state.end_turn(turn.turn_id, outcome.status)
        if self.active is turn:
            self.active = None
        if runner is not None:
            await runner.tell_end(outcome)
        await relay.close()
        logger.info(
            "turn ended",
            session_id=self.session_id,
            turn_id=turn.turn_id,
            status=outcome.status,
            timings=outcome.timings.model_dump(),
            heard_ms=self.state.heard_ms(turn.turn_id),
            speech_session=ready.origin if ready else None,
            audio_bytes=relay.audio_bytes,
            audio_frames=relay.audio_frames,
        )
        return outcome

    def _keep(self, turn: ActiveTurn, prompt: str, outcome: TurnOutcome) -> None:
        """The exchange in the history, as the worker keeps it (``rules.keep_exchange``)."""
        heard = None
        if outcome.status == "cancelled":
            given = self.state.heard_ms(turn.turn_id)
            heard = heard_of(given, outcome.audio_ms, outcome.heard_estimate_ms)
        spoken = SpokenExchange(turn.turn_id, turn.turn, 0, outcome.words)
        rules.keep_exchange(self.state, prompt, outcome, spoken, heard)


def _ms_since(at: float) -> float:
    return round((time.time() - at) * 1000, 1)


async def tell_unstarted(relay: Relay, spec: TurnSpec, outcome: TurnOutcome) -> None:
    """A turn that failed before its runner existed: its start, its error and its end."""
    frames = turn_frames.unspoken(spec, outcome.status, outcome.timings, outcome.error)
    try:
        for frame in frames:
            await relay.control(frame)
    except (ClientGone, RelayError) as error:
        logger.info("could not tell the client", reason=repr(error))


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
