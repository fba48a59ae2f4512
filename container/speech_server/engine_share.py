"""How many answers one engine speaks at once, and whether a new one fits.

Each session that is speaking (audio still playing for its listener, or a request of it being
synthesized) needs ``real_time_factor`` engine-seconds for each second of its audio. Past
``max_load`` engine-seconds per second in all, every listener would run out of audio: a new
answer is then refused at its first request, with ``speech_busy`` and the reason, before anything
of it is made, rather than admitted to time out with the others (issue 43: 16 clients on one
2-core CPU server ended 30 of 48 turns ``turn_timed_out``). An answer already speaking is never
cut off: only a new answer (a fast-start request on a session that is not speaking) is weighed,
and never one alone on the engine.

``max_load`` above 1 counts on answers not all being synthesized at the same moment (a turn's
text arrives at the LLM's pace, and between its chunks its session costs the engine nothing);
``VOICEWIRE_MAX_ENGINE_LOAD`` sets it, ``bench load`` measures what it buys. The pace is the
caller's (``Synthesizer.pace``): the engine's measured real-time factor followed under load, or,
for an engine that measured none (the torch engine on a GPU), the pace observed once it has made
a few seconds of audio; before that, nothing is refused.
"""

from __future__ import annotations

import os
import weakref
from collections import Counter

from speech_server.chunk_schedule import PlaybackClock

DEFAULT_MAX_ENGINE_LOAD = 1.5


def max_engine_load_from_env() -> float:
    raw = os.environ.get("VOICEWIRE_MAX_ENGINE_LOAD")
    if not raw:
        return DEFAULT_MAX_ENGINE_LOAD
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"VOICEWIRE_MAX_ENGINE_LOAD={raw!r} is not a number") from None
    if value <= 0:
        raise ValueError(f"VOICEWIRE_MAX_ENGINE_LOAD={raw!r} must be above 0")
    return value


def begins_answer(fast_start: bool, starts_answer: bool | None) -> bool:
    """Whether a request begins a new answer, the only kind weighed: as the client says
    (``starts_answer``), else a fast-start request does."""
    return fast_start if starts_answer is None else starts_answer


class EngineBusy(Exception):
    """A new answer the engine cannot speak in time: refused before any of it is made."""


class EngineShare:
    """The sessions (each known by its playback clock) the engine is speaking for."""

    def __init__(self, max_load: float = DEFAULT_MAX_ENGINE_LOAD) -> None:
        self.max_load = max_load
        self._producing: Counter[PlaybackClock] = Counter()
        self._seen: weakref.WeakSet[PlaybackClock] = weakref.WeakSet()
        self.refused = 0

    def started(self, clock: PlaybackClock) -> None:
        """A request of ``clock``'s session is being synthesized."""
        self._producing[clock] += 1
        self._seen.add(clock)

    def finished(self, clock: PlaybackClock) -> None:
        self._producing[clock] -= 1
        if self._producing[clock] <= 0:
            del self._producing[clock]

    def producing(self) -> int:
        """Sessions with a request being synthesized now."""
        return len(self._producing)

    def speaking(self, excluding: PlaybackClock | None = None) -> int:
        """Sessions being synthesized for or with audio still playing."""
        return sum(
            1
            for clock in list(self._seen)
            if clock is not excluding and (clock in self._producing or clock.listening())
        )

    def admit(self, clock: PlaybackClock, real_time_factor: float | None) -> None:
        """``EngineBusy`` if a new answer on ``clock``'s session would take the engine past
        ``max_load``; else nothing."""
        if not real_time_factor:
            return
        if clock in self._producing or clock.listening():
            # Its session is speaking already: a long later sentence cut early, a filler, or a
            # new answer in place of the one playing; none adds a session to the engine's load.
            return
        others = self.speaking(excluding=clock)
        if others == 0:
            return  # alone, an answer is served however slow the engine: refusing helps no one
        load = (others + 1) * real_time_factor
        if load > self.max_load:
            self.refused += 1
            raise EngineBusy(
                f"the speech engine is speaking {others} other answers; one more would need "
                f"{load:.2f} engine-seconds per second of audio (at most {self.max_load:g}): "
                "ask again in a moment"
            )
