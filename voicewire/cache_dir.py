"""Where voicewire keeps what it assembles once (the speech model, the local LLM's weights):
``$VOICEWIRE_CACHE_DIR``, else ``$XDG_CACHE_HOME/voicewire``, else ``~/.cache/voicewire``."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def cache_dir() -> Path:
    """``$VOICEWIRE_CACHE_DIR``, else ``$XDG_CACHE_HOME/voicewire``, else ``~/.cache/voicewire``."""
    explicit = os.environ.get("VOICEWIRE_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "voicewire"


def sha256_of(path: Path) -> str:
    """The file's sha256, read in blocks (models are hundreds of MB)."""
    with path.open("rb") as source:
        return hashlib.file_digest(source, "sha256").hexdigest()
