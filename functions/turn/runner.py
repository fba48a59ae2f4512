"""One turn of the conversation: pure logic over adapters (LLM, speech session, relay).

``TurnRunner.run`` runs one turn in its mode. **bidi** is the product (``_answer_events``): two
concurrent tasks feed one queue, consumed in true arrival order, so the first sentence's audio
reaches the client while the LLM is still writing::

    text task:   LLM deltas -> relay's text lane (coalesced text_delta frames)
                            -> chunker -> sentence events + speech.send()
    audio task:  speech events of each sent sentence, in order -> audio events
    consumer:    queue -> relay's ordered lane (sentence frames, binary audio frames)

Text deltas go on the relay's own lane (``functions.adapters.relay``), coalesced to at most one
post per ~100 ms (or one per sentence when the client asked for ``text_deltas: "sentence"``), so
that no audio frame waits behind a text post: on AWS each post is a signed HTTPS round trip.

**batch** (the same ``_answer_events``, with the whole answer as one chunk) waits for the whole
answer, then synthesizes it in one message: the fair baseline, same LLM stream and engine, only
the moment synthesis starts differs. **speak** (``_speak_events``) synthesizes a given text.

The speech session is handed over still opening (a future): the worker asks for it when the turn
starts, so its set-up overlaps the LLM's first tokens; the turn waits for it only at its first
sentence, and fails at once (``speech_failed``) if it cannot be opened, if it fails or closes
mid-turn, or if a sentence's next speech event does not come within ``speech_timeout`` (a
stalled server).

Cancellation (the cancel route, a new turn, a disconnect) arrives as ``cancelled`` being set. The
consumer checks it before every post, so at most the frame being posted leaves after it; then the
LLM stream and the speech requests are stopped and ``turn_end`` is the last frame of the turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from functions.adapters.frame_sink import ClientGone, RelayError
from functions.adapters.llm_errors import LlmError
from functions.adapters.relay import Relay
from functions.agent.events import (
    AgentEvent,
    AgentText,
    AgentTurn,
    ToolCallEnded,
    ToolCallOpened,
    ToolCallStarted,
    ToolsStillRunning,
    with_still_running,
)
from functions.conversation import turn_frames
from functions.conversation.heard import TurnWord, estimated_heard_ms
from functions.failure_frames import SpeechLimitReached, failure_frame
from functions.turn.arrival import AudioOut, Item, in_arrival_order
from functions.turn.audio_reader import SpokenRequest, TurnAudio, samples_ms
from functions.turn.chunking import VOICEWIRE_CHUNKING, Chunking, WholeAnswer, cut_early
from functions.turn.clock import TurnClock
from functions.turn.filler_phrases import filler_for
from functions.turn.fillers import ToolFillers, ToolRound
from voicewire.chunker import Chunker
from voicewire.client_protocol import (
    AudioFormat,
    ClientError,
    EndedStatus,
    Sentence,
    Timings,
    ToolEnd,
    ToolStart,
    TurnEnd,
    Words,
)
from voicewire.speech_link import SpeechSession, SpeechSessionError
from voicewire.speech_protocol import SAMPLE_RATE, SAMPLE_WIDTH
from voicewire.speech_text import to_speech_text
from voicewire.voice_catalog import describe_voice

logger = logging.getLogger(__name__)


@dataclass
class TurnSpec:
    turn_id: str
    turn: int
    mode: str  # bidi | batch | speak
    accepted_at: float  # epoch seconds: timings count from the moment the turn was accepted
    voice: str | None = None
    speed: float | None = None
    # ``words`` frames for the client (the speech server is asked for its word timings).
    word_timings: bool = True


@dataclass
class TurnOutcome:
    status: EndedStatus
    timings: Timings
    answer: str = ""
    stop_reason: str | None = None
    error: ClientError | None = None
    gone: bool = False  # the client left: nothing more can be posted
    # The agent's messages after the prompt (tool calls and their results, the answer): what
    # the history keeps; empty for a speak turn.
    messages: list[dict[str, Any]] = field(default_factory=list)
    # The words the turn's audio speaks, when each ends (for the history of a cut turn), and
    # how much of it the listener can have heard when the turn stopped (the estimate used when
    # the client does not say): functions.conversation.heard.
    words: list[TurnWord] = field(default_factory=list)
    heard_estimate_ms: float = 0.0
    audio_ms: float = 0.0


class _Stop(Exception):
    """Raised inside the consumer when the turn is cancelled."""


SpeechSource = SpeechSession | asyncio.Future[SpeechSession]


@dataclass
class TurnRunner:
    spec: TurnSpec
    relay: Relay
    speech: SpeechSource  # an open session, or one still opening
    cancelled: asyncio.Event
    # ask: the agent that answers (the built-in loop, a Strands agent: ``assembly`` builds it).
    agent: AgentTurn | None = None
    text: str | None = None  # speak: the text
    # How the answer's text is cut into chunks, and the speech server told to cut the first
    # one early (``Chunking``): voicewire's, unless a benchmark hands in the seed's.
    chunking: Chunking = field(default_factory=lambda: VOICEWIRE_CHUNKING)
    # Why ``cancelled`` was set, when it was not a cancel: the worker's time limit, lost session
    # state. The turn then ends ``failed`` with this error instead of ``cancelled``.
    stop_failure: Callable[[], ClientError | None] = lambda: None
    # The longest wait for a sentence's next speech event (its start, first audio, next audio,
    # end) before the speech server counts as stalled and the turn fails (``speech_failed``);
    # None: no limit but the worker's own. The worker sets it from the settings.
    speech_timeout: float | None = None
    # The most audio one turn may send (docs/security.md); past it the turn ends ``failed``
    # with ``speech_limit_reached``, the audio up to the limit delivered and counted.
    max_speech_seconds: float | None = None
    # A tool still running this long after it started gets a short filler in the voice's
    # language, once per round: at once if nothing was spoken in its round (no preamble), else
    # once the preamble has played out and half a second of silence has passed; None: never.
    tool_filler_seconds: float | None = 1.2
    # Put the tools' input and result in tool_start/tool_end (they can hold private data).
    show_tool_data: bool = False

    def __post_init__(self) -> None:
        self._clock = TurnClock(self.spec.accepted_at)
        # Each speech request sent (what it says) and the turn's audio and words read from them.
        self._audio = TurnAudio(self.spec.turn_id, self.spec.word_timings)
        self._answer_started = False  # a text of the turn's has gone to the speech server
        self._session: SpeechSession | None = None
        self._announcing: asyncio.Task[None] | None = None  # the turn_start's post
        # When the audio posted so far has played out, if it plays from its posts (monotonic).
        self._heard_until = 0.0

    @property
    def used_speech(self) -> bool:
        """Whether the turn sent anything on its speech session (else the session is clean)."""
        return bool(self._audio.requests)

    async def _speech(self) -> SpeechSession:
        """The session, once open (raises its ``SpeechSessionError`` if it could not open)."""
        if self._session is None:
            speech = self.speech
            # Shielded: a waiter cancelled with the turn (the watcher, a producer) must not call
            # off the opening itself; the worker decides what becomes of the session.
            self._session = (
                speech if isinstance(speech, SpeechSession) else await asyncio.shield(speech)
            )
        return self._session

    async def run(self, tell_end: bool = True) -> TurnOutcome:
        """Run the turn to its end. With ``tell_end=False`` the caller posts the ``error`` and
        ``turn_end`` frames itself (``tell_end``), after recording the turn: a client that
        leaves on its turn_end then finds the record final."""
        status: EndedStatus = "complete"
        error: ClientError | None = None
        start = turn_frames.turn_start(self.spec, AudioFormat(delivery=self.relay.delivery))
        # Posted while the LLM stream and the speech session start, so its round trip (tens of
        # ms on AWS) is not on the path to the first audio; every later frame waits for it.
        self._announcing = asyncio.create_task(self.relay.control(start))
        try:
            match self.spec.mode:
                case "bidi" | "batch":
                    await self._consume(self._answer_events())
                case _:
                    await self._consume(self._speak_events())
            await self.relay.finish_text()  # the last text delta goes before the turn_end
        except ClientGone:
            await self._stop_work(cancel_speech=True)
            await self._settle_text()
            return self._outcome("cancelled", gone=True)
        except _Stop:
            status = "cancelled"
            if (failure := self.stop_failure()) is not None:
                status, error = "failed", failure.model_copy()
        except (RelayError, SpeechSessionError) as failure:
            logger.warning("turn %s failed: %s", self.spec.turn_id, failure)
            status, error = "failed", failure_frame(failure)
        except (SpeechLimitReached, LlmError) as failure:
            status, error = "failed", failure_frame(failure)
        except Exception as failure:  # a bug or an unforeseen failure: the turn still ends
            logger.exception("turn %s failed", self.spec.turn_id)
            status, error = "failed", failure_frame(failure)
        try:
            await self._stop_work(cancel_speech=status != "complete")
        except Exception:  # stopping is best effort; the turn's end must still be told
            logger.exception("stopping turn %s", self.spec.turn_id)
        await self._settle_text()
        outcome = self._outcome(status, error=error)
        if error is not None:
            error.turn_id = self.spec.turn_id
        if tell_end:
            await self.tell_end(outcome)
        return outcome

    async def tell_end(self, outcome: TurnOutcome) -> None:
        """Post the turn's ``error`` (if it failed) and its ``turn_end``, its last frame."""
        if outcome.gone:
            return
        try:
            if outcome.error is not None:
                await self.relay.control(outcome.error)
            await self.relay.control(self.turn_end(outcome))
        except ClientGone:
            outcome.gone = True
        except RelayError as failure:  # the client cannot be told; the record still is
            logger.warning("turn %s: end not delivered: %s", self.spec.turn_id, failure)

    def turn_end(self, outcome: TurnOutcome) -> TurnEnd:
        return turn_frames.turn_end(
            self.spec,
            outcome.status,
            outcome.timings,
            audio_bytes=self.relay.audio_bytes,
            audio_frames=self.relay.audio_frames,
        )

    def _outcome(
        self, status: EndedStatus, error: ClientError | None = None, gone: bool = False
    ) -> TurnOutcome:
        """The turn's outcome now: its answer and messages, its words, and what the listener
        can have heard by now (at most the time since the first audio frame left, at most the
        audio sent)."""
        first = self.relay.first_audio_posted_at
        since = time.monotonic() - first if first is not None else None
        audio_ms = samples_ms(self.relay.audio_bytes // SAMPLE_WIDTH)
        agent = self.agent
        return TurnOutcome(
            status=status,
            timings=self._clock.timings(),
            answer=agent.text if agent is not None else "",
            stop_reason=agent.stop_reason if agent is not None and not gone else None,
            error=error,
            gone=gone,
            messages=list(agent.messages) if agent is not None else [],
            words=list(self._audio.words),
            heard_estimate_ms=estimated_heard_ms(since, audio_ms),
            audio_ms=audio_ms,
        )

    # --- the consumer: one queue, true arrival order ---------------------------------------

    async def _consume(self, events: AsyncIterator[Item]) -> None:
        """Post every event; stop at once when the turn is cancelled, even while waiting, and
        fail at once if the speech session cannot be opened."""

        async def pump() -> None:
            # Closed when the pump is cancelled: the producers' tasks (the agent, its tools)
            # end with it, not whenever the abandoned generator is collected.
            async with contextlib.aclosing(events):
                async for event in events:
                    await self._post(event)

        async def watch_speech() -> None:
            await self._speech()  # raises if the session could not be opened
            await asyncio.Event().wait()  # open: nothing more to watch

        pumping = asyncio.create_task(pump())
        stopping = asyncio.create_task(self.cancelled.wait())
        watching = asyncio.create_task(watch_speech())
        await asyncio.wait({pumping, stopping, watching}, return_when=asyncio.FIRST_COMPLETED)
        speech_failure = (
            watching.exception() if watching.done() and not watching.cancelled() else None
        )
        for task in (stopping, watching):
            task.cancel()
        await asyncio.gather(stopping, watching, return_exceptions=True)
        if pumping.done():
            pumping.result()  # re-raises what went wrong
            return
        pumping.cancel()
        await asyncio.gather(pumping, return_exceptions=True)
        if speech_failure is not None:
            raise speech_failure
        raise _Stop

    async def _announced(self) -> None:
        """Wait until the turn_start is posted (re-raises its failure). Shielded: a waiter
        cancelled with the turn must not call off the post itself."""
        if self._announcing is not None:
            await asyncio.shield(self._announcing)

    async def _text(self, text: str) -> None:
        await self._announced()
        await self.relay.text(self.spec.turn_id, text)

    async def _post(self, event: Item) -> None:
        if self.cancelled.is_set():
            raise _Stop
        await self._announced()
        match event:
            case AudioOut(pcm=pcm):
                await self._post_audio(pcm)
            case _:
                await self.relay.control(event)

    async def _post_audio(self, pcm: bytes) -> None:
        allowed = self._audio_allowance()
        if allowed is not None and len(pcm) > allowed:
            if allowed:
                await self.relay.audio(pcm[:allowed])
            raise SpeechLimitReached(self.max_speech_seconds)
        await self.relay.audio(pcm)
        now = time.monotonic()
        played = len(pcm) / SAMPLE_WIDTH / SAMPLE_RATE
        self._heard_until = max(now, self._heard_until) + played
        # When the first *frame* left: a chunk of more than 32 KB is several posts, and the
        # client starts playing at the first.
        first = self.relay.first_audio_posted_at
        since = time.monotonic() - first if first is not None else 0.0
        self._clock.mark("audio", time.time() - since)

    def _audio_allowance(self) -> int | None:
        """Bytes of audio the turn may still send (whole samples), or None without a limit."""
        if self.max_speech_seconds is None:
            return None
        limit = int(self.max_speech_seconds * SAMPLE_RATE) * SAMPLE_WIDTH
        return max(0, limit - self.relay.audio_bytes)

    async def _settle_text(self) -> None:
        """Wait for a text post still in flight (a stopped turn drops the text not yet posted),
        so that nothing of the turn arrives after its turn_end."""
        with contextlib.suppress(Exception):  # its failure was (or cannot be) told already
            await self._announced()
        with contextlib.suppress(ClientGone, RelayError):
            await self.relay.finish_text()

    async def _stop_work(self, cancel_speech: bool) -> None:
        """Stop the LLM stream; unless the turn completed, drop the speech still queued, so the
        session closes at once instead of synthesizing audio nobody will receive, and the text
        not yet posted."""
        if self.agent is not None:
            self.agent.stop()
        if cancel_speech:
            self.relay.discard_text()
        if cancel_speech and self._audio.requests and self._session is not None:
            with contextlib.suppress(SpeechSessionError):
                await self._session.cancel()

    # --- producers ----------------------------------------------------------------------------

    async def _agent_events(self) -> AsyncIterator[AgentEvent]:
        assert self.agent is not None
        events = self.agent.events()
        if self.tool_filler_seconds:
            events = with_still_running(events, self.tool_filler_seconds)
        async with contextlib.aclosing(events):
            async for event in events:
                if isinstance(event, AgentText):
                    self._clock.mark("text")
                yield event

    async def _answer_events(self) -> AsyncIterator[Item]:
        """An ask's events: the agent's text spoken as it arrives (bidi: sentence by sentence;
        batch: what was written before each tool call, then the answer, each as one text), the
        tool calls told to the client, and the audio of each sentence in order."""
        queue: asyncio.Queue[Item | BaseException | None] = asyncio.Queue()
        sent: asyncio.Queue[str | None] = asyncio.Queue()
        voice = self.spec.voice
        language = describe_voice(voice).language if voice else None
        batch = self.spec.mode == "batch"

        def new_chunker() -> Chunker:
            return WholeAnswer() if batch else self.chunking.chunker_factory(language=language)

        async def text_task() -> None:
            chunker = new_chunker()
            said = ToolRound()
            saying = asyncio.Lock()  # the filler's task and this one send sentences

            async def say(sentences: list[str], filler: bool = False) -> None:
                async with saying:
                    if sentences and batch:
                        await self.relay.finish_text()  # the text, before what is spoken of it
                    for sentence in sentences:
                        await self._send_sentence(sentence, said, queue, sent, filler)

            fillers = ToolFillers(
                said,
                say_filler=lambda: say([filler_for(language)], filler=True),
                heard_until=lambda: self._heard_until,
                delay=self.tool_filler_seconds,
            )
            try:
                async with contextlib.aclosing(self._agent_events()) as events:
                    async for event in events:
                        match event:
                            case AgentText(text=text):
                                await self._text(text)
                                await say(chunker.feed(text))
                            case ToolCallOpened():
                                # The preamble ("Let me check.") is spoken while the tool runs.
                                await say(chunker.finish())
                                chunker = new_chunker()
                                self.relay.flush_text()
                            case ToolCallStarted():
                                said.tool_started(event.tool_use_id)
                                queue.put_nowait(self._tool_start(event))
                                fillers.tool_started()
                            case ToolCallEnded():
                                said.tool_ended(event.tool_use_id)
                                queue.put_nowait(self._tool_end(event))
                                fillers.tool_ended()
                            case ToolsStillRunning():
                                await fillers.still_running()
                await say(chunker.finish())
            finally:
                fillers.close()
            sent.put_nowait(None)

        async def audio_task() -> None:
            while (request_id := await sent.get()) is not None:
                async for item in self._request_audio(request_id):
                    queue.put_nowait(item)

        producers = [text_task(), audio_task()]
        async with contextlib.aclosing(in_arrival_order(queue, producers)) as merged:
            async for item in merged:
                yield item

    def _tool_start(self, event: ToolCallStarted) -> ToolStart:
        shown = event.input if self.show_tool_data else None
        return ToolStart(
            turn_id=self.spec.turn_id, tool_use_id=event.tool_use_id, name=event.name, input=shown
        )

    def _tool_end(self, event: ToolCallEnded) -> ToolEnd:
        return ToolEnd(
            turn_id=self.spec.turn_id,
            tool_use_id=event.tool_use_id,
            name=event.name,
            status=event.status,
            ms=event.ms,
            result=event.reply if self.show_tool_data else None,
        )

    async def _send_sentence(
        self,
        sentence: str,
        said: ToolRound,
        queue: asyncio.Queue[Item | BaseException | None],
        sent: asyncio.Queue[str | None],
        filler: bool = False,
    ) -> None:
        self._clock.mark("sentence")
        if self.relay.text_flush == "sentence":
            self.relay.flush_text()  # the text written so far, up to this sentence
        queue.put_nowait(Sentence(turn_id=self.spec.turn_id, index=said.index, text=sentence))
        # The first sentence of a round (the turn's, or the first after its tools) is what the
        # listener waits for: cut early, like the turn's first.
        request_id = await self._request_speech(sentence, cut_early(sentence, said.in_round))
        said.spoke()
        self._audio.requested(request_id, SpokenRequest(sentence, said.round, filler))
        sent.put_nowait(request_id)

    async def _speak_events(self) -> AsyncIterator[Item]:
        assert self.text is not None
        text = " ".join(to_speech_text(self.text).split())
        if not text:
            return  # only emoji or markup: nothing to say, and the turn completes silent
        self._clock.mark("sentence")
        yield Sentence(turn_id=self.spec.turn_id, index=0, text=text)
        request_id = await self._request_speech(text, early=True)
        self._audio.requested(request_id, SpokenRequest(text, round=0, filler=False))
        async for item in self._request_audio(request_id):
            yield item

    async def _request_speech(self, text: str, early: bool) -> str:
        """Send ``text`` to the speech server in the turn's voice; ``early``: cut its first
        clause off early, if the turn's chunking does (``fast_start``)."""
        speech = await self._speech()
        # The turn's first text begins its answer: the one a busy engine may refuse at once
        # (speech_busy); every later one continues it and is never refused.
        starts_answer, self._answer_started = not self._answer_started, True
        return await speech.send(
            text,
            voice=self.spec.voice,
            speed=self.spec.speed,
            fast_start=self.chunking.fast_start and early,
            word_timings=self.spec.word_timings or None,
            starts_answer=starts_answer,
        )

    async def _request_audio(self, request_id: str) -> AsyncIterator[Words | AudioOut]:
        speech = await self._speech()
        async for item in self._audio.read(speech, request_id, idle_timeout=self.speech_timeout):
            yield item
