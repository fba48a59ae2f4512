"""When each chunk's audio must exist, and how the synthesis layer makes it in time.

``chunk_plan`` cuts a text into chunks by its words; this module decides, from the engine's
measured speed (``speech_server.engine_tuning``: its real-time factor on this machine), how each
chunk is made so that the listener never waits once the audio has started:

- the **playback clock** (``PlaybackClock``) follows what the listener has queued: every piece
  of audio made plays after the one before it, from when it is made (a listener plays frames as
  they arrive). ``ahead()`` is how much is still to play. A session keeps one clock across its
  requests, so a pipeline's next sentence knows how much of the previous one is left;
- a chunk is **decoded whole** when its estimated synthesis time, with ``SAFETY`` to spare, fits
  in what is ahead; else it is **streamed** (``streamed_vocoder``: its first window is out after
  a share of that time, which the engine says from its window plan on this machine, about
  ``STREAMED_FIRST_SHARE`` where it cannot); and a request whose first chunk would come too
  late even streamed is **cut like a fast start** (its first clause or words first, no more
  words than can be heard before the audio ahead runs out: ``words_in_time``, ``chunk_plan``),
  as is a later chunk of a request that the audio before it cannot cover;
- later chunks of a request grow by what the engine can afford (``policy_for``): at a real-time
  factor ``r``, a chunk ``g`` times longer than the one before costs about ``g * r`` of its
  audio, so the growth is ``GROWTH_BUDGET / r``, within ``[MIN_GROWTH, MAX_GROWTH]``;
- the estimates follow the engine's pace under load (``ChunkSchedule.observe``): each chunk
  decoded whole is timed against its estimate.

The estimate of a text's audio comes from the engine when it can phonemize (the ONNX engine:
``PHONEMES_PER_SECOND``, since "$29.99" or "v2.3.1" say many more sounds than they have
characters), else from its characters (``CHARS_PER_SECOND``); both plus the
``UNHEARD_SECONDS`` of silence the engine makes and the synthesis layer trims. A rough figure,
which is why there is ``SAFETY``. An engine with no measured speed (the torch engine on a GPU,
~50x faster than real time) is taken as keeping up: its chunks follow the request's
``fast_start`` alone, as before.

A request with ``fast_start`` starts a new answer: the listener waits for it, whatever the clock
held (a turn that ended while its audio was still playing out, from this side's view), so the
clock starts again with it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from speech_server.chunk_plan import DEFAULT_POLICY, ChunkPolicy

# Kokoro v1.0 speaks English at ~16.8 characters and ~17.5 espeak-ng phonemes per second at
# speed 1, and its audio carries ~0.5 s of silence at the ends (measured: 32 characters, 34
# phonemes -> 2.40 s; 72 characters, 75 phonemes -> 4.78 s of audio).
CHARS_PER_SECOND = 16.0
PHONEMES_PER_SECOND = 17.5
UNHEARD_SECONDS = 0.5
SAFETY = 1.3  # the audio estimate is rough (phonemes or characters): this much to spare
STREAMED_FIRST_SHARE = 0.6  # a streamed chunk's first window, as a share of its whole decode
LISTENING_GRACE_SECONDS = 0.5  # this soon after the audio ran out, the listener still waits
GROWTH_BUDGET = 0.6  # each later chunk may cost this share of the audio before it
LOAD_SMOOTHING = 1 / 3  # how far one timed chunk moves the engine's observed pace
MAX_LOAD_FACTOR = 4.0
MIN_GROWTH, MAX_GROWTH = 1.25, 3.0
MIN_CUT_WORDS = 2  # a cut made for time never leaves a single word to be spoken alone


class PlaybackClock:
    """What the listener has queued: each piece plays after the one before, from when it is
    made (or at once, if the one before has finished)."""

    def __init__(self, now: Callable[[], float] = time.perf_counter) -> None:
        self._now = now
        self._playing_until: float | None = None

    def add(self, seconds: float) -> None:
        now = self._now()
        start = now if self._playing_until is None else max(self._playing_until, now)
        self._playing_until = start + seconds

    def stop(self) -> None:
        """Nothing more of what was queued will play (the request was cancelled)."""
        self._playing_until = None

    def ahead(self) -> float:
        """Seconds of audio still to play."""
        if self._playing_until is None:
            return 0.0
        return max(0.0, self._playing_until - self._now())

    def runs_out(self, waiting_since: float) -> float:
        """When the listener hears a gap unless more audio comes: when the queued audio ends
        (past, if it has already), or ``waiting_since`` when nothing is queued (a new answer:
        its listener has waited since then). The synthesis thread's deadline."""
        return waiting_since if self._playing_until is None else self._playing_until

    def listening(self) -> bool:
        """Whether a listener is in the middle of this audio: it is playing, or ran out only
        just now (the next piece would be heard as a stall, not as a new answer)."""
        if self._playing_until is None:
            return False
        return self._now() < self._playing_until + LISTENING_GRACE_SECONDS


AudioEstimate = Callable[[str, str, float], float]  # (text, voice, speed) -> seconds of audio
# Seconds of audio -> a streamed chunk's first audio as a share of its whole decode.
StreamedShare = Callable[[float], float]


def typical_streamed_share(audio_seconds: float) -> float:
    """What an engine that cannot say its window plan is taken to have."""
    return STREAMED_FIRST_SHARE


def audio_seconds_by_characters(text: str, voice: str, speed: float) -> float:
    """A text's audio, estimated by its characters (an engine that cannot phonemize)."""
    return (len(text) / CHARS_PER_SECOND + UNHEARD_SECONDS) / speed


def audio_seconds_by_phonemes(phonemes: int, speed: float) -> float:
    """A text's audio, estimated by its espeak-ng phonemes."""
    return (phonemes / PHONEMES_PER_SECOND + UNHEARD_SECONDS) / speed


@dataclass
class ChunkSchedule:
    """How chunks are made in time, for an engine of the given real-time factor (None: an
    engine that keeps up, made as the request's ``fast_start`` says). Call it where the engine
    runs: the estimate may phonemize, and espeak-ng is not for two threads at once.

    The real-time factor was measured on an idle machine. Under load (other processes on the
    same cores, as a local stack with a browser has) the engine is slower, so every chunk decoded
    whole is timed (``observe``) and the estimates are scaled by ``load_factor``: how much
    slower than measured the engine has lately been, never taken as faster.

    The engine is also shared: ``sharing`` sessions have a request being synthesized, and the
    synthesis thread takes their steps in turn, so a chunk is ready after about ``sharing``
    times its own engine time. Later chunks then grow more slowly (the engine "falls behind"
    for each of them).
    """

    real_time_factor: float | None
    estimate: AudioEstimate = field(default=audio_seconds_by_characters)
    # The engine's own (``KokoroOnnxEngine.streamed_first_share``): on a slower CPU a short
    # chunk's window plan is one window, and streaming it brings nothing forward.
    streamed_share: StreamedShare = field(default=typical_streamed_share)
    load_factor: float = 1.0
    sharing: int = 1

    def pace(self) -> float | None:
        """Engine-seconds per second of audio lately, for one session alone (None: unmeasured)."""
        if self.real_time_factor is None:
            return None
        return self.real_time_factor * self.load_factor

    @property
    def policy(self) -> ChunkPolicy:
        pace = self.pace()
        return policy_for(None if pace is None else pace * max(1, self.sharing))

    def synthesis_seconds(self, text: str, voice: str, speed: float) -> float:
        """Estimated engine time to make ``text`` whole, at the engine's recent pace. Not
        scaled by ``sharing``: streaming a chunk adds engine work (its first window decoded
        twice), which a shared engine can least afford, and does not shorten the wait for the
        other sessions' steps (bench load, 4 clients: 3.61 audio s/s whole, 2.71 streamed)."""
        return (self.pace() or 0.0) * self.estimate(text, voice, speed)

    def observe(self, text: str, voice: str, speed: float, seconds: float) -> None:
        """A chunk decoded whole took ``seconds``: follow the engine's pace (a moving average,
        so one slow chunk moves it by a third)."""
        if not self.real_time_factor:
            return
        expected = self.real_time_factor * self.estimate(text, voice, speed)
        if expected <= 0:
            return
        ratio = min(MAX_LOAD_FACTOR, max(1.0, seconds / expected))
        self.load_factor += LOAD_SMOOTHING * (ratio - self.load_factor)

    def streams(self, chunk: str, voice: str, speed: float, clock: PlaybackClock) -> bool:
        """Whether ``chunk`` must come a window at a time: made whole, it would not be ready
        before the audio ahead of it has played."""
        if self.real_time_factor is None or not clock.listening():
            return False
        return SAFETY * self.synthesis_seconds(chunk, voice, speed) > clock.ahead()

    def needs_fast_start(
        self, first_chunk: str, voice: str, speed: float, clock: PlaybackClock
    ) -> bool:
        """Whether a request's first chunk would come too late even streamed: then it is cut
        short like a fast start."""
        if self.real_time_factor is None or not clock.listening():
            return False
        return SAFETY * self.first_audio_seconds(first_chunk, voice, speed) > clock.ahead()

    def first_audio_seconds(self, chunk: str, voice: str, speed: float) -> float:
        """Estimated engine time to ``chunk``'s first audio, streamed."""
        audio = self.estimate(chunk, voice, speed)
        return self.streamed_share(audio) * (self.pace() or 0.0) * audio

    def words_in_time(
        self, text: str, voice: str, speed: float, clock: PlaybackClock, most: int
    ) -> int:
        """How many of ``text``'s first words (at most ``most``, at least ``MIN_CUT_WORDS``)
        can be heard before the audio ahead runs out: the length of a cut made because the
        listener would otherwise wait (a fast start's ``first_max_words``). On a CPU twice as
        slow as this one, five words after a three-word first chunk leave a silence."""
        words = text.split()
        ahead = clock.ahead()
        for count in range(min(most, len(words)), MIN_CUT_WORDS, -1):
            head = " ".join(words[:count])
            if SAFETY * self.first_audio_seconds(head, voice, speed) <= ahead:
                return count
        return MIN_CUT_WORDS


def policy_for(real_time_factor: float | None) -> ChunkPolicy:
    """The chunk plan's growth for an engine of this real-time factor."""
    if real_time_factor is None or real_time_factor <= 0:
        return DEFAULT_POLICY
    growth = min(MAX_GROWTH, max(MIN_GROWTH, GROWTH_BUDGET / real_time_factor))
    return replace(DEFAULT_POLICY, growth=round(growth, 2))
