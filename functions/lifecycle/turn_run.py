"""A launched turn from its speech session to its ``turn_end``, for any host.

``TurnRun`` is what both hosts of a running turn (the Lambda worker, ``functions.worker.run``,
and the AgentCore app's task, ``functions.agentcore.conversation``) do with it, in this order:

1. ``speak``: build the ask's agent over the history, run the turn (``TurnRunner``) with the
   speech session being set up meanwhile, and give the session back (kept warm if clean). An
   agent that cannot be built fails the turn with ``failure_frames.TurnNotStarted``'s frame.
2. ``finish``: keep what the turn leaves (the exchange in the history, as heard when it was
   cut), *then* record its end (a barge-in's answer waits for that end to read the history),
   *then* tell the client its ``error`` and ``turn_end`` (a client may ask again the moment it
   hears the end, and must find the history kept and the turn ended). A cancel that came while
   it ended has the last word: the record says so, and the history is cut as the route would.

What a host supplies (``TurnHost``) is only what differs: where state calls run, the history
an ask reads (the worker read it during its claim), how the end is recorded (a conditional
write with the worker's claim, or the memory's), and its metrics.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from functions.adapters.relay import Relay
from functions.adapters.speech_sessions import ReadySession
from functions.conversation import rules, turn_frames
from functions.conversation.heard import Heard, heard_of
from functions.conversation.history import SpokenExchange
from functions.conversation.state import ConversationState
from functions.failure_frames import TurnNotStarted, failure_frame
from functions.observability import logger
from functions.turn import TurnOutcome, TurnRunner, TurnSpec
from functions.turn.assembly import answering_agent, hand_back, session_of, turn_runner
from functions.wiring import Adapters
from voicewire.client_protocol import ClientError, EndedStatus, Timings


@dataclass(frozen=True)
class TurnPlan:
    """What the turn is: named, with an ask's prompt or a speak's text."""

    spec: TurnSpec
    prompt: str | None = None  # an ask's; None for a speak
    text: str | None = None  # a speak's


class TurnHost(Protocol):
    adapters: Adapters
    state: ConversationState

    async def offload[T](self, call: Callable[..., T], *args: Any) -> T:
        """Run a state call: in a thread for DynamoDB, inline for memory (one loop owns it)."""
        ...

    async def history(self) -> list[dict[str, Any]]:
        """The history an ask's agent answers after."""
        ...

    async def record_end(self, outcome: TurnOutcome, relay: Relay) -> EndedStatus:
        """Record how the turn ended; the record's final status (a cancel has the last word)."""
        ...

    async def client_gone(self) -> None:
        """The turn found its client gone: note it where later turns will see it."""
        ...

    def count(self, metric: str) -> None:
        """Count a failure that leaves the turn told but something unkept."""
        ...

    def ended(self, final: EndedStatus, outcome: TurnOutcome, ready: ReadySession | None) -> None:
        """The turn is over and told (the host's metrics)."""
        ...


@dataclass
class TurnRun:
    plan: TurnPlan
    host: TurnHost
    relay: Relay
    outcome: TurnOutcome | None = None
    runner: TurnRunner | None = None
    ready: ReadySession | None = None

    async def speak(
        self,
        acquiring: asyncio.Task[ReadySession],
        stop: asyncio.Event,
        stop_failure: Callable[[], ClientError | None] = lambda: None,
    ) -> TurnOutcome:
        """Run the turn to its outcome (nothing told of its end yet); the speech session
        ``acquiring`` gives is handed back whatever happens."""
        plan, adapters = self.plan, self.host.adapters
        speech = asyncio.create_task(session_of(acquiring), name="speech-session-ready")
        try:
            try:
                agent = None
                if plan.prompt is not None:
                    agent = answering_agent(adapters, await self.host.history(), plan.prompt)
            except Exception as error:
                raise TurnNotStarted from error
            self.runner = turn_runner(
                plan.spec,
                self.relay,
                speech,
                stop,
                adapters.settings,
                agent=agent,
                text=plan.text,
                stop_failure=stop_failure,
                chunking=adapters.chunking,
            )
            self.outcome = await self.runner.run(tell_end=False)
        except TurnNotStarted as failure:
            logger.exception("the turn could not start", turn_id=plan.spec.turn_id)
            self.outcome = TurnOutcome("failed", _elapsed(plan.spec))
            self.outcome.error = failure_frame(failure, plan.spec.turn_id)
        finally:
            self.ready = await hand_back(
                adapters.speech_sessions, acquiring, speech, self.outcome, self.runner
            )
        return self.outcome

    async def finish(self) -> EndedStatus:
        """Keep, record, tell (see the module); the turn's final status."""
        outcome, host = self.outcome, self.host
        assert outcome is not None, "speak first"
        heard = await self._leave_behind(outcome)
        final = await host.record_end(outcome, self.relay)
        if final != outcome.status:  # cancelled while it ended: the record has the last word
            outcome.status = final
            if heard is None and final == "cancelled" and self.plan.prompt is not None:
                # The cancel came after the history was kept whole: cut it now.
                heard = await self._heard(outcome)
                await self._cut_late(heard)
        await self._tell_end(outcome)
        await self.relay.close()
        host.ended(final, outcome, self.ready)
        logger.info(
            "turn ended",
            turn_id=self.plan.spec.turn_id,
            status=final,
            error_code=outcome.error.code.value if outcome.error is not None else None,
            timings=outcome.timings.model_dump(),
            speech_session=self.ready.origin if self.ready else None,
            speech_session_ready_ms=self.ready.ready_ms if self.ready else None,
            # A cut turn: how much of it the history keeps, and whether the client said so or
            # the turn estimated it (time since its first audio frame, at most the audio sent).
            heard_ms=heard.ms if heard else None,
            heard_from=heard.source if heard else None,
            **relay_counts(self.relay),
        )
        return final

    async def _tell_end(self, outcome: TurnOutcome) -> None:
        if self.runner is not None:
            await self.runner.tell_end(outcome)
            return
        # It failed before its runner existed: nobody posted its turn_start.
        frames = turn_frames.unspoken(
            self.plan.spec, outcome.status, outcome.timings, outcome.error
        )
        try:
            for frame in frames:
                await self.relay.control(frame)
        except Exception as error:  # ClientGone, RelayError: the record still has it
            logger.info("could not tell the client", reason=repr(error))

    async def _heard(self, outcome: TurnOutcome) -> Heard:
        """What the client said it heard (with its cancel), else the turn's estimate; never more
        than the audio the turn sent (``heard_of``)."""
        given = await self.host.offload(self.host.state.heard_ms, self.plan.spec.turn_id)
        return heard_of(given, outcome.audio_ms, outcome.heard_estimate_ms)

    async def _leave_behind(self, outcome: TurnOutcome) -> Heard | None:
        """What a turn leaves for later: a client known gone, the exchange in the history
        (``rules.keep_exchange``: a complete answer with its tool calls and its words, a cut one
        as heard, a failed one only if it called tools). Returns what was heard of a turn cut
        short (None: not cut)."""
        heard: Heard | None = None
        spec, host = self.plan.spec, self.host
        try:
            if outcome.gone:
                await host.client_gone()
            if self.plan.prompt is None:  # a speak turn keeps no history
                return None
            if outcome.status == "cancelled":
                heard = await self._heard(outcome)
            spoken = SpokenExchange(spec.turn_id, spec.turn, 0, outcome.words)
            await host.offload(
                rules.keep_exchange, host.state, self.plan.prompt, outcome, spoken, heard
            )
        except Exception:  # the turn itself is over and told; the next one has less context
            logger.exception("the turn's history could not be kept")
            host.count("HistoryWritesFailed")
        return heard

    async def _cut_late(self, heard: Heard) -> None:
        try:
            await self.host.offload(
                rules.cut_heard, self.host.state, heard.ms, self.plan.spec.turn_id
            )
        except Exception:
            logger.exception("the turn's history could not be cut to what was heard")
            self.host.count("HistoryWritesFailed")


def relay_counts(relay: Relay) -> dict[str, int]:
    return {
        "audio_bytes": relay.audio_bytes,
        "audio_frames": relay.audio_frames,
        "frames": relay.frames,
        "bytes_sent": relay.bytes_sent,
    }


def _elapsed(spec: TurnSpec) -> Timings:
    return Timings(total_ms=round((time.time() - spec.accepted_at) * 1000, 1))
