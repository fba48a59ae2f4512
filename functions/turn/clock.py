"""When a turn's firsts happened (text, sentence, audio), counted from its acceptance."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from voicewire.client_protocol import Timings


@dataclass
class TurnClock:
    accepted_at: float  # epoch seconds: timings count from the moment the turn was accepted
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
