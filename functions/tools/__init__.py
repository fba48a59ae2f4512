"""The agent's tools: the registry (``registry``) and the sample tools a deployment can offer."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from functions.tools.current_time import current_time_tool
from functions.tools.registry import Tool, ToolOutcome, ToolRegistry, cancelled_outcome
from functions.tools.search_docs import DEFAULT_DOCS, search_docs_tool

SAMPLE_TOOLS = ("current_time", "search_docs")

__all__ = [
    "SAMPLE_TOOLS",
    "Tool",
    "ToolOutcome",
    "ToolRegistry",
    "cancelled_outcome",
    "sample_tools",
]


def sample_tools(
    names: Iterable[str] = SAMPLE_TOOLS,
    *,
    latency_seconds: float = 0.0,
    docs: tuple[Path, ...] = DEFAULT_DOCS,
    timeout_seconds: float | None = None,
) -> ToolRegistry:
    """The registry of the sample tools named (a deployment's ``VOICEWIRE_TOOLS``)."""
    makers = {
        "current_time": lambda: current_time_tool(latency_seconds),
        "search_docs": lambda: search_docs_tool(docs, latency_seconds),
    }
    unknown = sorted(set(names) - makers.keys())
    if unknown:
        raise ValueError(f"unknown tools {unknown}; the sample tools are {sorted(makers)}")
    return ToolRegistry([makers[name]() for name in names], timeout_seconds)
