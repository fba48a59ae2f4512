"""One CPU speech server's capacity, taken from the load bench's measured curve.

``voicewire bench load --json PATH`` measures one local stack (one speech server, one engine) with
K clients at once, each asking ``--turns`` questions back to back, a new connection each turn:
first audio p50/p95, turns refused early (``speech_busy``), turns timed out, and the audio the
stack made per wall second. ``bench capacity`` reads such a curve (``DEFAULT_CURVE``: the one the
docs cite, measured on this project's 2-core AMD EPYC; ``--load-curve`` another) instead of a
rule of thumb from the engine's quiet real-time factor:

- ``LoadCurve.served_at_once``: the most clients at once with no turn refused or timed out,
  what one CPU server makes in time, measured;
- ``CpuServer.from_curve``: the model's two inputs, both from the curve. The engine time per
  second of audio is the inverse of the best audio throughput the stack reached (it includes
  what the worker, the local runtime and the gateway take from the same cores, which the
  engine's quiet figure does not). The fixed part of first audio (the connection, the worker,
  the relay) is what the single client's p50 has over the model without it;
- ``simulate_clients``: the load bench's pattern run through a model of the server (SimPy): K
  clients at once, each turn a recorded answer's chunks at the LLM's pace, one synthesis thread
  serving the earliest deadline first (``speech_server.deadline_executor``), a chunk the
  listener waits for streamed (its first window, then the whole decode, as
  ``speech_server.streamed_vocoder`` does), and a new answer refused past ``max_load``
  (``speech_server.engine_share``).

Run against the same curve it was fed from, the model's p50/p95 and refusals beside the
measured ones say how far the capacity model can be trusted for a CPU instance; the GPU
instances of ``bench capacity`` use the same scheduling, with the seed's figures for the engine.
"""

from __future__ import annotations

import json
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import simpy

from speech_server.chunk_schedule import LISTENING_GRACE_SECONDS, SAFETY, STREAMED_FIRST_SHARE
from speech_server.engine_share import DEFAULT_MAX_ENGINE_LOAD

DEFAULT_CURVE = (
    Path(__file__).resolve().parents[2] / "bench" / "curves" / "load-amd-epyc-2-cores.json"
)
# A streamed chunk's engine time against its whole decode: its first window, then the whole
# decode (bench engine --part streamed, 5 words, one core: 604 ms against 406; 1.38-1.62x over
# the three texts and two machines measured).
STREAMED_TOTAL_SHARE = 1.5
# The first window's audio, as a share of its chunk's: what plays while the whole decode is made
# (the window plan's cut: 68 of 202 frames on this machine quiet, 102 on one 1.6x slower).
FIRST_WINDOW_AUDIO_SHARE = 0.4


@dataclass(frozen=True)
class Chunk:
    """One piece of speech a turn asks for: when its text is ready (from the LLM's start), how
    long it sounds, and whether it is the first chunk of a request (the listener waits). What
    ``capacity`` measures from the recordings and both of its simulations replay."""

    ready_s: float
    audio_s: float
    request: int


@dataclass(frozen=True)
class LoadPoint:
    """One row of ``bench load``: K clients at once."""

    clients: int
    turns: int
    first_audio_p50_s: float | None
    first_audio_p95_s: float | None
    refused: int
    timed_out: int
    audio_s_per_wall_s: float
    wall_s: float  # the whole load: every client's turns, back to back

    @property
    def turn_s(self) -> float:
        """How long one client's turn took at this load, from its question to its last frame."""
        return self.wall_s * self.clients / self.turns


@dataclass(frozen=True)
class LoadCurve:
    """A ``bench load --json`` file: its rows, and the machine it was measured on."""

    points: tuple[LoadPoint, ...]
    machine: dict[str, Any]
    source: str
    turns_per_client: int = 3

    @classmethod
    def from_json(cls, path: Path) -> LoadCurve:
        try:
            data = json.loads(path.read_text())
            points = tuple(
                LoadPoint(
                    clients=int(row["clients"]),
                    turns=int(row["turns"]),
                    first_audio_p50_s=_seconds(row["first_audio_ms"]["p50"]),
                    first_audio_p95_s=_seconds(row["first_audio_ms"]["p95"]),
                    refused=int(row.get("refused", 0)),
                    timed_out=int(row.get("timed_out", 0)),
                    audio_s_per_wall_s=float(row["audio_seconds_per_wall_second"]),
                    wall_s=float(row["wall_seconds"]),
                )
                for row in data["loads"]
            )
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise ValueError(f"{path} is not a bench load --json file: {error!r}") from None
        if not points or points[0].first_audio_p50_s is None:
            raise ValueError(f"{path}: no load with first audio measured")
        return cls(
            tuple(sorted(points, key=lambda p: p.clients)),
            data.get("machine", {}),
            str(path),
            int(data.get("turns_per_client", 3)),
        )

    def single(self) -> LoadPoint:
        """The fewest clients measured (one, in the bench's default run)."""
        return self.points[0]

    def served_at_once(self) -> LoadPoint | None:
        """The load with the most clients at once and every turn spoken: none refused, none
        timed out."""
        served = [p for p in self.points if p.refused == 0 and p.timed_out == 0]
        return max(served, key=lambda p: p.clients, default=None)

    def conversations_per_server(self, turn_cycle_s: float) -> float:
        """What ``served_at_once`` holds of conversations that also listen and think: a bench
        client asks again as soon as its last frame is sent, so it asks the engine for
        ``turn_cycle_s`` over its measured turn time more audio than a conversation does."""
        served = self.served_at_once()
        return 0.0 if served is None else served.clients * turn_cycle_s / served.turn_s


@dataclass(frozen=True)
class CpuServer:
    """The model of one CPU speech server."""

    engine_s_per_audio_s: float
    fixed_s: float  # first audio's part that is neither the LLM nor the engine
    max_load: float = DEFAULT_MAX_ENGINE_LOAD
    sources: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_curve(
        cls,
        curve: LoadCurve,
        answers: Sequence[Sequence[Chunk]],
        max_load: float = DEFAULT_MAX_ENGINE_LOAD,
    ) -> CpuServer:
        best = max(p.audio_s_per_wall_s for p in curve.points)
        unfixed = cls(1 / best, 0.0, max_load)
        single = curve.single()
        modelled = simulate_clients(unfixed, answers, single.clients, curve.turns_per_client)
        measured = single.first_audio_p50_s or 0.0
        return cls(
            engine_s_per_audio_s=1 / best,
            fixed_s=max(0.0, measured - modelled.first_audio_p50_s),
            max_load=max_load,
            sources={
                "engine_s_per_audio_s": f"1 / the best audio throughput of {curve.source} "
                f"({best:.2f} audio s per wall s)",
                "fixed_s": f"the single client's p50 ({measured:.2f} s) over the model's",
            },
        )


@dataclass(frozen=True)
class ClientsResult:
    clients: int
    turns: int
    first_audio_p50_s: float
    first_audio_p95_s: float
    refused: int


def simulate_clients(
    server: CpuServer,
    answers: Sequence[Sequence[Chunk]],
    clients: int,
    turns: int = 3,
    seed: int = 7,
) -> ClientsResult:
    """``clients`` at once, each ``turns`` turns back to back, on one modelled server."""
    env = simpy.Environment()
    engine = simpy.PriorityResource(env, capacity=1)
    rng = random.Random(seed)
    # Per turn: the requests being made, and when its listener's audio runs out (None: nothing
    # queued yet), as the server's EngineShare and PlaybackClock see a session.
    producing: dict[int, int] = {}
    playing_until: dict[int, float | None] = {}
    first_audio: list[float] = []
    refused = 0

    def speaking(turn_id: int) -> bool:
        until = playing_until[turn_id]
        return producing[turn_id] > 0 or (
            until is not None and env.now < until + LISTENING_GRACE_SECONDS
        )

    def step(seconds: float, deadline: float) -> Any:
        with engine.request(priority=deadline) as slot:
            yield slot
            yield env.timeout(seconds)

    def turn(turn_id: int, chunks: Sequence[Chunk]) -> Any:
        nonlocal refused
        start = env.now
        producing[turn_id], playing_until[turn_id] = 0, None
        for index, chunk in enumerate(chunks):
            ready = start + chunk.ready_s
            if env.now < ready:
                yield env.timeout(ready - env.now)
            if index == 0:
                others = sum(1 for t in producing if t != turn_id and speaking(t))
                if others and (others + 1) * server.engine_s_per_audio_s > server.max_load:
                    refused += 1
                    return
            whole = chunk.audio_s * server.engine_s_per_audio_s
            until = playing_until[turn_id]
            ahead = 0.0 if until is None else max(0.0, until - env.now)
            # The deadline (PlaybackClock.runs_out): when the queued audio ends, or since when
            # the listener has waited for the first.
            deadline = ready if until is None else until
            producing[turn_id] += 1
            # Streamed when the listener would otherwise wait (chunk_schedule's rule): its
            # first window leaves first, then the whole decode, each a step of its own.
            if ahead < whole * SAFETY:
                yield env.process(step(whole * STREAMED_FIRST_SHARE, deadline))
                heard = env.now + server.fixed_s
                rest = whole * (STREAMED_TOTAL_SHARE - STREAMED_FIRST_SHARE)
                # Due when the first window's audio has played.
                runs_out = max(until or heard, heard) + chunk.audio_s * FIRST_WINDOW_AUDIO_SHARE
                _queue(playing_until, turn_id, heard, chunk.audio_s)
                yield env.process(step(rest, runs_out))
            else:
                yield env.process(step(whole, deadline))
                heard = env.now + server.fixed_s
                _queue(playing_until, turn_id, heard, chunk.audio_s)
            producing[turn_id] -= 1
            if index == 0:
                first_audio.append(heard - start)
        # The client asks its next question when the turn's last frame is sent (turn_end).

    def client(number: int) -> Any:
        for turn_number in range(turns):
            chunks = answers[(number + turn_number) % len(answers)]
            yield env.process(turn(number * turns + turn_number, chunks))
            yield env.timeout(rng.uniform(0.0, 0.05))  # a new connection for the next turn

    for number in range(clients):
        env.process(client(number))
    env.run()
    ordered = sorted(first_audio)
    return ClientsResult(
        clients=clients,
        turns=clients * turns,
        first_audio_p50_s=statistics.median(ordered) if ordered else 0.0,
        first_audio_p95_s=ordered[max(0, round(0.95 * len(ordered)) - 1)] if ordered else 0.0,
        refused=refused,
    )


def _queue(
    playing_until: dict[int, float | None], turn_id: int, heard: float, audio_s: float
) -> None:
    """The chunk's audio plays after what is queued, from when it is heard."""
    until = playing_until[turn_id]
    playing_until[turn_id] = max(until or heard, heard) + audio_s


def compare(
    curve: LoadCurve, server: CpuServer, answers: Sequence[Sequence[Chunk]]
) -> list[dict[str, Any]]:
    """Each measured load beside the model's run of the same load."""
    rows = []
    for point in curve.points:
        model = simulate_clients(server, answers, point.clients, curve.turns_per_client)
        rows.append(
            {
                "clients": point.clients,
                "measured": {
                    "first_audio_p50_s": point.first_audio_p50_s,
                    "first_audio_p95_s": point.first_audio_p95_s,
                    "refused": point.refused,
                    "timed_out": point.timed_out,
                },
                "model": {
                    "first_audio_p50_s": model.first_audio_p50_s,
                    "first_audio_p95_s": model.first_audio_p95_s,
                    "refused": model.refused,
                },
            }
        )
    return rows


def _seconds(ms: float | None) -> float | None:
    return None if ms is None else float(ms) / 1000
