"""A Transcribe streaming client for recordings: what ``voicewire ask --audio`` and the voice
benchmark send through a ``listen`` URL, as a microphone would.

The recording goes out in ``AudioEvent`` messages of ``chunk_ms`` (100 ms: inside the guide's
50-200 ms) at ``pace`` times real time (1.0: as spoken; at most ``MAX_PACE``, 2; 0: that most),
then the empty ``AudioEvent``. Transcribe wants audio at the pace it is spoken and refuses a
burst ("Your stream is too big"): twice real time is what the page drains a backlog at too.
Results are read while it is sent, until Transcribe closes the stream. A
``TranscribeException`` (a bad URL, audio refused, a recognizer that failed) is raised as it
came.

``end_of_turn``: decide the end of the turn as a live client does (``end_of_turn.EndOfTurn``, the
rule the page's ``web/listening.js`` applies), not at the end of the file: once a final result
with words is followed by the rule's wait without a new result, the speaker is taken to be done;
the rest of the recording is not sent and the stream is ended. ``Transcription.decided_ms`` says
when.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from websockets.asyncio.client import connect

from voicewire.speech_in.end_of_turn import EndOfTurn
from voicewire.speech_in.transcribe_events import (
    TranscribeException,
    TranscriptEvent,
    audio_event,
    end_of_stream,
    read_result,
)

MAX_PACE = 2.0  # the fastest a recording or a queue of microphone audio is sent to Transcribe


def pace_of(pace: float) -> float:
    """The pace to stream at: ``pace`` times real time, 0 for the fastest (``MAX_PACE``);
    ValueError outside 0 to ``MAX_PACE``."""
    if not 0 <= pace <= MAX_PACE:
        raise ValueError(
            f"pace must be 0 (the fastest Transcribe takes: {MAX_PACE:g}x real time) to "
            f"{MAX_PACE:g}, not {pace:g}: Transcribe refuses audio sent in a burst"
        )
    return pace or MAX_PACE


@dataclass(frozen=True)
class HeardText:
    """One result as it arrived: its text, whether final, where in the audio (seconds from the
    stream's first sample) and when it arrived (ms after the first audio was sent)."""

    result_id: str
    text: str
    final: bool
    start_s: float
    end_s: float
    at_ms: float


@dataclass
class Transcription:
    results: list[HeardText] = field(default_factory=list)
    audio_s: float = 0.0
    sent_ms: float = 0.0  # when the last audio left (ms after the first)
    decided_ms: float | None = None  # when end_of_turn_ms decided the turn was over

    @property
    def finals(self) -> list[HeardText]:
        return [result for result in self.results if result.final]

    @property
    def text(self) -> str:
        """What was said: the final results' texts, in order."""
        return " ".join(result.text for result in self.finals if result.text).strip()


async def transcribe(
    url: str,
    pcm: bytes,
    sample_rate: int,
    *,
    pace: float = 1.0,
    chunk_ms: int = 100,
    on_result: Callable[[HeardText], None] | None = None,
    limit_seconds: float = 60,
    end_of_turn: EndOfTurn | None = None,
) -> Transcription:
    """Stream ``pcm`` (16-bit little-endian mono at ``sample_rate``) to the presigned ``url``;
    every result Transcribe sent. Raises ``TranscribeException``."""
    pace = pace_of(pace)
    transcription = Transcription(audio_s=len(pcm) / 2 / sample_rate)
    chunk = sample_rate * chunk_ms // 1000 * 2
    started = time.perf_counter()

    def elapsed_ms() -> float:
        return round((time.perf_counter() - started) * 1000, 1)

    async with connect(url, max_size=None, open_timeout=30) as stream:

        async def send_audio() -> None:
            for index, offset in enumerate(range(0, len(pcm), chunk)):
                # As a microphone (or faster, up to MAX_PACE): each chunk once it is due.
                due = started + index * chunk_ms / 1000 / pace
                await asyncio.sleep(max(0.0, due - time.perf_counter()))
                await stream.send(audio_event(pcm[offset : offset + chunk]))
            transcription.sent_ms = elapsed_ms()
            await stream.send(end_of_stream())

        sending = asyncio.create_task(send_audio())
        frames = aiter(stream)
        try:
            async with asyncio.timeout(limit_seconds + transcription.audio_s / pace):
                while True:
                    last = transcription.results[-1] if transcription.results else None
                    waiting = (
                        end_of_turn.wait_ms(last.text) / 1000
                        if end_of_turn is not None and last and last.final and last.text
                        else None
                    )
                    try:
                        frame = await asyncio.wait_for(anext(frames), waiting)
                    except StopAsyncIteration:
                        break
                    except TimeoutError:  # a final result, then quiet: the turn is over
                        transcription.decided_ms = elapsed_ms()
                        break
                    if not isinstance(frame, bytes):
                        continue
                    message = read_result(frame)
                    if isinstance(message, TranscribeException):
                        raise message
                    for heard in _heard(message, elapsed_ms()):
                        transcription.results.append(heard)
                        if on_result is not None:
                            on_result(heard)
        finally:
            sending.cancel()
            await asyncio.gather(sending, return_exceptions=True)
    return transcription


def _heard(event: TranscriptEvent, at_ms: float) -> list[HeardText]:
    return [
        HeardText(
            result_id=result.result_id,
            text=result.alternatives[0].transcript if result.alternatives else "",
            final=not result.is_partial,
            start_s=result.start_time,
            end_s=result.end_time,
            at_ms=at_ms,
        )
        for result in event.transcript.results
    ]
