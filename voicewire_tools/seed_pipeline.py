"""The seed article's pipeline, kept as the benchmarks' baseline (``voicewire bench ttfa``): its
sentence chunker, and no early cut of the first chunk (``SEED_CHUNKING``, which the local stack
hands to its turns for the seed's modes: ``LocalStack.use_baseline``).

The chunker:

It splits on whitespace after ``.``, ``!`` or ``?`` (``(?<=[.!?])\\s+``), returns the sentences a
fragment completed and holds back the tail; ``finish`` returns the tail. No abbreviations, no
markdown handling, no early first clause: what ``IncrementalSentenceChunker`` improves on. Never
used by the product; the pipeline runs it only when a benchmark asks for the seed's behaviour.
"""

from __future__ import annotations

import re

from functions.turn import Chunking

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


class SeedSentenceChunker:
    """``feed(fragment) -> list[str]``, ``finish() -> list[str]``, as the pipeline calls them."""

    def __init__(self, **_options: object) -> None:
        self._buffer = ""

    def feed(self, fragment: str) -> list[str]:
        self._buffer += fragment
        *complete, self._buffer = _SENTENCE_END.split(self._buffer)
        return [sentence.strip() for sentence in complete if sentence.strip()]

    def finish(self) -> list[str]:
        rest, self._buffer = self._buffer.strip(), ""
        return [rest] if rest else []


SEED_CHUNKING = Chunking(chunker_factory=SeedSentenceChunker, fast_start=False)
