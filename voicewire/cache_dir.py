"""Where voicewire keeps what it assembles once (the speech model, the local LLM's weights):
``$VOICEWIRE_CACHE_DIR``, else ``$XDG_CACHE_HOME/voicewire``, else ``~/.cache/voicewire``."""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterator
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


@contextlib.contextmanager
def written_atomically(target: Path, suffix: str = "") -> Iterator[Path]:
    """A temporary path beside ``target`` to write; moved onto ``target`` when the block ends
    without an error (a rename: a concurrent start never sees half a file), removed either way.
    ``suffix``: what the temporary name must end with (``np.savez`` adds ``.npz`` otherwise).

    The directory is made if it is missing: a fresh container's cache does not exist yet, and the
    speech image's first start writes its split graph there before anything else has."""
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(f".{os.getpid()}.partial{suffix}")
    try:
        yield partial
        partial.replace(target)
    finally:
        partial.unlink(missing_ok=True)
