"""A deployed SageMaker endpoint as SageMaker describes it: which engine its container really
runs, on which instance type, how many instances it runs now, and how many instances of a type
the account's other endpoints hold.

The engine is read where the container reads it, not from a flag: ``DescribeEndpoint`` names
the endpoint's config, ``DescribeEndpointConfig`` each variant's instance type and model, and
``DescribeModel`` the model's container environment, whose ``VOICEWIRE_ENGINE`` stacks/speech.py
sets from ``ENGINE_ENVIRONMENT`` (every voicewire endpoint has had it since the first stack).
SageMaker's instance quotas for endpoints are per account, Region and instance type, and shared
by every endpoint, so ``instances_elsewhere`` counts what the others hold. Read-only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

ENGINE_VARIABLE = "VOICEWIRE_ENGINE"
MAIN_VARIANT = "AllTraffic"  # stacks/speech.py's VARIANT: the one variant voicewire deploys


@dataclass(frozen=True)
class Variant:
    name: str
    instance_type: str | None  # None: a serverless variant, which holds no instances
    instances: int  # running, or being started by a scale-out already under way
    model: str | None


@dataclass(frozen=True)
class DeployedEndpoint:
    name: str
    status: str  # InService, Updating, Creating, Failed, ...
    variants: tuple[Variant, ...]
    # The main variant's VOICEWIRE_ENGINE; None: its container does not say, so the endpoint is
    # not one voicewire deployed.
    engine: str | None

    @property
    def main(self) -> Variant:
        named = [variant for variant in self.variants if variant.name == MAIN_VARIANT]
        return (named or list(self.variants))[0]

    @property
    def instance_type(self) -> str | None:
        return self.main.instance_type

    @property
    def instances(self) -> int:
        return self.main.instances

    def instances_of(self, instance_type: str) -> int:
        return sum(v.instances for v in self.variants if v.instance_type == instance_type)


def describe_endpoint(session: Any, name: str) -> DeployedEndpoint | None:
    """The endpoint ``name`` with its engine; None when it does not exist. Any other refusal
    (no permission, a config or model deleted by hand) is raised as botocore's error."""
    sagemaker = session.client("sagemaker")
    found = _fleet(sagemaker, name)
    if found is None:
        return None
    status, variants = found
    main = DeployedEndpoint(name, status, variants, None).main
    engine = None
    if main.model is not None:
        model = sagemaker.describe_model(ModelName=main.model)
        container = model.get("PrimaryContainer") or (model.get("Containers") or [{}])[0]
        engine = (container.get("Environment") or {}).get(ENGINE_VARIABLE)
    return DeployedEndpoint(name, status, variants, engine)


@dataclass(frozen=True)
class InstanceUsage:
    """The instances of one type the account's other endpoints hold."""

    instances: int
    endpoints: tuple[str, ...]  # those that hold some
    unreadable: tuple[str, ...]  # those whose config could not be read: not counted

    def said(self) -> str:
        held = (
            f"{self.instances} held by {', '.join(self.endpoints)}"
            if self.instances
            else "none held by other endpoints"
        )
        if self.unreadable:
            held += f" (not counted: {', '.join(self.unreadable)}, whose config could not be read)"
        return held


def instances_elsewhere(session: Any, instance_type: str, excluding: str) -> InstanceUsage:
    """How many ``instance_type`` instances the account's endpoints other than ``excluding``
    run in this Region (ListEndpoints, then each one's description)."""
    sagemaker = session.client("sagemaker")
    total, holders, unreadable = 0, [], []
    for page in sagemaker.get_paginator("list_endpoints").paginate():
        for summary in page["Endpoints"]:
            name = summary["EndpointName"]
            if name == excluding:
                continue
            try:
                found = _fleet(sagemaker, name)
            except ClientError:
                unreadable.append(name)
                continue
            if found is None:  # deleted since it was listed
                continue
            held = sum(v.instances for v in found[1] if v.instance_type == instance_type)
            if held:
                total += held
                holders.append(name)
    return InstanceUsage(total, tuple(holders), tuple(unreadable))


def _fleet(sagemaker: Any, name: str) -> tuple[str, tuple[Variant, ...]] | None:
    """The endpoint's status and variants (config joined with the live counts), or None."""
    try:
        endpoint = sagemaker.describe_endpoint(EndpointName=name)
    except ClientError as error:
        if _not_found(error):
            return None
        raise
    config = sagemaker.describe_endpoint_config(EndpointConfigName=endpoint["EndpointConfigName"])
    live = {variant["VariantName"]: variant for variant in endpoint.get("ProductionVariants", [])}
    variants = []
    for variant in config["ProductionVariants"]:
        counts = live.get(variant["VariantName"], {})
        # Mid scale-out the desired count is already being started, and it is what an update
        # keeps (RetainAllVariantProperties): the larger of the two is what the quota sees.
        instances = max(
            counts.get("CurrentInstanceCount", 0), counts.get("DesiredInstanceCount", 0)
        )
        variants.append(
            Variant(
                name=variant["VariantName"],
                instance_type=variant.get("InstanceType"),
                instances=int(instances) if variant.get("InstanceType") else 0,
                model=variant.get("ModelName"),
            )
        )
    return endpoint.get("EndpointStatus", "Unknown"), tuple(variants)


def _not_found(error: ClientError) -> bool:
    # SageMaker answers a missing endpoint with a ValidationException, not a NotFound code:
    # "Could not find endpoint "arn:aws:sagemaker:...:endpoint/NAME"."
    details = error.response.get("Error", {})
    return details.get("Code") == "ValidationException" and str(
        details.get("Message", "")
    ).startswith("Could not find endpoint")
