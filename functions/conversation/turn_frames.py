"""The frames that begin and end a turn for the client, built in one place.

Every turn the client is told of begins with ``turn_start`` and ends with ``turn_end`` (an
``error`` before it when it failed), whoever ends it: the turn itself when it speaks
(``functions.turn``), or, unspoken, the message route (cancelled before it started, no worker to
run it), the worker (too late, its claim lost, a retry of a dead worker) or the AgentCore app
(it could not start). ``docs/protocol.md`` has the sequences; these builders are their one
source.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from voicewire.client_protocol import AudioFormat, ClientError, Timings, TurnEnd, TurnStart


class NamedTurn(Protocol):
    """A turn as the client knows it: a worker's job, a turn's spec."""

    @property
    def turn_id(self) -> str: ...

    @property
    def turn(self) -> int: ...

    @property
    def mode(self) -> str: ...


@dataclass(frozen=True)
class TurnName:
    """A turn named where no job or spec exists yet (the message route, the AgentCore app)."""

    turn_id: str
    turn: int
    mode: str


def turn_start(turn: NamedTurn, audio: AudioFormat | None = None) -> TurnStart:
    """``audio``: how the turn's audio comes (a spoken turn says it; an unspoken one has none)."""
    return TurnStart(
        turn_id=turn.turn_id,
        turn=turn.turn,
        mode=turn.mode,  # type: ignore[arg-type]
        audio=audio or AudioFormat(),
    )


def turn_end(
    turn: NamedTurn,
    status: str,
    timings: Timings | None = None,
    audio_bytes: int = 0,
    audio_frames: int = 0,
) -> TurnEnd:
    return TurnEnd(
        turn_id=turn.turn_id,
        status=status,  # type: ignore[arg-type]
        timings=timings or Timings(),
        audio_bytes=audio_bytes,
        audio_frames=audio_frames,
    )


def unspoken(
    turn: NamedTurn,
    status: str,
    timings: Timings | None = None,
    error: ClientError | None = None,
    announce: bool = True,
) -> list[TurnStart | ClientError | TurnEnd]:
    """A turn that ends without a word: its ``turn_start`` (unless someone already sent it:
    ``announce=False``), its ``error`` if it failed, its ``turn_end``."""
    frames: list[TurnStart | ClientError | TurnEnd] = [turn_start(turn)] if announce else []
    if error is not None:
        frames.append(error)
    frames.append(turn_end(turn, status, timings))
    return frames
