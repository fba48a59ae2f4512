"""The tools an agent may call: async Python functions with a pydantic model for their input.

A ``Tool`` is described to the model by its input model's JSON schema (Bedrock's ``toolSpec``),
and run by ``ToolRegistry.run``, which never raises for the tool's sake: bad input from the
model, an unknown tool, a failure, a timeout and a cancel each become a ``ToolOutcome`` whose
``result`` is the ``toolResult`` block the model gets back (``status: error`` with a sentence it
can say), so a turn with a broken tool still ends with an answer.

Cancellation: a tool is a coroutine and must honour ``CancelledError``. One that does not (a
blocking call in a thread) is waited for no longer than its timeout: the run returns then and
the late result is dropped with its task.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

logger = logging.getLogger(__name__)

ToolStatus = Literal["ok", "error", "timeout", "cancelled"]
DEFAULT_TOOL_TIMEOUT_SECONDS = 10.0
ToolReply = str | Mapping[str, Any]  # text, or a JSON object


@dataclass(frozen=True)
class Tool:
    """One tool: its name and description for the model, its input model, and the coroutine
    function that runs it (given the validated input, returning text or a JSON object)."""

    name: str
    description: str
    input_model: type[BaseModel]
    run: Callable[[Any], Awaitable[ToolReply]]
    timeout_seconds: float = DEFAULT_TOOL_TIMEOUT_SECONDS

    def spec(self) -> dict[str, Any]:
        """Bedrock's ``toolSpec`` for this tool."""
        schema = self.input_model.model_json_schema()
        schema.pop("title", None)
        return {
            "toolSpec": {
                "name": self.name,
                "description": self.description,
                "inputSchema": {"json": schema},
            }
        }


@dataclass(frozen=True)
class ToolOutcome:
    """How one call ended. ``result``: the ``toolResult`` content block for the model."""

    tool_use_id: str
    name: str
    status: ToolStatus
    ms: float
    result: dict[str, Any]

    @property
    def reply(self) -> Any:
        """The tool's text or JSON reply (what the client may be shown)."""
        content = self.result["toolResult"]["content"][0]
        return content.get("json", content.get("text"))


def tool_result(
    tool_use_id: str, reply: ToolReply, status: Literal["success", "error"] = "success"
) -> dict[str, Any]:
    """A ``toolResult`` block: a JSON object as ``json``, anything else as ``text``."""
    content = {"json": dict(reply)} if isinstance(reply, Mapping) else {"text": str(reply)}
    return {"toolResult": {"toolUseId": tool_use_id, "content": [content], "status": status}}


class ToolRegistry:
    """The tools a deployment offers, by name."""

    def __init__(self, tools: Iterable[Tool] = (), timeout_seconds: float | None = None) -> None:
        """``timeout_seconds``: one limit for every tool instead of each tool's own."""
        self.tools = {tool.name: tool for tool in tools}
        self.timeout_seconds = timeout_seconds

    def tool_config(self) -> dict[str, Any] | None:
        """Bedrock's ``toolConfig``; None when there are no tools."""
        if not self.tools:
            return None
        return {"tools": [tool.spec() for tool in self.tools.values()]}

    def timeout_of(self, tool: Tool) -> float:
        return self.timeout_seconds if self.timeout_seconds is not None else tool.timeout_seconds

    async def run(self, tool_use_id: str, name: str, given: Mapping[str, Any]) -> ToolOutcome:
        """Run one call to its end, whatever that is (see the module's docstring). A cancel of
        the caller cancels the tool, without waiting for it, and propagates; the caller answers
        the call with ``cancelled_outcome``, so the history keeps a result for every call."""
        started = time.perf_counter()

        def ended(status: ToolStatus, reply: ToolReply) -> ToolOutcome:
            ms = round((time.perf_counter() - started) * 1000, 1)
            result = tool_result(tool_use_id, reply, "success" if status == "ok" else "error")
            return ToolOutcome(tool_use_id, name, status, ms, result)

        tool = self.tools.get(name)
        if tool is None:
            known = ", ".join(sorted(self.tools)) or "none"
            return ended("error", f"there is no tool named {name!r} (the tools: {known})")
        try:
            arguments = tool.input_model.model_validate(dict(given))
        except ValidationError as error:
            return ended("error", f"the input is not valid: {_problems(error)}")
        task = asyncio.ensure_future(tool.run(arguments))
        try:
            done, _ = await asyncio.wait({task}, timeout=self.timeout_of(tool))
        except asyncio.CancelledError:
            task.cancel()  # not awaited either: the turn that was cut short does not wait
            task.add_done_callback(_drop_late_result)
            raise
        if not done:
            task.cancel()  # not awaited: a tool that ignores cancellation is left behind
            task.add_done_callback(_drop_late_result)
            timeout = self.timeout_of(tool)
            return ended("timeout", f"the tool did not answer within {timeout:g} s")
        error = task.exception()
        if error is not None:
            logger.warning("tool %s failed: %r", name, error)
            return ended("error", f"the tool failed: {error}")
        return ended("ok", task.result())


def cancelled_outcome(tool_use_id: str, name: str, ms: float) -> ToolOutcome:
    """The outcome of a call cut short by a cancel (the listener interrupted)."""
    reply = "the call was cancelled: the listener interrupted before it ended"
    return ToolOutcome(tool_use_id, name, "cancelled", ms, tool_result(tool_use_id, reply, "error"))


def _problems(error: ValidationError) -> str:
    """Each wrong field of the model's input, by name: what the model needs to try again."""
    parts = []
    for item in error.errors(include_url=False):
        where = ".".join(str(part) for part in item["loc"]) or "the input"
        parts.append(f"{where}: {item['msg']}")
    return "; ".join(parts)


def _drop_late_result(task: asyncio.Future[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.info("a timed-out tool failed later: %r", task.exception())
