"""The agent's tools: the registry (``registry``) and the tools a deployment can offer, by name.

To offer a tool of your own: write it next to the samples (an async function taking a pydantic
model, wrapped in a ``Tool``; ``current_time.py`` is the shortest example), add its maker to
``TOOL_MAKERS`` and name it in ``VOICEWIRE_TOOLS``. Being imported from here is what puts it in
the Lambda bundle (``stacks/lambda_bundle.py`` follows the handlers' imports).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from functions.tools.current_time import current_time_tool
from functions.tools.knowledge_base import knowledge_base_tool
from functions.tools.registry import Tool, ToolOutcome, ToolRegistry, cancelled_outcome
from functions.tools.search_docs import DEFAULT_DOCS, search_docs_tool

__all__ = [
    "SAMPLE_TOOLS",
    "TOOL_MAKERS",
    "Tool",
    "ToolOptions",
    "ToolOutcome",
    "ToolRegistry",
    "cancelled_outcome",
    "sample_tools",
]


@dataclass(frozen=True)
class ToolOptions:
    """What a deployment's settings tell its tools."""

    latency_seconds: float = 0.0  # every answer waits this long (a slow tool, for demos)
    docs: tuple[Path, ...] = DEFAULT_DOCS  # search_docs' documents
    knowledge_base_id: str | None = None  # search_docs asks this Bedrock Knowledge Base instead


TOOL_MAKERS: dict[str, Callable[[ToolOptions], Tool]] = {
    "current_time": lambda options: current_time_tool(options.latency_seconds),
    "search_docs": lambda options: (
        knowledge_base_tool(options.knowledge_base_id, latency_seconds=options.latency_seconds)
        if options.knowledge_base_id
        else search_docs_tool(options.docs, options.latency_seconds)
    ),
}
SAMPLE_TOOLS = ("current_time", "search_docs")


def sample_tools(
    names: Iterable[str] = SAMPLE_TOOLS,
    *,
    latency_seconds: float = 0.0,
    docs: tuple[Path, ...] = DEFAULT_DOCS,
    timeout_seconds: float | None = None,
    knowledge_base_id: str | None = None,
) -> ToolRegistry:
    """The registry of the tools named (a deployment's ``VOICEWIRE_TOOLS``), in that order."""
    names = tuple(names)
    unknown = sorted(set(names) - TOOL_MAKERS.keys())
    if unknown:
        raise ValueError(f"unknown tools {unknown}; the tools are {sorted(TOOL_MAKERS)}")
    options = ToolOptions(latency_seconds, docs, knowledge_base_id)
    return ToolRegistry([TOOL_MAKERS[name](options) for name in names], timeout_seconds)
