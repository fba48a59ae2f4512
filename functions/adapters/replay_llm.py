"""A stand-in for Bedrock that replays ``converse_stream`` recordings at their recorded pace.

The local default LLM (no AWS account): ``ReplayBedrockClient.converse_stream`` returns
``{"stream": ...}`` yielding the recording's events, each at its ``at_ms`` after the call, so the
pipeline's adapter code runs exactly as against Bedrock. Which recording answers a prompt: the
first (in file-name order) one of whose ``match`` words occurs in the prompt, lower-cased; else
``default.json``. ``events/llm/README.md`` lists the recordings and how they were made. An error
event in a recording (``throttlingException``, ...) is raised as botocore's ``EventStreamError``
at its place in the stream, as a real ``EventStream`` raises it.

A tool recording calls a tool in its first message. The request that brings the tool's result
back (a user message of ``toolResult`` blocks after the prompt) is answered by its
``after_tool`` message, or ``after_tool_error`` when the result is an error, with the
placeholders of its text filled from that result: ``{result.a.0.b}`` is a path into the result's
JSON, ``{error}`` its text. That is the one way the replay is not a recording: it reads what it
is sent, as a model would.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from botocore.exceptions import EventStreamError

RECORDINGS_DIR = Path(__file__).resolve().parents[2] / "events" / "llm"


Events = tuple[tuple[float, dict[str, Any]], ...]  # (seconds after the call, event)
_PLACEHOLDER = re.compile(r"\{(result(?:\.[\w-]+)*|error)\}")


def _events(items: list[dict[str, Any]]) -> Events:
    return tuple((item["at_ms"] / 1000, item["event"]) for item in items)


@dataclass(frozen=True)
class Recording:
    name: str
    match: tuple[str, ...]
    events: Events
    after_tool: Events = ()  # answers the tool's result
    after_tool_error: Events = ()  # answers an error result

    @classmethod
    def load(cls, path: Path) -> Recording:
        data = json.loads(path.read_text(encoding="utf-8"))
        return cls(
            path.stem,
            tuple(word.lower() for word in data.get("match", [])),
            _events(data["events"]),
            _events(data.get("after_tool", [])),
            _events(data.get("after_tool_error", [])),
        )

    def answer_to(self, result: dict[str, Any]) -> Events:
        """The message answering ``result`` (a ``toolResult``), its placeholders filled."""
        events = self.after_tool_error if result.get("status") == "error" else self.after_tool
        if not events:
            raise ValueError(f"the recording {self.name!r} has no answer to a tool result")
        content = result.get("content") or [{}]
        reply = content[0].get("json", content[0].get("text", ""))
        return tuple((at, _filled(event, reply)) for at, event in events)

    @property
    def text(self) -> str:
        return "".join(
            event["contentBlockDelta"]["delta"].get("text", "")
            for _, event in self.events
            if "contentBlockDelta" in event
        )


class ReplayBedrockClient:
    def __init__(
        self,
        recordings_dir: Path = RECORDINGS_DIR,
        pace: float = 1.0,
        requests: list[dict[str, Any]] | None = None,
    ) -> None:
        """``pace`` scales the recorded delays (0 replays instantly, for tests of logic only);
        ``requests``: where to keep the requests it is sent (a list several clients share)."""
        paths = sorted(recordings_dir.glob("*.json"))
        self.recordings = [Recording.load(path) for path in paths]
        self.default = next(r for r in self.recordings if r.name == "default")
        self.pace = pace
        self.requests: list[dict[str, Any]] = [] if requests is None else requests

    def choose(self, prompt: str) -> Recording:
        lowered = prompt.lower()
        for recording in self.recordings:
            if any(word in lowered for word in recording.match):
                return recording
        return self.default

    def converse_stream(self, **request: Any) -> dict[str, Any]:
        self.requests.append(request)
        prompt, results = prompt_and_results(request["messages"])
        recording = self.choose(prompt)
        events = recording.answer_to(results[-1]) if results else recording.events
        return {"stream": self._play(events, time.monotonic())}

    def _play(self, events: Events, started: float) -> Iterator[dict[str, Any]]:
        for at, event in events:
            delay = started + at * self.pace - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            (name,) = event
            if name.endswith("Exception"):
                # An error inside the stream: botocore's EventStream raises it while it is read.
                message = event[name].get("message", name)
                error = {"Error": {"Code": name, "Message": message}}
                raise EventStreamError(error, "ConverseStream")
            yield event


def prompt_and_results(messages: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """The user's prompt (the text of the last user message that has text) and the tool
    results sent after it, in order."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        texts = [block["text"] for block in message["content"] if "text" in block]
        if message["role"] == "user" and texts:
            results = [
                block["toolResult"]
                for later in messages[index + 1 :]
                if later["role"] == "user"
                for block in later["content"]
                if "toolResult" in block
            ]
            return " ".join(texts), results
    return "", []


def _filled(event: dict[str, Any], reply: Any) -> dict[str, Any]:
    """``event`` with the placeholders of its text delta filled from the tool's ``reply``."""
    text = event.get("contentBlockDelta", {}).get("delta", {}).get("text")
    if text is None or "{" not in text:
        return event

    def value(match: re.Match[str]) -> str:
        if match.group(1) == "error":
            return str(reply).rstrip(".")
        found: Any = reply
        for part in match.group(1).split(".")[1:]:
            try:
                found = found[int(part)] if isinstance(found, list) else found[part]
            except (KeyError, IndexError, ValueError, TypeError):
                return "(not in the result)"
        return str(found)

    delta = {**event["contentBlockDelta"], "delta": {"text": _PLACEHOLDER.sub(value, text)}}
    return {"contentBlockDelta": delta}
