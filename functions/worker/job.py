"""What the message route hands the worker: one turn to run (the async invocation's payload)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from voicewire.client_protocol import AudioDelivery, TextDeltas


class WorkerJob(BaseModel):
    connection_id: str
    turn_id: str
    turn: int
    mode: Literal["bidi", "batch", "speak"]
    prompt: str | None = None
    text: str | None = None
    voice: str | None = None
    speed: float = 1.0
    accepted_at: float  # epoch seconds when the message route accepted the turn
    callback_url: str
    audio: AudioDelivery = "binary"
    text_deltas: TextDeltas = "live"
    word_timings: bool = True  # words frames for the turn's audio
    # The turn this one cancelled (a barge-in): its history is waited for (briefly) before
    # this turn reads the history, so the answer knows what the listener heard of it.
    replaces: str | None = None
