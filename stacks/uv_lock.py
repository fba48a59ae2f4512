"""The project's locked versions, read through uv: one place for how uv is run and exported.

Every artifact the project builds or checks pins what ``uv.lock`` pins (the Lambda bundle's
constraints, the agent image's requirements, the dependency audit's list), so each asks
``uv export`` here rather than spelling the command again.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


class LockExportError(RuntimeError):
    """``uv export`` failed (a lock out of date with pyproject.toml, uv missing)."""


def uv_command() -> list[str]:
    """How to run uv: the one running us (``uv run`` sets ``UV``), one on PATH, or the module of
    the Python that installed it (``python3 -m pip install uv``, as README says)."""
    found = os.environ.get("UV") or shutil.which("uv")
    if found:
        return [found]
    python = shutil.which("python3") or sys.executable
    return [python, "-m", "uv"]


def exported_requirements(
    root: Path = ROOT, *, hashes: bool = False, everything: bool = False
) -> str:
    """``uv.lock`` as a pip requirements file (``name==version`` lines; with ``hashes``, each
    with its hashes): the runtime dependencies, or with ``everything`` every group and extra.
    The project itself is not in it."""
    options = ["--all-groups", "--all-extras"] if everything else ["--no-dev"]
    exported = subprocess.run(
        [
            *uv_command(),
            "export",
            "--frozen",
            "--format",
            "requirements-txt",
            "--no-emit-project",
            # The text is a file's, never a terminal's: under the CDK CLI ``FORCE_COLOR`` is
            # set (to 0, which uv reads as set) and uv would color its comment lines, which pip
            # cannot read (a fresh clone's CI, 2026-12-07).
            "--color",
            "never",
            *([] if hashes else ["--no-hashes"]),
            *options,
        ],
        cwd=root,
        capture_output=True,
        text=True,
    )
    if exported.returncode != 0:
        raise LockExportError(f"uv export failed: {exported.stderr.strip()}")
    return exported.stdout
