"""What a benchmark ran on: printed with its table and written into its JSON."""

from __future__ import annotations

import os
import platform
from typing import Any

from speech_server.cpu_identity import cpu_model


def describe_machine(speech: dict[str, Any] | None = None) -> dict[str, Any]:
    """CPU, cores, Python, and the speech server's engine and default voice when known."""
    machine: dict[str, Any] = {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "system": f"{platform.system()} {platform.release()}",
    }
    if speech:
        machine["engine"] = speech.get("engine")
        machine["voice"] = speech.get("default_voice")
    return machine


def machine_line(machine: dict[str, Any]) -> str:
    engine = (
        f", engine {machine['engine']}, voice {machine['voice']}" if "engine" in machine else ""
    )
    return (
        f"machine: {machine['cpu']}, {machine['cores']} cores, Python {machine['python']}{engine}"
    )
