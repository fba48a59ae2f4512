"""What every benchmark reports the same way: a turn's figures over trials, and the JSON file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from voicewire.turn_client import TurnResult
from voicewire_tools.local_stack.link_cost import summarize

TURN_FIGURES = ("first_text_ms", "first_audio_ms", "total_ms")


def turn_figures(
    results: list[TurnResult], keys: tuple[str, ...] = TURN_FIGURES
) -> dict[str, dict[str, Any]]:
    """Each ``turn_end`` timing's median, min, max and values over the trials."""
    summary: dict[str, dict[str, Any]] = {}
    for key in keys:
        values = [r.end["timings"][key] for r in results if r.end and r.end["timings"].get(key)]
        if values:
            summary[key] = summarize(values)
    return summary


def write_json(data: dict[str, Any], path: str | None) -> None:
    """``--json``: the figures, when asked for."""
    if path:
        Path(path).write_text(json.dumps(data, indent=2) + "\n")
        print(f"figures written to {path}")
