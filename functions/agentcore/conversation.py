"""One AgentCore Runtime session's conversation: its history, its turn counter, its active turn.

AgentCore gives each runtime session its own microVM, kept for the session's life (idle 900 s
by default, 8 h at most), so the session's state lives in this process's memory: no table, no
claim, no lease. What API Gateway's path spreads over the message route, DynamoDB and the
worker happens here in one place, and in the same way:

- a new ``ask``/``speak`` while a turn runs cancels it (barge-in) and waits for it to end, so
  the new answer knows what the listener heard of the one it cut;
- a cancel with ``heard_ms`` after the turn ended (its audio still played there) cuts the
  history's last exchange to what was heard;
- the history is kept as the worker keeps it (``functions.turn_assembly.kept_messages``,
  bounded by ``functions.adapters.session_store``'s rules).

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

from functions.adapters.llm import closed
from functions.adapters.relay import ConnectionGone, Relay, RelayError
from functions.adapters.session_store import history_exchange, joined_history
from functions.heard_history import TurnWord, heard_messages, remembered
from functions.observability import logger
from functions.turn import TurnOutcome, TurnRunner, TurnSpec
from functions.turn_assembly import (
    answering_agent,
    hand_back,
    kept_messages,
    session_of,
    turn_runner,
)
from functions.wiring import Adapters
from voicewire.client_protocol import (
    AskAction,
    CancelAction,
    HistoryFrame,
    SpeakAction,
    Timings,
    TurnEnd,
    TurnStart,
)
from voicewire.client_protocol import ClientError as ErrorFrame
from voicewire.error_codes import ErrorCode

# A barge-in waits this long for the turn it cut to end (it stops within one frame's post and
# its speech request's cancel): past it the new turn goes on with the history as it is.
REPLACED_TURN_WAIT_SECONDS = 5.0
MAX_SESSIONS = 1_000  # in one process (locally; AgentCore gives each session its own microVM)


@dataclass
class ActiveTurn:
    turn_id: str
    turn: int
    mode: str
    cancelled: asyncio.Event
    task: asyncio.Task[TurnOutcome] | None = None
    heard_ms: float | None = None  # what the client said it heard, with its cancel
    # Where its frames go (a /ws connection, an /invocations stream): when that client leaves,
    # this turn stops, not a turn another client of the same session started.
    client: object = None

    def stop(self, heard_ms: float | None = None) -> None:
        """Cancel the turn; ``heard_ms``: what the client said it heard of it."""
        if not self.cancelled.is_set():
            self.heard_ms = heard_ms
        self.cancelled.set()


@dataclass
class LastSpoken:
    """The history's last exchange as the listener was sent it, for a cut that comes after the
    turn ended: its turn, how many messages it holds after its prompt, its words."""

    turn_id: str
    turn: int
    count: int
    words: list[TurnWord]
    cut: bool = False


RelayFor = Callable[[int], Relay]  # the turn's number -> the relay its frames go through


@dataclass
class Conversation:
    session_id: str
    adapters: Adapters
    history: list[dict[str, Any]] = field(default_factory=list)
    turn_counter: int = 0
    active: ActiveTurn | None = None
    last_spoken: LastSpoken | None = None
    _turn_ids: set[str] = field(default_factory=set)
    _turn_starts: list[float] = field(default_factory=list)  # monotonic, this last minute

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
        turn_id = action.turn_id or f"t-{uuid.uuid4().hex[:12]}"
        if turn_id in self._turn_ids:
            used = f"turn_id {turn_id!r} was already used in this session"
            await tell(ErrorFrame(code=ErrorCode.INVALID_FIELD, turn_id=turn_id, message=used))
            return None
        if not self._admit():
            limit = self.adapters.settings.max_turns_per_minute
            await tell(ErrorFrame(code=ErrorCode.TOO_MANY_TURNS, turn_id=action.turn_id,
                                  message=f"this session started {limit} turns this minute, its "
                                  "limit; wait a little"))  # fmt: skip
            return None
        self._turn_ids.add(turn_id)
        replaced = self.active
        if replaced is not None:
            await self._stop(replaced, action.heard_ms, REPLACED_TURN_WAIT_SECONDS)
            logger.info("barge-in: previous turn cancelled", turn_id=replaced.turn_id,
                        heard_ms=action.heard_ms)  # fmt: skip
        elif action.heard_ms is not None:
            self.cut_to_heard(action.heard_ms, turn=self.turn_counter)
        self.turn_counter += 1
        mode = action.mode if isinstance(action, AskAction) else "speak"
        turn = ActiveTurn(turn_id, self.turn_counter, mode, asyncio.Event(), client=client)
        spec = TurnSpec(turn_id, turn.turn, mode, accepted_at, action.voice, action.speed,
                        action.word_timings)  # fmt: skip
        self.active = turn
        turn.task = asyncio.create_task(
            self._run(turn, spec, action, relay_for(turn.turn)), name=f"turn-{turn_id}"
        )
        logger.info("turn accepted", session_id=self.session_id, turn_id=turn_id,
                    turn=turn.turn, mode=mode)  # fmt: skip
        return turn

    async def cancel(self, action: CancelAction, tell: Callable[[Any], Any]) -> None:
        active = self.active
        if active is None and action.heard_ms is not None:
            turn = None if action.turn_id is not None else self.turn_counter
            if self.cut_to_heard(action.heard_ms, action.turn_id, turn):
                return
        if active is None or (action.turn_id is not None and action.turn_id != active.turn_id):
            named = f"turn {action.turn_id!r}" if action.turn_id else "a turn"
            await tell(ErrorFrame(code=ErrorCode.UNKNOWN_TURN, turn_id=action.turn_id,
                                  message=f"{named} is not running in this session"))  # fmt: skip
            return
        await self._stop(active, action.heard_ms, wait_seconds=None)
        logger.info("turn cancelled by the client", turn_id=active.turn_id,
                    heard_ms=action.heard_ms)  # fmt: skip

    def remembered(self) -> HistoryFrame:
        return HistoryFrame(messages=remembered(self.history))

    async def leave(self, client: object) -> None:
        """``client`` left: its turn stops (nothing more can reach it), the history stays for
        the session's next connection."""
        if self.active is not None and self.active.client is client:
            await self._stop(self.active, None, REPLACED_TURN_WAIT_SECONDS)

    async def _stop(
        self, turn: ActiveTurn, heard_ms: float | None, wait_seconds: float | None
    ) -> None:
        turn.stop(heard_ms)
        if wait_seconds is not None and turn.task is not None:
            await asyncio.wait({turn.task}, timeout=wait_seconds)

    def _admit(self) -> bool:
        now = time.monotonic()
        self._turn_starts = [at for at in self._turn_starts if now - at < 60]
        if len(self._turn_starts) >= self.adapters.settings.max_turns_per_minute:
            return False
        self._turn_starts.append(now)
        return True

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
            runner = turn_runner(spec, relay, speech, turn.cancelled, adapters.settings,
                                 agent=agent, text=text)  # fmt: skip
            outcome = await runner.run(tell_end=False)
        except Exception:  # the agent could not be built: the turn still ends, and says why
            logger.exception("the turn could not start", turn_id=turn.turn_id)
            outcome = TurnOutcome("failed", Timings(total_ms=_ms_since(spec.accepted_at)))
            outcome.error = ErrorFrame(code=ErrorCode.INTERNAL_ERROR, turn_id=turn.turn_id,
                                       message="the turn could not start")  # fmt: skip
            await tell_unstarted(relay, spec, outcome)
        finally:
            ready = await hand_back(adapters.speech_sessions, acquiring, speech, outcome, runner)
        if isinstance(action, AskAction):
            self._keep(turn, action.prompt, outcome)
        if self.active is turn:
            self.active = None
        if runner is not None:
            await runner.tell_end(outcome)
        await relay.close()
        logger.info(
            "turn ended", session_id=self.session_id, turn_id=turn.turn_id, status=outcome.status,
            timings=outcome.timings.model_dump(), heard_ms=turn.heard_ms,
            speech_session=ready.origin if ready else None,
            audio_bytes=relay.audio_bytes, audio_frames=relay.audio_frames,
        )  # fmt: skip
        return outcome

    def _keep(self, turn: ActiveTurn, prompt: str, outcome: TurnOutcome) -> None:
        heard_ms = None
        if outcome.status == "cancelled":
            given = turn.heard_ms
            heard_ms = (
                min(given, outcome.audio_ms) if given is not None else outcome.heard_estimate_ms
            )
        messages = kept_messages(outcome, heard_ms)
        if messages is None:
            return
        exchange = history_exchange(prompt, outcome.answer, messages)
        self.history = joined_history(self.history, exchange)
        count = len(closed(exchange)) - 1  # the exchange's messages after its prompt
        self.last_spoken = LastSpoken(turn.turn_id, turn.turn, count, outcome.words,
                                      cut=heard_ms is not None)  # fmt: skip

    def cut_to_heard(
        self, heard_ms: float, turn_id: str | None = None, turn: int | None = None
    ) -> bool:
        """Cut the history's last exchange to the words heard in its first ``heard_ms`` of
        audio, if it is the turn named and was not cut before. True if it is that turn's."""
        spoken = self.last_spoken
        if spoken is None or spoken.cut:
            return False
        if (turn_id is not None and spoken.turn_id != turn_id) or (
            turn is not None and spoken.turn != turn
        ):
            return False
        spoken.cut = True
        if all(word.filler or word.end_ms <= heard_ms for word in spoken.words):
            return True  # heard to its end: nothing to cut
        count = spoken.count
        if count and len(self.history) > count:
            kept, messages = self.history[:-count], self.history[-count:]
            self.history = [*kept, *heard_messages(messages, spoken.words, heard_ms)]
        logger.info("history cut to what was heard", heard_ms=heard_ms)
        return True


def _ms_since(at: float) -> float:
    return round((time.time() - at) * 1000, 1)


async def tell_unstarted(relay: Relay, spec: TurnSpec, outcome: TurnOutcome) -> None:
    """A turn that failed before its runner existed: its start, its error and its end."""
    frames = [
        TurnStart(turn_id=spec.turn_id, turn=spec.turn, mode=spec.mode),  # type: ignore[arg-type]
        outcome.error,
        TurnEnd(turn_id=spec.turn_id, status=outcome.status, timings=outcome.timings,
                audio_bytes=0, audio_frames=0),
    ]  # fmt: skip
    try:
        for frame in frames:
            await relay.control(frame)
    except (ConnectionGone, RelayError) as error:
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
