"""A replayed Bedrock stream that a test holds after its first sentence, until it lets it go.

Asserting that audio starts "before the text is done" against a stream replayed at its recorded
pace asserts that this machine synthesizes a sentence faster than the recording writes the rest:
true on a fast machine, false on a slow or busy one. Held, the order is the design's alone: the
rest of the text cannot come before the test has seen what it waits for (the first audio), so a
pipeline that waited for the whole text would never speak while the stream is held.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from typing import Any

from functions.adapters.replay_llm import Events, ReplayBedrockClient

# A sentence's end followed by the next sentence's first letter: the first sentence is whole,
# whatever the chunker waits for to be sure it ended.
_FIRST_SENTENCE_DONE = re.compile(r"[.!?]\s+\S")


class HeldReplay(ReplayBedrockClient):
    """Streams as ``ReplayBedrockClient`` does, then holds once the first sentence is out."""

    def __init__(self, longest_hold_seconds: float = 60.0, **replay: Any) -> None:
        super().__init__(**replay)
        self.longest_hold_seconds = longest_hold_seconds
        self.holding = threading.Event()  # the stream reached its hold
        self._released = threading.Event()
        self.held_past_its_limit = False  # nobody released it: it went on by itself

    def release(self) -> None:
        self._released.set()

    def _play(self, events: Events, started: float) -> Iterator[dict[str, Any]]:
        text = ""
        for event in super()._play(events, started):
            yield event
            text += event.get("contentBlockDelta", {}).get("delta", {}).get("text", "")
            if not self.holding.is_set() and _FIRST_SENTENCE_DONE.search(text):
                self.holding.set()
                # The replay runs on the worker's thread (botocore's stream is read there).
                self.held_past_its_limit = not self._released.wait(self.longest_hold_seconds)
