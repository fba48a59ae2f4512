"""``voicewire bench bargein`` records the agent's answer for its echo turns: a turn that ends
without audio (a failed turn on a loaded machine) is asked again, at most RECORD_TRIES times in
all, each failure said; the last one's error is raised."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from voicewire_tools.bench import bargein


def test_a_failed_recording_is_asked_again_and_said(monkeypatch):
    outcomes = [bargein.NoAnswerAudio("no audio (speech_failed)"), np.ones(3, np.float32)]

    async def record(url: str, seconds: float):
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    monkeypatch.setattr(bargein, "record_answer", record)
    said: list[str] = []
    audio = asyncio.run(bargein.recorded_answer("ws://x", 1.0, said.append))
    assert audio.tolist() == [1.0, 1.0, 1.0]
    assert said == ["no audio (speech_failed); asking again"]


def test_it_gives_up_after_record_tries(monkeypatch):
    calls: list[int] = []

    async def record(url: str, seconds: float):
        calls.append(1)
        raise bargein.NoAnswerAudio(f"no audio, try {len(calls)}")

    monkeypatch.setattr(bargein, "record_answer", record)
    said: list[str] = []
    with pytest.raises(bargein.NoAnswerAudio, match="try 3"):
        asyncio.run(bargein.recorded_answer("ws://x", 1.0, said.append))
    assert len(calls) == bargein.RECORD_TRIES == 3 and len(said) == 2
