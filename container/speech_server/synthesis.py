"""From a validated request to PCM frames, pipelined: chunk n+1 is synthesized as chunk n is sent.

One ``Synthesizer`` per process owns the engine and a single worker thread. The engine uses every
core for one call (onnxruntime's intra-op threads, or the GPU), so running two calls at once would
only make both slower; a single thread also keeps engines that are not thread-safe safe.

For each request a producer task walks the chunk plan on that thread, up to ``lookahead`` chunks
ahead of the consumer, while the consumer (the WebSocket or HTTP response) sends the frames of the
chunk before. Cancellation is seen between frames; a chunk already on the thread finishes there
and its audio is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from speech_server.chunk_plan import pause_after, plan_chunks
from speech_server.engines import SpeechEngine
from voicewire.speech_protocol import SAMPLE_WIDTH, CompletionStatus, SynthesisComplete

FRAME_SECONDS = 0.2  # 9,600 bytes of 24 kHz s16le: fine-grained for cancel, small overhead
SILENCE_THRESHOLD = 0.01  # |sample| below this, at the ends of a chunk, is silence
EDGE_PAD_SECONDS = 0.015  # keep a little room so onsets and final consonants are not clipped


@dataclass
class SynthesisStats:
    """Figures for one request, filled in while its frames are produced."""

    started: float = field(default_factory=time.perf_counter)
    chunks: int = 0
    audio_bytes: int = 0
    first_audio_at: float | None = None

    def count_frame(self, frame: bytes) -> None:
        if self.first_audio_at is None:
            self.first_audio_at = time.perf_counter()
        self.audio_bytes += len(frame)

    @property
    def first_audio_ms(self) -> float | None:
        if self.first_audio_at is None:
            return None
        return round((self.first_audio_at - self.started) * 1000, 1)

    @property
    def elapsed_ms(self) -> float:
        return round((time.perf_counter() - self.started) * 1000, 1)

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


class _End:
    """Marks the end of the producer's chunks."""


_END = _End()


class Synthesizer:
    def __init__(self, engine: SpeechEngine, lookahead: int = 1) -> None:
        self.engine = engine
        self.lookahead = lookahead
        self.frame_bytes = int(engine.sample_rate * FRAME_SECONDS) * SAMPLE_WIDTH
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="synthesis")

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def pcm_frames(
        self,
        text: str,
        voice: str,
        speed: float,
        *,
        fast_start: bool = True,
        cancelled: asyncio.Event | None = None,
        stats: SynthesisStats | None = None,
    ) -> AsyncGenerator[bytes]:
        """Yield s16le PCM frames of at most ``frame_bytes`` as soon as each chunk exists.

        Raises whatever the engine raised; stops early, without raising, once ``cancelled`` is set.
        """
        cancelled = cancelled or asyncio.Event()
        stats = stats or SynthesisStats()
        chunks = plan_chunks(text, fast_start=fast_start)
        stats.chunks = len(chunks)
        ready: asyncio.Queue[bytes | BaseException | _End] = asyncio.Queue(self.lookahead)
        producer = asyncio.create_task(self._produce(chunks, voice, speed, ready, cancelled))
        try:
            while not cancelled.is_set():
                item = await _get_unless(ready, cancelled)
                if item is None or isinstance(item, _End):
                    return
                if isinstance(item, BaseException):
                    raise item
                for offset in range(0, len(item), self.frame_bytes):
                    if cancelled.is_set():
                        return
                    frame = item[offset : offset + self.frame_bytes]
                    stats.count_frame(frame)
                    yield frame
        finally:
            producer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await producer

    async def _produce(
        self,
        chunks: list[str],
        voice: str,
        speed: float,
        ready: asyncio.Queue[bytes | BaseException | _End],
        cancelled: asyncio.Event,
    ) -> None:
        loop = asyncio.get_running_loop()
        try:
            for chunk in chunks:
                if cancelled.is_set():
                    return
                pcm = await loop.run_in_executor(self._executor, self._render, chunk, voice, speed)
                await ready.put(pcm)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # handed to the consumer, which reports it
            await ready.put(error)
            return
        await ready.put(_END)

    def _render(self, chunk: str, voice: str, speed: float) -> bytes:
        """Runs on the synthesis thread: model call, silence trim, pause, int16 conversion."""
        audio = trim_silence(self.engine.synthesize(chunk, voice, speed), self.engine.sample_rate)
        pause = np.zeros(int(pause_after(chunk) / speed * self.engine.sample_rate), np.float32)
        return to_pcm16(np.concatenate([audio, pause]))


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
