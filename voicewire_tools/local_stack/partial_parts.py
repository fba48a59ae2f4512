"""Where the local SageMaker runtime cuts a container frame into ``PARTIAL`` response parts.

SageMaker may deliver one WebSocket frame of the container as several ``ResponsePayloadPart``
events, all but the last marked ``CompletionState: PARTIAL``, and does not join them for its
caller (the API model's ``CompletionState`` header; AWS does not say when it cuts). A reader that
only ever saw whole frames locally would break on AWS the first time a frame arrives cut, so the
local runtime cuts them, by default at random:

- ``RandomCuts``: each frame is left whole or cut at random bytes into 2 or more parts, with
  1-byte parts, cuts inside a multi-byte UTF-8 character and cuts next to each other all likely.
  It is seeded: the runtime logs the seed when it starts, and ``fragment_seed`` (or
  ``VOICEWIRE_FRAGMENT_SEED``, which the test run prints in its header) replays a run's cuts
  (each stream's cuts follow from the seed and the stream's number in its runtime);
- ``EveryNBytes``: every ``n`` bytes (deterministic, for tests that count parts);
- ``NoCuts``: whole frames (still cut at the size limit, as AWS must).

Every cutter also cuts at ``max_part_bytes`` (``sagemaker_limits.MAX_RESPONSE_PART_BYTES``).
"""

from __future__ import annotations

import functools
import itertools
import os
import random
import secrets
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

# How often a frame is left whole, and how many cuts a cut frame gets at most: enough to cut
# every kind of frame many ways over a test run, few enough that a 9,600-byte audio frame does
# not become hundreds of events.
WHOLE_FRAME_PROBABILITY = 0.3
MAX_RANDOM_CUTS = 6
FRAGMENT_SEED_ENV = "VOICEWIRE_FRAGMENT_SEED"


@functools.cache
def process_seed() -> int:
    """The seed of random cuts when none is given: ``$VOICEWIRE_FRAGMENT_SEED``, or one drawn
    once per process (so the test run's header and every runtime it starts agree)."""
    value = os.environ.get(FRAGMENT_SEED_ENV, "").strip()
    if not value:
        return secrets.randbits(32)
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{FRAGMENT_SEED_ENV} must be an integer, not {value!r}") from None


class Cutter(Protocol):
    def cuts(self, size: int) -> list[int]:
        """Offsets strictly between 0 and ``size`` where a frame of ``size`` bytes is cut,
        ascending; none for a frame sent as one part."""
        ...


@dataclass(frozen=True)
class NoCuts:
    def cuts(self, size: int) -> list[int]:
        return []


@dataclass(frozen=True)
class EveryNBytes:
    n: int

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError("a part has at least 1 byte")

    def cuts(self, size: int) -> list[int]:
        return list(range(self.n, size, self.n))


@dataclass
class RandomCuts:
    """Random cut points from a seeded generator (one per stream: see ``for_stream``)."""

    rng: random.Random

    def cuts(self, size: int) -> list[int]:
        if size < 2 or self.rng.random() < WHOLE_FRAME_PROBABILITY:
            return []
        points: set[int] = set()
        for _ in range(self.rng.randint(1, MAX_RANDOM_CUTS)):
            points.add(self._point(size, points))
        return sorted(points)

    def _point(self, size: int, taken: set[int]) -> int:
        """Uniform half the time; otherwise where readers break most: 1 byte from either end,
        or right next to a cut already made (a 1-byte part in the middle)."""
        roll = self.rng.random()
        if roll < 0.5:
            return self.rng.randint(1, size - 1)
        if roll < 0.75 or not taken:
            return self.rng.choice((1, size - 1))
        neighbour = self.rng.choice(sorted(taken)) + self.rng.choice((-1, 1))
        return min(max(neighbour, 1), size - 1)


@dataclass(frozen=True)
class FragmentPolicy:
    """How one runtime cuts container frames: ``seed`` for random cuts (``None``: whole
    frames), or every ``every_bytes``; always at ``max_part_bytes``."""

    max_part_bytes: int
    seed: int | None = None
    every_bytes: int | None = None
    _stream_numbers: Iterator[int] = field(
        default_factory=lambda: itertools.count(1), compare=False, repr=False
    )

    @classmethod
    def random(cls, max_part_bytes: int, seed: int | None = None) -> FragmentPolicy:
        """Random cuts, from ``seed`` or the process's (the runtime logs which)."""
        return cls(max_part_bytes, seed=process_seed() if seed is None else seed)

    def for_stream(self) -> Cutter:
        """The cutter of the next stream: its own generator, seeded from the policy's seed and
        the stream's number."""
        if self.every_bytes is not None:
            return EveryNBytes(self.every_bytes)
        if self.seed is None:
            return NoCuts()
        # A string seeds the same generator in every process (random.seed hashes it with
        # SHA-512, whatever PYTHONHASHSEED is).
        return RandomCuts(random.Random(f"{self.seed}/{next(self._stream_numbers)}"))

    def describe(self) -> str:
        if self.every_bytes is not None:
            return f"every {self.every_bytes} bytes"
        if self.seed is None:
            return f"off (whole frames, cut only over {self.max_part_bytes} bytes)"
        return f"at random, fragment_seed={self.seed}"


def pieces(data: bytes, cuts: Sequence[int], max_part_bytes: int) -> list[tuple[bytes, bool]]:
    """``data`` as (piece, is_last) pairs: cut at ``cuts``, and wherever a piece would be
    longer than ``max_part_bytes``. An empty frame is one empty, last piece."""
    bounds = [0, *cuts, len(data)]
    result: list[bytes] = []
    for start, end in itertools.pairwise(bounds):
        result.extend(
            data[offset : min(offset + max_part_bytes, end)]
            for offset in range(start, end, max_part_bytes)
        )
    if not result:
        result = [data]
    return [(piece, index == len(result) - 1) for index, piece in enumerate(result)]
