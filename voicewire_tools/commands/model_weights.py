"""The speech model's weights, from a directory on the deploying machine to the weights bucket.

The endpoint mounts ``s3://<weights bucket>/models/<model>/`` at ``/opt/ml/model`` and never
reaches a model hub, so the files must be in the bucket before the endpoint starts: the torch
engine's layout (``container/speech_server/engines/torch_engine.py``), ``config.json``, one
``*.pth`` and ``voices/*.pt``. Each file goes up with its sha256 in its metadata; a file already
there with the same sha256 is not sent again, so a second deploy costs a few HEAD requests.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from voicewire_tools.commands.cdk_runner import InfraError

FOUNDATION_STACK = "SpeechFoundation"
CHUNK = 1024 * 1024


@dataclass
class UploadReport:
    uploaded: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    bytes_sent: int = 0


def model_prefix(model: str) -> str:
    return f"models/{model}/"


def weight_files(directory: Path) -> list[Path]:
    """The files the engine loads, relative to ``directory``; InfraError naming what is
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


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def upload_weights(
    directory: Path,
    bucket: str,
    model: str,
    s3: Any,
    progress: Callable[[str], None] = print,
) -> UploadReport:
    """Put the model's files under ``models/<model>/`` of ``bucket``, with a manifest."""
    from botocore.exceptions import ClientError

    report = UploadReport()
    manifest: dict[str, str] = {}
    files = weight_files(directory)
    for number, relative in enumerate(files, 1):
        path = directory / relative
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
    """Whether the bucket already holds the model's config (a deploy can then skip the upload)."""
    from botocore.exceptions import ClientError

    try:
        s3.head_object(Bucket=bucket, Key=model_prefix(model) + "config.json")
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
