"""What a benchmark ran on: printed with its table and written into its JSON."""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any


def cpu_model() -> str:
    """The CPU's model name (Linux's /proc/cpuinfo), or the platform's processor string."""
    with_info = Path("/proc/cpuinfo")
    if with_info.is_file():
        for line in with_info.read_text(errors="replace").splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


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
