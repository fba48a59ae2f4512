"""What Bedrock's ``converse_stream`` says, event by event: text deltas, and the tool calls the
model asks for.

``resp["stream"]`` yields one-key dicts: ``messageStart``, ``contentBlockStart`` (``start`` holds
``toolUse {toolUseId, name}`` when a tool call opens), ``contentBlockDelta`` (``delta`` is
``text``, ``toolUse {input: "<JSON fragment>"}``, ``reasoningContent`` or ``citation``),
``contentBlockStop``, ``messageStop`` (``stopReason``: ``tool_use`` when the model waits for
tool results), ``metadata``. Text deltas are spoken; a tool call is announced the moment its
block opens (``ToolUseOpened``: the turn speaks the preamble then, before the input is written)
and handed over whole at its block's stop (``ToolUseRequest``); ``LlmResult.content`` keeps the
assistant message's blocks for the next request and the history. An error event, or botocore's
``EventStreamError`` for one, is an ``LlmError`` (``functions.adapters.llm_errors``).

Plain iteration, no I/O of its own: ``functions.adapters.llm`` runs it on a reading thread.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import EventStreamError

from functions.adapters.llm_errors import STREAM_EXCEPTIONS, llm_error


@dataclass
class LlmResult:
    """What the stream said about itself once it ended."""

    stop_reason: str | None = None
    usage: dict[str, int] = field(default_factory=dict)
    text: str = ""
    # The assistant message's content blocks by ``contentBlockIndex``: ``{"text": ...}`` or
    # ``{"toolUse": {"toolUseId", "name", "input"}}`` (the input once its block stopped).
    blocks: dict[int, dict[str, Any]] = field(default_factory=dict)

    @property
    def content(self) -> list[dict[str, Any]]:
        """The assistant message's content, in block order, as the next request must carry it
        (a tool call still being written is left out: it has no input yet)."""
        return [
            block
            for _, block in sorted(self.blocks.items())
            if "text" in block or "input" in block.get("toolUse", {})
        ]


@dataclass(frozen=True)
class ToolUseOpened:
    """A tool call's block has opened: its name is known, its input not yet."""

    tool_use_id: str
    name: str


@dataclass(frozen=True)
class ToolUseRequest:
    """A tool call the model has finished writing. ``problem``: why its input is unusable (not
    a JSON object); the call is still answered, with an error result."""

    tool_use_id: str
    name: str
    input: dict[str, Any]
    problem: str | None = None


ModelEvent = str | ToolUseOpened | ToolUseRequest


def text_deltas(events: Iterator[dict[str, Any]], result: LlmResult) -> Iterator[str]:
    """The text of every ``contentBlockDelta.delta.text``, in order; fills ``result``."""
    for item in model_events(events, result):
        if isinstance(item, str):
            yield item


def model_events(events: Iterator[dict[str, Any]], result: LlmResult) -> Iterator[ModelEvent]:
    """Text deltas and tool calls, in stream order; fills ``result`` (its text, its blocks, the
    stop reason and usage)."""
    tool_inputs: dict[int, list[str]] = {}  # a tool block's input fragments, until it stops
    try:
        for event in events:
            if "contentBlockStart" in event:
                start = event["contentBlockStart"]
                tool = start.get("start", {}).get("toolUse")
                if tool:
                    index = int(start.get("contentBlockIndex", 0))
                    call = {"toolUseId": tool["toolUseId"], "name": tool["name"]}
                    result.blocks[index] = {"toolUse": call}
                    tool_inputs[index] = []
                    yield ToolUseOpened(call["toolUseId"], call["name"])
            elif "contentBlockDelta" in event:
                block = event["contentBlockDelta"]
                index = int(block.get("contentBlockIndex", 0))
                delta = block.get("delta", {})
                if text := delta.get("text"):
                    result.text += text
                    held = result.blocks.setdefault(index, {"text": ""})
                    if "text" in held:
                        held["text"] += text
                    yield text
                elif "toolUse" in delta and index in tool_inputs:
                    tool_inputs[index].append(delta["toolUse"].get("input", ""))
            elif "contentBlockStop" in event:
                index = int(event["contentBlockStop"].get("contentBlockIndex", 0))
                if index in tool_inputs:
                    yield _finished_call(result.blocks[index]["toolUse"], tool_inputs.pop(index))
            elif "messageStop" in event:
                result.stop_reason = event["messageStop"].get("stopReason")
            elif "metadata" in event:
                result.usage = dict(event["metadata"].get("usage", {}))
            else:
                for name in STREAM_EXCEPTIONS:
                    if name in event:
                        raise llm_error(name, event[name].get("message", name))
    except EventStreamError as error:
        details = error.response.get("Error", {})
        raise llm_error(details.get("Code", ""), details.get("Message", str(error))) from error


def _finished_call(call: dict[str, Any], fragments: list[str]) -> ToolUseRequest:
    """The tool call whose input fragments are all in; ``call`` gets its input (an object, as
    the next request must carry it, ``{}`` when the model wrote none or no JSON object)."""
    written = "".join(fragments).strip()
    problem = None
    try:
        parsed = json.loads(written) if written else {}
    except ValueError:
        parsed, problem = {}, f"the tool input is not JSON: {written[:80]!r}"
    if not isinstance(parsed, dict):
        parsed, problem = {}, "the tool input is not a JSON object"
    call["input"] = parsed
    return ToolUseRequest(call["toolUseId"], call["name"], parsed, problem)
