"""From a validated request to PCM frames, pipelined: chunk n+1 is synthesized as chunk n is sent.

One ``Synthesizer`` per process owns the engine and a single worker thread. The engine uses every
core for one call (onnxruntime's intra-op threads, or the GPU), so running two calls at once would
only make both slower; a single thread also keeps engines that are not thread-safe safe. Across
requests (many sessions on one server) that thread takes their steps earliest deadline first: a
listener who hears nothing yet before one with audio queued (``speech_server.deadline_executor``).

For each request a chain of steps (``deadline_executor.StepChain``) walks the chunk plan on that
thread, each step queuing the next as it ends, up to ``lookahead`` steps ahead of the consumer,
while the consumer (the WebSocket or HTTP response) sends the frames of the step before; a step is
one engine call's audio with the words it speaks. A chunk comes from the engine's
``synthesize_stream``, a piece at a time (the ONNX engine's first vocoder window leaves before the
rest is decoded), when the listener would otherwise wait for it: a fast-start request's first chunk,
and any chunk that, decoded whole, would not be ready before the audio ahead of it has played
(``speech_server.chunk_schedule``, from the engine's measured speed and the session's playback
clock). The others (a pipeline's later sentences, synthesized while earlier audio plays) are decoded
whole: there the seam and its extra vocoder work (the first window, decoded again in the whole:
25-55% more) would buy nothing. Cancellation is seen between frames; a piece already on the thread
finishes there and its audio is dropped.

With ``word_timings``, an engine that times its words (``synthesize_timed``: both engines) gives
each chunk's words before its audio; they are moved here from the engine's raw audio to the
request's audio as sent: less the leading silence trimmed, plus every chunk, pause and window
before them (the streamed vocoder's windows concatenate to the whole decode's length, so a seam
moves no word).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import AsyncGenerator, Callable, Iterator
from dataclasses import dataclass, field, replace

import numpy as np
from numpy.typing import NDArray

from speech_server.chunk_plan import ChunkPolicy, pause_after, plan_chunks
from speech_server.chunk_schedule import (
    ChunkSchedule,
    PlaybackClock,
    audio_seconds_by_characters,
    typical_streamed_share,
)
from speech_server.deadline_executor import DeadlineExecutor, StepChain
from speech_server.engine_share import EngineShare, begins_answer, max_engine_load_from_env
from speech_server.engines import SpeechEngine
from speech_server.word_timings import SpokenWord
from voicewire.speech_protocol import SAMPLE_WIDTH, CompletionStatus, SynthesisComplete

FIRST_AUDIO_KEPT = 10_000  # first-audio figures held between two reports (a minute's worth)
FRAME_SECONDS = 0.2  # 9,600 bytes of 24 kHz s16le: fine-grained for cancel, small overhead
# An engine with no measured speed is weighed by its observed pace once it has made this much
# audio (a few answers' worth; the first calls of a GPU's kernels are over by then).
OBSERVED_PACE_AFTER_SECONDS = 3.0
SILENCE_THRESHOLD = 0.01  # |sample| below this, at the ends of a chunk, is silence
EDGE_PAD_SECONDS = 0.015  # keep a little room so onsets and final consonants are not clipped


@dataclass
class SynthesisStats:
    """Figures for one request, filled in while its frames are produced, on the synthesizer's
    clock (``Synthesizer.new_stats``: ``perf_counter``, or a test's paced clock), the clock its
    schedule reads when it asks how long the listener has waited."""

    now: Callable[[], float] = field(default=time.perf_counter, repr=False)
    started: float = field(default=-1.0)
    chunks: int = 0
    audio_bytes: int = 0
    first_audio_at: float | None = None

    def __post_init__(self) -> None:
        if self.started < 0:
            self.started = self.now()

    def count_frame(self, frame: bytes) -> None:
        if self.first_audio_at is None:
            self.first_audio_at = self.now()
        self.audio_bytes += len(frame)

    @property
    def first_audio_ms(self) -> float | None:
        if self.first_audio_at is None:
            return None
        return round((self.first_audio_at - self.started) * 1000, 1)

    @property
    def elapsed_ms(self) -> float:
        return round((self.now() - self.started) * 1000, 1)

    def complete_frame(
        self, request_id: str, sample_rate: int, status: CompletionStatus = "complete"
    ) -> SynthesisComplete:
        """The ``synthesis_complete`` frame that closes this request's answer."""
        return SynthesisComplete(
            request_id=request_id,
            status=status,
            audio_seconds=round(self.audio_bytes / SAMPLE_WIDTH / sample_rate, 3),
            audio_bytes=self.audio_bytes,
            chunks=self.chunks,
            first_audio_ms=self.first_audio_ms,
            elapsed_ms=self.elapsed_ms,
        )


@dataclass(frozen=True, slots=True)
class AudioPiece:
    """s16le PCM of the request's audio (at most ``frame_bytes`` once it leaves ``pcm_frames``)."""

    pcm: bytes


@dataclass(frozen=True, slots=True)
class WordsAhead:
    """The words the audio after them speaks, in samples from the start of the request's audio."""

    words: list[SpokenWord]


Piece = AudioPiece | WordsAhead


class Synthesizer:
    def __init__(
        self,
        engine: SpeechEngine,
        lookahead: int = 1,
        max_engine_load: float | None = None,
        now: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.engine = engine
        self.lookahead = lookahead
        # The clock every plan is made by: the listeners' playback and the engine's timed
        # chunks. A test gives one that only the engine moves (``tests/paced_engine.py``), so a
        # plan is the same on every machine, however busy.
        self.now = now
        self.frame_bytes = int(engine.sample_rate * FRAME_SECONDS) * SAMPLE_WIDTH
        # An engine that measured its speed on this machine says so, and one that phonemizes
        # estimates a text's audio by its sounds; one that does neither (the torch engine on a
        # GPU, a test's stand-in) is taken as keeping up with playback.
        self.schedule = ChunkSchedule(
            getattr(engine, "real_time_factor", None),
            getattr(engine, "estimated_audio_seconds", audio_seconds_by_characters),
            getattr(engine, "streamed_first_share", typical_streamed_share),
        )
        # The sessions the engine speaks for, and whether a new answer fits among them.
        self.share = EngineShare(
            max_engine_load if max_engine_load is not None else max_engine_load_from_env()
        )
        # One thread, earliest deadline first: a listener who hears nothing yet goes before one
        # with seconds of audio queued (speech_server.deadline_executor).
        self._executor = DeadlineExecutor(thread_name_prefix="synthesis")
        # Seconds the synthesis thread has spent in the engine: what loads an instance
        # (speech_server.load_metrics). Written by that one thread only.
        self.busy_seconds = 0.0
        # Seconds of audio it has made: with busy_seconds, the engine's pace as observed, what
        # new answers are weighed by when the engine measured none (``pace``).
        self.audio_seconds_made = 0.0
        # Each answer's first audio (a fast-start request: its listener waits), in ms from the
        # request's start to its first frame, until the load reporter takes them: what the
        # endpoint's first-audio alarm watches (speech_server.load_metrics). Bounded: with no
        # reporter (a laptop) nobody takes them.
        self._first_audio_ms: deque[float] = deque(maxlen=FIRST_AUDIO_KEPT)

    def playback_clock(self) -> PlaybackClock:
        """A new listener's queue, on this synthesizer's clock."""
        return PlaybackClock(self.now)

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)

    def admit(self, clock: PlaybackClock) -> None:
        """``EngineBusy`` if a new answer on ``clock``'s session would take the engine past
        what it can speak in time (``speech_server.engine_share``)."""
        self.share.admit(clock, self.pace())

    def pace(self) -> float | None:
        """Engine-seconds per second of audio: the measured one followed under load (the ONNX
        engine's, ``ChunkSchedule.pace``), else, for an engine that measured none (the torch
        engine on a GPU), what this synthesizer has observed once it has made
        ``OBSERVED_PACE_AFTER_SECONDS`` of audio. The chunk schedule keeps taking such an engine
        as keeping up; only the engine share weighs new answers by it, so that a GPU server
        past what it can speak refuses them early too."""
        measured = self.schedule.pace()
        if measured is not None:
            return measured
        if self.audio_seconds_made < OBSERVED_PACE_AFTER_SECONDS:
            return None
        return self.busy_seconds / self.audio_seconds_made

    def new_stats(self) -> SynthesisStats:
        """A request's figures, on this synthesizer's clock."""
        return SynthesisStats(now=self.now)

    def take_first_audio_ms(self) -> list[float]:
        """The first-audio figures of the answers since the last call."""
        taken = list(self._first_audio_ms)
        self._first_audio_ms.clear()
        return taken

    async def pcm_frames(
        self,
        text: str,
        voice: str,
        speed: float,
        *,
        fast_start: bool = True,
        cancelled: asyncio.Event | None = None,
        stats: SynthesisStats | None = None,
        clock: PlaybackClock | None = None,
        word_timings: bool = False,
        starts_answer: bool | None = None,
        admitted: bool = False,
    ) -> AsyncGenerator[Piece]:
        """Yield ``AudioPiece`` frames of at most ``frame_bytes`` as soon as each chunk exists;
        with ``word_timings``, also the ``WordsAhead`` the next frames speak (samples from the
        start of this request's audio), each before the first frame it describes.

        ``fast_start``: the listener waits for this request's first audio, so its first chunk is
        cut short (``chunk_plan``) and comes from the engine a piece at a time. Without it, the
        request is cut and streamed the same way only when ``clock`` (the session's audio still
        to play) says its first chunk would otherwise come after that audio has run out.

        Raises ``EngineBusy`` before anything is made when a new answer (``starts_answer``;
        absent, a ``fast_start`` request) would take the engine past what it can speak in time
        (``speech_server.engine_share``), unless the caller has ``admitted`` it already (the
        POST route weighs it before its response starts: weighed again here, an answer that
        another one began beside in between would fail after its 200), and whatever the engine
        raised; stops early, without raising, once ``cancelled`` is set.
        """
        cancelled = cancelled or asyncio.Event()
        stats = stats or self.new_stats()
        clock = clock or self.playback_clock()
        if not admitted and begins_answer(fast_start, starts_answer):
            self.admit(clock)
        if fast_start:
            clock.stop()  # a new answer: the listener waits for it, whatever was queued before
        # The request's steps run on the synthesis thread, each queuing the next as it ends
        # (``StepChain``), up to ``lookahead`` steps ahead of what this consumer has sent; their
        # pieces come back through ``ready``.
        loop = asyncio.get_running_loop()
        ready: asyncio.Queue[list[Piece] | BaseException | None] = asyncio.Queue()
        bytes_per_second = SAMPLE_WIDTH * self.engine.sample_rate

        def step() -> list[Piece] | None:
            pieces = self._step(request_pieces)
            for piece in pieces or ():
                if isinstance(piece, AudioPiece):  # before the next step's deadline is asked
                    clock.add(len(piece.pcm) / bytes_per_second)
            return pieces

        def deliver(result: list[Piece] | BaseException | None) -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody is listening
                loop.call_soon_threadsafe(ready.put_nowait, result)

        request_pieces = self._request_pieces(
            text, voice, speed, fast_start, clock, stats, word_timings
        )
        # Counted as speaking from here until its frames are all taken: the engine's share.
        self.share.started(clock)
        self.schedule.sharing = self.share.producing()
        # Due when the listener's audio runs out (at once, for one who hears nothing yet).
        chain = StepChain(
            self._executor,
            step,
            lambda: clock.runs_out(waiting_since=stats.started),
            deliver,
            # ``lookahead`` results waiting, and one more made while they wait: a chunk's
            # trailing pause is a step of its own, so with one the next chunk's engine call
            # waited for the consumer.
            room=self.lookahead + 1,
        )
        chain.start()
        try:
            while not cancelled.is_set():
                result = await _get_unless(ready, cancelled)
                if result is None:
                    return
                chain.taken()  # the next step may run while these frames are sent
                if isinstance(result, BaseException):
                    raise result
                for item in result:
                    match item:
                        case WordsAhead():
                            yield item
                        case AudioPiece(pcm=pcm):
                            for offset in range(0, len(pcm), self.frame_bytes):
                                if cancelled.is_set():
                                    return
                                frame = pcm[offset : offset + self.frame_bytes]
                                stats.count_frame(frame)
                                if fast_start and stats.audio_bytes == len(frame):  # its first
                                    self._first_audio_ms.append(stats.first_audio_ms)  # type: ignore[arg-type]
                                yield AudioPiece(frame)
        finally:
            chain.close()
            self.share.finished(clock)
            self.schedule.sharing = self.share.producing()
            if cancelled.is_set():
                clock.stop()  # what was made and not sent is never played

    def _request_pieces(
        self,
        text: str,
        voice: str,
        speed: float,
        fast_start: bool,
        clock: PlaybackClock,
        stats: SynthesisStats,
        word_timings: bool = False,
    ) -> Iterator[Piece]:
        """Runs on the synthesis thread, a piece per step: the request's plan, then each chunk,
        streamed or whole as the schedule says when its turn comes (the clock then holds the
        audio of every chunk before it); with ``word_timings``, each chunk's words moved to the
        request's audio."""
        schedule = self.schedule
        policy = schedule.policy
        if not fast_start:
            # Cut like a fast start only if its first chunk would come after the audio ahead.
            whole = plan_chunks(text, fast_start=False)
            fast_start = bool(whole) and schedule.needs_fast_start(whole[0], voice, speed, clock)
            if fast_start:
                policy = self._in_time(whole[0], voice, speed, clock)
        chunks = deque(plan_chunks(text, fast_start=fast_start, policy=policy))
        timed = word_timings and hasattr(self.engine, "synthesize_timed")
        sent = 0  # samples of this request's audio before the chunk
        index = -1
        while chunks:
            chunk, index = chunks.popleft(), index + 1
            if index and schedule.needs_fast_start(chunk, voice, speed, clock):
                # The audio before it runs out before even its first window (a slow CPU after a
                # one-word first chunk): its first words first, the rest after them.
                cut = self._in_time(chunk, voice, speed, clock)
                chunk, *rest = plan_chunks(chunk, fast_start=True, policy=cut)
                chunks.extendleft(reversed(rest))
            stats.chunks = index + 1 + len(chunks)
            first_of_fast_start = fast_start and index == 0
            streamed = first_of_fast_start or schedule.streams(chunk, voice, speed, clock)
            chunk_start = sent  # the chunk's words count from its own first sample
            for piece in self._render(chunk, voice, speed, streamed=streamed, timed=timed):
                match piece:
                    case AudioPiece(pcm=pcm):
                        sent += len(pcm) // SAMPLE_WIDTH
                        yield piece
                    case WordsAhead(words=words):
                        yield WordsAhead([word.shifted(chunk_start) for word in words])

    def _in_time(self, text: str, voice: str, speed: float, clock: PlaybackClock) -> ChunkPolicy:
        """The plan's policy for a cut made because the listener would wait: its first chunk
        no longer than the engine can make before the audio ahead runs out."""
        policy = self.schedule.policy
        most = self.schedule.words_in_time(text, voice, speed, clock, policy.first_max_words)
        return replace(policy, first_max_words=most)

    def _step(self, pieces: Iterator[Piece]) -> list[Piece] | None:
        """Runs on the synthesis thread: the request's next pieces up to and including its next
        audio (words come just before the audio they describe, so they travel with it), their
        engine time counted; None once the request is done."""
        started = self.now()
        taken: list[Piece] = []
        try:
            for piece in pieces:
                taken.append(piece)
                if isinstance(piece, AudioPiece):
                    seconds = len(piece.pcm) / SAMPLE_WIDTH / self.engine.sample_rate
                    self.audio_seconds_made += seconds
                    break
            return taken or None
        finally:
            self.busy_seconds += self.now() - started

    def _render(
        self, chunk: str, voice: str, speed: float, *, streamed: bool, timed: bool = False
    ) -> Iterator[Piece]:
        """Runs on the synthesis thread: model call (a whole one timed for the schedule), silence
        trim, pause, int16 conversion. ``timed``: the chunk's words too, from the start of its
        audio as kept (each list before the audio it describes; the trim's cut is known once
        the first loud sample has come, so words wait for it)."""
        engine = self.engine
        pieces: Iterator[NDArray[np.float32] | list[SpokenWord]]
        if timed:
            pieces = engine.synthesize_timed(chunk, voice, speed, streamed=streamed)  # type: ignore[attr-defined]
        elif streamed:
            pieces = engine.synthesize_stream(chunk, voice, speed)
        if not streamed:
            started = self.now()
            whole = list(pieces) if timed else [engine.synthesize(chunk, voice, speed)]
            self.schedule.observe(chunk, voice, speed, self.now() - started)
            pieces = iter(whole)
        trim = StreamedTrim(engine.sample_rate)
        waiting: list[SpokenWord] = []  # words whose audio's trim is not yet known
        # The engine's own pieces: float32 audio, or a list of the words of the audio after it.
        for piece in pieces:
            if isinstance(piece, list):
                waiting += piece
            else:
                kept = trim.push(piece)
                if kept.size:
                    if waiting:
                        yield WordsAhead([word.shifted(-trim.cut) for word in waiting])
                        waiting = []
                    yield AudioPiece(to_pcm16(kept))
                continue
            if waiting and trim.speaking:
                yield WordsAhead([word.shifted(-trim.cut) for word in waiting])
                waiting = []
        # Words still waiting belong to audio the trim dropped whole (nothing loud): none sent.
        pause = np.zeros(int(pause_after(chunk) / speed * engine.sample_rate), np.float32)
        yield AudioPiece(to_pcm16(np.concatenate([trim.finish(), pause])))


def trim_silence(audio: NDArray[np.float32], sample_rate: int) -> NDArray[np.float32]:
    """Cut the model's silence at both ends of a chunk.

    Kokoro starts every utterance with ~0.3 s of silence and ends it with ~0.5 s. At the start of
    the first chunk that silence is pure added latency before anything is heard; between chunks
    ``chunk_plan.pause_after`` puts back a pause that fits the punctuation instead.
    """
    loud = np.flatnonzero(np.abs(audio) > SILENCE_THRESHOLD)
    if loud.size == 0:
        return audio[:0]
    pad = int(EDGE_PAD_SECONDS * sample_rate)
    return audio[max(0, loud[0] - pad) : loud[-1] + 1 + pad]


class StreamedTrim:
    """``trim_silence`` over audio that arrives in pieces: the same samples, each given out as
    soon as it is known to lie between the first and the last loud sample (plus the edge pads)."""

    def __init__(self, sample_rate: int) -> None:
        self.pad = int(EDGE_PAD_SECONDS * sample_rate)
        self.speaking = False
        self.before: NDArray[np.float32] = np.zeros(0, np.float32)  # the pad before the onset
        self.held: NDArray[np.float32] = np.zeros(0, np.float32)  # quiet since the last loud one
        self.seen = 0  # samples pushed so far
        # Samples dropped before the first one kept (known once speaking): what moves the
        # chunk's word timings onto its audio as sent.
        self.cut = 0

    def push(self, piece: NDArray[np.float32]) -> NDArray[np.float32]:
        """What of ``piece`` (and the quiet held before it) is now known to be kept."""
        loud = np.flatnonzero(np.abs(piece) > SILENCE_THRESHOLD)
        seen_before, self.seen = self.seen, self.seen + len(piece)
        if not self.speaking:
            if loud.size == 0:
                self.before = np.concatenate([self.before, piece])[-self.pad :]
                return piece[:0]
            self.speaking = True
            onset = len(self.before) + int(loud[0])
            self.cut = seen_before - len(self.before) + max(0, onset - self.pad)
            piece = np.concatenate([self.before, piece])[max(0, onset - self.pad) :]
            loud = np.flatnonzero(np.abs(piece) > SILENCE_THRESHOLD)
        if loud.size == 0:
            self.held = np.concatenate([self.held, piece])
            return piece[:0]
        kept = np.concatenate([self.held, piece[: loud[-1] + 1]])
        self.held = piece[loud[-1] + 1 :]
        return kept

    def finish(self) -> NDArray[np.float32]:
        """The pad after the last loud sample (nothing if nothing was loud)."""
        return self.held[: self.pad]


def to_pcm16(audio: NDArray[np.float32]) -> bytes:
    return (np.clip(audio, -1.0, 1.0) * 32767.0).astype("<i2").tobytes()


async def _get_unless[T](queue: asyncio.Queue[T], stop: asyncio.Event) -> T | None:
    """The next item, or ``None`` as soon as ``stop`` is set (without losing a dequeued item)."""
    if not queue.empty():
        return queue.get_nowait()
    getter = asyncio.ensure_future(queue.get())
    stopper = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({getter, stopper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopper.cancel()
        if not getter.done():
            getter.cancel()
    return getter.result() if getter.done() and not getter.cancelled() else None
