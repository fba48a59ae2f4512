"""The turn's audio as it is read from the speech session, request by request: each ``words``
frame moved from its request's audio to the turn's, and every word spoken kept, with when it
ends, for the history of a cut turn (``functions.conversation.heard``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from functions.conversation.heard import TurnWord
from functions.turn.arrival import AudioOut
from voicewire.client_protocol import Words, WordTiming
from voicewire.speech_link import AudioChunk, SpeechSession, WordsFrame
from voicewire.speech_protocol import SAMPLE_RATE, SAMPLE_WIDTH


@dataclass(frozen=True)
class SpokenRequest:
    """What a speech request says, for the words it is timed with."""

    text: str
    round: int  # the answer's round it belongs to (functions.turn.fillers.ToolRound)
    filler: bool


def samples_ms(samples: float) -> float:
    """Samples of 24 kHz audio as milliseconds (0.1 ms: finer than any word boundary)."""
    return round(samples * 1000 / SAMPLE_RATE, 1)


@dataclass
class TurnAudio:
    turn_id: str
    word_timings: bool  # the client gets ``words`` frames
    requests: dict[str, SpokenRequest] = field(default_factory=dict)
    words: list[TurnWord] = field(default_factory=list)  # ends from the turn's first audio
    queued_samples: int = 0  # samples of the turn's audio read so far

    def requested(self, request_id: str, spoken: SpokenRequest) -> None:
        """A request was sent to the speech server; its audio is read in the order sent."""
        self.requests[request_id] = spoken

    async def read(
        self, speech: SpeechSession, request_id: str, idle_timeout: float | None
    ) -> AsyncIterator[Words | AudioOut]:
        """One speech request's audio, each ``words`` frame before the audio it times, its
        times moved from the request's audio to the turn's (the audio of every request before
        it); its words kept for the history of a cut turn.

        A request answered without word timings (the client turned them off, or a speech server
        that does not give them) gets its words spread evenly over its audio, for the history
        alone: what LiveKit does without TTS timings, close enough to cut at a word."""
        ms = samples_ms
        spoken = self.requests[request_id]
        at = self.queued_samples  # samples of the turn's audio before this request's
        timed = False
        async for event in speech.events(request_id, idle_timeout=idle_timeout):
            if isinstance(event, WordsFrame) and event.words:
                timed = True
                words = [
                    WordTiming(text=w.text, start_ms=ms(at + w.start), end_ms=ms(at + w.end))
                    for w in event.words
                ]
                self.words += [
                    TurnWord(word.text, word.end_ms, spoken.round, spoken.filler) for word in words
                ]
                if self.word_timings:
                    yield Words(turn_id=self.turn_id, words=words)
            elif isinstance(event, AudioChunk):
                self.queued_samples += len(event.pcm) // SAMPLE_WIDTH
                yield AudioOut(event.pcm)
        if not timed:
            written = spoken.text.split()
            step = (self.queued_samples - at) / max(1, len(written))
            self.words += [
                TurnWord(word, samples_ms(at + (index + 1) * step), spoken.round, spoken.filler)
                for index, word in enumerate(written)
            ]
