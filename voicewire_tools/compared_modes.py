"""The four pipelines voicewire is measured against: its own and the seed's, each in bidi and
batch, on one stack (``LocalStack.use_baseline`` switches between them turn by turn).

- ``bidi``: voicewire's product: the answer spoken as it is written, its first chunk cut early;
- ``batch``: voicewire's batch: the whole answer, then one synthesis request (the speech server
  still cuts its first clause early);
- ``seed_bidi``: the seed's bidi: its regex sentence splitter (``voicewire_tools.seed_pipeline``),
  whole sentences, no early first chunk;
- ``seed_batch``: the seed's batch: the whole answer, one request, no early first chunk.

``voicewire demo`` and ``voicewire bench ttfa`` run them; what still differs from the seed's own
code is in ``voicewire_tools/bench/ttfa.py``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ComparedMode:
    baseline: str  # the worker's pipeline: "voicewire" or "seed"
    ask_mode: str  # the client's mode: "bidi" or "batch"
    title: str  # in a sentence: "the seed's bidi"


MODES = {
    "seed_batch": ComparedMode("seed", "batch", "the seed's batch"),
    "seed_bidi": ComparedMode("seed", "bidi", "the seed's bidi"),
    "batch": ComparedMode("voicewire", "batch", "voicewire's batch"),
    "bidi": ComparedMode("voicewire", "bidi", "voicewire's bidi"),
}
SEED_MODES = tuple(name for name, mode in MODES.items() if mode.baseline == "seed")


def parse_modes(value: str) -> tuple[str, ...]:
    """``bidi,seed_bidi,...`` as a tuple of known names, in the order given (argparse type)."""
    names = tuple(dict.fromkeys(name.strip() for name in value.split(",") if name.strip()))
    unknown = [name for name in names if name not in MODES]
    if unknown or not names:
        raise ValueError(f"unknown modes {unknown}; choose from {', '.join(MODES)}")
    return names
