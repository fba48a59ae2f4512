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
from functools import partial
from typing import Any

from pydantic import BaseModel

from functions.adapters.llm import LlmError
from functions.adapters.relay import ConnectionGone, Relay, RelayError
from functions.agent_events import (
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
from functions.tool_fillers import filler_for
from voicewire.chunker import Chunker, IncrementalSentenceChunker
from voicewire.client_protocol import (
    AudioFormat,
    ClientError,
    Sentence,
    Timings,
    ToolEnd,
    ToolStart,
    TurnEnd,
    TurnStatus,
    Words,
    WordTiming,
)
from voicewire.error_codes import ErrorCode
from voicewire.speech_link import AudioChunk, SpeechSession, SpeechSessionError, WordsFrame
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
    status: TurnStatus
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


@dataclass
class _Clock:
    accepted_at: float
    marks: dict[str, float] = field(default_factory=dict)

    def mark(self, name: str, at: float | None = None) -> None:
        """Note when ``name`` first happened: now, or at ``at`` (epoch seconds)."""
        moment = time.time() if at is None else at
        self.marks.setdefault(name, round((moment - self.accepted_at) * 1000, 1))

    def timings(self) -> Timings:
        return Timings(
            first_text_ms=self.marks.get("text"),
            first_sentence_ms=self.marks.get("sentence"),
            first_audio_ms=self.marks.get("audio"),
            total_ms=round((time.time() - self.accepted_at) * 1000, 1),
        )


class _Stop(Exception):
    """Raised inside the consumer when the turn is cancelled."""


class _SpeechLimit(Exception):
    """Raised inside the consumer when the turn has sent all the audio it may."""


SpeechSource = SpeechSession | asyncio.Future[SpeechSession]


# voicewire's: the first chunk ends at its first clause or after 6 words, whichever comes first
# (an LLM writes 6 words in ~300 ms, a long first sentence in seconds).
FIRST_CLAUSE_CHUNKER = partial(IncrementalSentenceChunker, first_max_words=6)


@dataclass(frozen=True)
class Chunking:
    """How a turn cuts its text. The division of labour: this chunker (``voicewire.chunker``)
    cuts the model's stream where a listener can hear a boundary (sentences, and a first chunk
    short enough to be written in ~300 ms: its first clause or 6 words); the speech server only
    cuts the first chunk *it is sent* further, at the fastest point its engine can start on
    (``fast_start``: ``speech_server.chunk_plan``), and never adds text boundaries of its own."""

    # Called with language=<the voice's BCP 47 tag>: the abbreviation rules follow the voice.
    chunker_factory: Callable[..., Chunker] = FIRST_CLAUSE_CHUNKER
    # The speech server's early cut of the first chunk for the first sentence and for batch and
    # speak texts.
    fast_start: bool = True


VOICEWIRE_CHUNKING = Chunking()


@dataclass
class TurnRunner:
    spec: TurnSpec
    relay: Relay
    speech: SpeechSource  # an open session, or one still opening
    cancelled: asyncio.Event
    # ask: the agent that answers (the built-in loop, a Strands agent: turn_assembly builds it).
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
        self._clock = _Clock(self.spec.accepted_at)
        self._request_ids: list[str] = []
        # What each speech request says: its text, its round of the answer, whether a filler.
        self._requests: dict[str, _Spoken] = {}
        self._words: list[TurnWord] = []  # every word spoken so far, ends from the turn's start
        self._audio_queued = 0  # samples of the turn's audio handed to the consumer
        self._session: SpeechSession | None = None
        self._announcing: asyncio.Task[None] | None = None  # the turn_start's post
        # When the audio posted so far has played out, if it plays from its posts (monotonic).
        self._heard_until = 0.0

    @property
    def used_speech(self) -> bool:
        """Whether the turn sent anything on its speech session (else the session is clean)."""
        return bool(self._request_ids)

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
        status: TurnStatus = "complete"
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
        except ConnectionGone:
            await self._stop_work(cancel_speech=True)
            await self._settle_text()
            return self._heard(
                TurnOutcome(
                    "cancelled", self._clock.timings(), self._answer, gone=True,
                    messages=self._messages,
                )
            )  # fmt: skip
        except _Stop:
            status = "cancelled"
            if (failure := self.stop_failure()) is not None:
                status, error = "failed", failure.model_copy()
        except _SpeechLimit:
            status = "failed"
            error = ClientError(
                code=ErrorCode.SPEECH_LIMIT_REACHED,
                message=f"the turn reached its limit of {self.max_speech_seconds:g} s of speech",
            )
        except RelayError as failure:
            logger.warning("delivery failed in turn %s: %s", self.spec.turn_id, failure)
            status = "failed"
            error = ClientError(
                code=ErrorCode.DELIVERY_FAILED,
                message=f"a frame could not be delivered ({failure.code or failure})",
            )
        except LlmError as failure:
            status, error = "failed", ClientError(code=failure.code, message=failure.message)
        except SpeechSessionError as failure:
            logger.warning("speech failed in turn %s: %s", self.spec.turn_id, failure)
            status = "failed"
            error = ClientError(
                code=ErrorCode.SPEECH_FAILED,
                message=f"speech synthesis failed ({failure.code})",
            )
        except Exception:  # a bug or an unforeseen failure: the turn still ends, and says so
            logger.exception("turn %s failed", self.spec.turn_id)
            status = "failed"
            error = ClientError(
                code=ErrorCode.INTERNAL_ERROR, message="the turn failed; see the worker's log"
            )
        try:
            await self._stop_work(cancel_speech=status != "complete")
        except Exception:  # stopping is best effort; the turn's end must still be told
            logger.exception("stopping turn %s", self.spec.turn_id)
        await self._settle_text()
        outcome = TurnOutcome(
            status, self._clock.timings(), self._answer,
            self.agent.stop_reason if self.agent else None, messages=self._messages,
        )  # fmt: skip
        outcome.error = error
        self._heard(outcome)
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
        except ConnectionGone:
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

    def _heard(self, outcome: TurnOutcome) -> TurnOutcome:
        """``outcome`` with the turn's words and what the listener can have heard by now: at
        most the time since the first audio frame left, at most the audio sent."""
        first = self.relay.first_audio_posted_at
        since = time.monotonic() - first if first is not None else None
        outcome.audio_ms = _ms(self.relay.audio_bytes // SAMPLE_WIDTH)
        outcome.heard_estimate_ms = estimated_heard_ms(since, outcome.audio_ms)
        outcome.words = list(self._words)
        return outcome

    @property
    def _answer(self) -> str:
        return self.agent.text if self.agent is not None else ""

    @property
    def _messages(self) -> list[dict[str, Any]]:
        return list(self.agent.messages) if self.agent is not None else []

    # --- the consumer: one queue, true arrival order ---------------------------------------

    async def _consume(self, events: AsyncIterator[BaseModel | bytes]) -> None:
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

    async def _post(self, event: BaseModel | bytes) -> None:
        if self.cancelled.is_set():
            raise _Stop
        await self._announced()
        if isinstance(event, bytes):
            allowed = self._audio_allowance()
            if allowed is not None and len(event) > allowed:
                if allowed:
                    await self.relay.audio(event[:allowed])
                raise _SpeechLimit
            await self.relay.audio(event)
            now = time.monotonic()
            played = len(event) / SAMPLE_WIDTH / SAMPLE_RATE
            self._heard_until = max(now, self._heard_until) + played
            # When the first *frame* left: a chunk of more than 32 KB is several posts, and the
            # client starts playing at the first.
            first = self.relay.first_audio_posted_at
            since = time.monotonic() - first if first is not None else 0.0
            self._clock.mark("audio", time.time() - since)
        else:
            await self.relay.control(event)

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
        with contextlib.suppress(ConnectionGone, RelayError):
            await self.relay.finish_text()

    async def _stop_work(self, cancel_speech: bool) -> None:
        """Stop the LLM stream; unless the turn completed, drop the speech still queued, so the
        session closes at once instead of synthesizing audio nobody will receive, and the text
        not yet posted."""
        if self.agent is not None:
            self.agent.stop()
        if cancel_speech:
            self.relay.discard_text()
        if cancel_speech and self._request_ids and self._session is not None:
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

    async def _answer_events(self) -> AsyncIterator[BaseModel | bytes]:
        """An ask's events: the agent's text spoken as it arrives (bidi: sentence by sentence;
        batch: what was written before each tool call, then the answer, each as one text), the
        tool calls told to the client, and the audio of each sentence in order."""
        queue: asyncio.Queue[BaseModel | bytes | BaseException | None] = asyncio.Queue()
        sent: asyncio.Queue[str | None] = asyncio.Queue()
        voice = self.spec.voice
        language = describe_voice(voice).language if voice else None
        batch = self.spec.mode == "batch"

        def new_chunker() -> IncrementalSentenceChunker | _WholeAnswer:
            return _WholeAnswer() if batch else self.chunking.chunker_factory(language=language)

        async def text_task() -> None:
            chunker = new_chunker()
            said = _Said()
            saying = asyncio.Lock()  # the filler's task and this one send sentences
            filling: asyncio.Task[None] | None = None

            async def say(sentences: list[str], filler: bool = False) -> None:
                async with saying:
                    if sentences and batch:
                        await self.relay.finish_text()  # the text, before what is spoken of it
                    for sentence in sentences:
                        await self._send_sentence(sentence, said, queue, sent, filler)

            async def fill() -> None:
                said.filled = True
                await say([filler_for(language)], filler=True)

            async def fill_after_preamble(delay: float) -> None:
                # The preamble was short and the tool is slow: once the preamble has played out
                # (and at least ``delay`` into the call), the silence gets the filler too.
                await asyncio.sleep(delay)

                def quiet_in() -> float:
                    return self._heard_until + QUIET_BEFORE_FILLER - time.monotonic()

                # A deadline that moves as the preamble's audio is posted: no event marks it.
                while (left := quiet_in()) > 0:  # noqa: ASYNC110
                    await asyncio.sleep(left)
                if said.running and not said.filled:
                    await fill()

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
                                said.running.add(event.tool_use_id)
                                queue.put_nowait(self._tool_start(event))
                                delay = self.tool_filler_seconds
                                if delay and said.in_round and filling is None:
                                    filling = asyncio.create_task(fill_after_preamble(delay))
                            case ToolCallEnded():
                                said.tool_ended(event.tool_use_id)
                                queue.put_nowait(self._tool_end(event))
                                if not said.running and filling is not None:
                                    filling.cancel()
                                    filling = None
                            case ToolsStillRunning() if said.in_round == 0 and not said.filled:
                                await fill()
                await say(chunker.finish())
            finally:
                if filling is not None:
                    filling.cancel()
            sent.put_nowait(None)

        async def audio_task() -> None:
            while (request_id := await sent.get()) is not None:
                async for item in self._request_audio(request_id):
                    queue.put_nowait(item)

        async with contextlib.aclosing(_merge(queue, [text_task(), audio_task()])) as merged:
            async for item in merged:
                yield item

    def _tool_start(self, event: ToolCallStarted) -> ToolStart:
        shown = event.input if self.show_tool_data else None
        return ToolStart(
            turn_id=self.spec.turn_id, tool_use_id=event.tool_use_id, name=event.name, input=shown
        )

    def _tool_end(self, event: ToolCallEnded) -> ToolEnd:
        return ToolEnd(
            turn_id=self.spec.turn_id, tool_use_id=event.tool_use_id, name=event.name,
            status=event.status, ms=event.ms, result=event.reply if self.show_tool_data else None,
        )  # fmt: skip

    async def _send_sentence(
        self,
        sentence: str,
        said: _Said,
        queue: asyncio.Queue[BaseModel | bytes | BaseException | None],
        sent: asyncio.Queue[str | None],
        filler: bool = False,
    ) -> None:
        self._clock.mark("sentence")
        if self.relay.text_flush == "sentence":
            self.relay.flush_text()  # the text written so far, up to this sentence
        queue.put_nowait(Sentence(turn_id=self.spec.turn_id, index=said.index, text=sentence))
        # The first sentence of a round (the turn's, or the first after its tools) is what the
        # listener waits for: cut early, like the turn's first.
        request_id = await (await self._speech()).send(
            sentence,
            voice=self.spec.voice,
            speed=self.spec.speed,
            fast_start=self.chunking.fast_start and cut_early(sentence, said.in_round),
            word_timings=self.spec.word_timings or None,
        )
        said.index += 1
        said.in_round += 1
        self._request_ids.append(request_id)
        self._requests[request_id] = _Spoken(sentence, said.round, filler)
        sent.put_nowait(request_id)

    async def _speak_events(self) -> AsyncIterator[BaseModel | bytes]:
        assert self.text is not None
        text = " ".join(to_speech_text(self.text).split())
        if not text:
            return  # only emoji or markup: nothing to say, and the turn completes silent
        self._clock.mark("sentence")
        yield Sentence(turn_id=self.spec.turn_id, index=0, text=text)
        speech = await self._speech()
        request_id = await speech.send(
            text, voice=self.spec.voice, speed=self.spec.speed,
            fast_start=self.chunking.fast_start,
            word_timings=self.spec.word_timings or None,
        )  # fmt: skip
        self._request_ids.append(request_id)
        self._requests[request_id] = _Spoken(text, 0, False)
        async for item in self._request_audio(request_id):
            yield item

    async def _request_audio(self, request_id: str) -> AsyncIterator[Words | bytes]:
        """One speech request's audio, each ``words`` frame before the audio it times, its
        times moved from the request's audio to the turn's (the audio of every request before
        it); its words kept for the history of a cut turn.

        A request answered without word timings (the client turned them off, or a speech server
        that does not give them) gets its words spread evenly over its audio, for the history
        alone: what LiveKit does without TTS timings, close enough to cut at a word."""
        spoken = self._requests[request_id]
        at = self._audio_queued  # samples of the turn's audio before this request's
        timed = False
        speech = await self._speech()
        async for event in speech.events(request_id, idle_timeout=self.speech_timeout):
            if isinstance(event, WordsFrame) and event.words:
                timed = True
                words = [
                    WordTiming(text=w.text, start_ms=_ms(at + w.start), end_ms=_ms(at + w.end))
                    for w in event.words
                ]
                self._words += [
                    TurnWord(word.text, word.end_ms, spoken.round, spoken.filler) for word in words
                ]
                if self.spec.word_timings:
                    yield Words(turn_id=self.spec.turn_id, words=words)
            elif isinstance(event, AudioChunk):
                self._audio_queued += len(event.pcm) // SAMPLE_WIDTH
                yield event.pcm
        if not timed:
            written = spoken.text.split()
            step = (self._audio_queued - at) / max(1, len(written))
            self._words += [
                TurnWord(word, _ms(at + (index + 1) * step), spoken.round, spoken.filler)
                for index, word in enumerate(written)
            ]


# How long a pause after the preamble's audio may last while a tool still runs before the filler
# fills it: a breath between sentences is ~0.25-0.5 s; longer reads as a dead line.
QUIET_BEFORE_FILLER = 0.5

# A later sentence this long takes the engine longer than the audio queued before it usually
# lasts (bench: a 41-word sentence after two short ones left a 2.4 s silence on 2 cores).
LONG_SENTENCE_WORDS = 24


def cut_early(sentence: str, index: int) -> bool:
    """Whether the speech server should cut this sentence's first clause off early
    (``fast_start``): the first sentence, for the first audio; a long later one, so that its
    first audio is ready before the audio already queued runs out. Other sentences are spoken
    whole, as they sound best."""
    return index == 0 or len(sentence.split()) > LONG_SENTENCE_WORDS


@dataclass
class _Said:
    """What an answer has spoken: sentences in all (their index), sentences since its last round
    of tool calls ended (none: the listener is waiting), and the calls still running."""

    index: int = 0
    in_round: int = 0
    running: set[str] = field(default_factory=set)
    filled: bool = False  # this round's filler was spoken
    round: int = 0  # the answer's rounds: one model message each (its tool calls end a round)

    def tool_ended(self, tool_use_id: str) -> None:
        self.running.discard(tool_use_id)
        if not self.running:
            self.in_round = 0  # the answer to the results starts a new round
            self.filled = False
            self.round += 1


@dataclass(frozen=True)
class _Spoken:
    """What a speech request says, for the words it is timed with."""

    text: str
    round: int
    filler: bool


def _ms(samples: float) -> float:
    """Samples of 24 kHz audio as milliseconds (0.1 ms: finer than any word boundary)."""
    return round(samples * 1000 / SAMPLE_RATE, 1)


class _WholeAnswer:
    """Batch's chunker: nothing until the end or a tool call, then all of it as one text."""

    def __init__(self) -> None:
        self._parts: list[str] = []

    def feed(self, fragment: str) -> list[str]:
        self._parts.append(fragment)
        return []

    def finish(self) -> list[str]:
        text = " ".join(to_speech_text("".join(self._parts)).split())
        self._parts = []
        return [text] if text else []


async def _merge(
    queue: asyncio.Queue[Any], producers: list[Any]
) -> AsyncIterator[BaseModel | bytes]:
    """Run the producers; yield what they queue in arrival order; re-raise their failures."""
    tasks = [asyncio.create_task(producer) for producer in producers]
    remaining = len(tasks)

    def finished(task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            queue.put_nowait(task.exception())
        else:
            queue.put_nowait(None)

    for task in tasks:
        task.add_done_callback(finished)
    try:
        while remaining:
            item = await queue.get()
            if item is None:
                remaining -= 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield item
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
