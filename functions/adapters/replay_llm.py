"""A stand-in for Bedrock that replays ``converse_stream`` recordings at their recorded pace.

The local default LLM (no AWS account): ``ReplayBedrockClient.converse_stream`` returns
``{"stream": ...}`` yielding the recording's events, each at its ``at_ms`` after the call, so the
pipeline's adapter code runs exactly as against Bedrock. Which recording answers a prompt: the
first (in file-name order) one of whose ``match`` words occurs in the prompt, lower-cased; else
``default.json``. ``events/llm/README.md`` lists the recordings and how they were made.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RECORDINGS_DIR = Path(__file__).resolve().parents[2] / "events" / "llm"


@dataclass(frozen=True)
class Recording:
    name: str
    match: tuple[str, ...]
    events: tuple[tuple[float, dict[str, Any]], ...]  # (seconds after the call, event)

    @classmethod
    def load(cls, path: Path) -> Recording:
        data = json.loads(path.read_text(encoding="utf-8"))
        events = tuple((item["at_ms"] / 1000, item["event"]) for item in data["events"])
        return cls(path.stem, tuple(word.lower() for word in data.get("match", [])), events)

    @property
    def text(self) -> str:
        return "".join(
            event["contentBlockDelta"]["delta"].get("text", "")
            for _, event in self.events
            if "contentBlockDelta" in event
        )


class ReplayBedrockClient:
    def __init__(self, recordings_dir: Path = RECORDINGS_DIR, pace: float = 1.0) -> None:
        """``pace`` scales the recorded delays (0 replays instantly, for tests of logic only)."""
        paths = sorted(recordings_dir.glob("*.json"))
        self.recordings = [Recording.load(path) for path in paths]
        self.default = next(r for r in self.recordings if r.name == "default")
        self.pace = pace
        self.requests: list[dict[str, Any]] = []

    def choose(self, prompt: str) -> Recording:
        lowered = prompt.lower()
        for recording in self.recordings:
            if any(word in lowered for word in recording.match):
                return recording
        return self.default

    def converse_stream(self, **request: Any) -> dict[str, Any]:
        self.requests.append(request)
        content = request["messages"][-1]["content"]
        prompt = " ".join(block.get("text", "") for block in content)
        return {"stream": self._play(self.choose(prompt), time.monotonic())}

    def _play(self, recording: Recording, started: float) -> Iterator[dict[str, Any]]:
        for at, event in recording.events:
            delay = started + at * self.pace - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            yield event
