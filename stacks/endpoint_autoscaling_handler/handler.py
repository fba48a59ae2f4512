"""The speech endpoint's autoscaling as a CloudFormation custom resource (endpoint_autoscaling.py).

Why not CloudFormation's own ``AWS::ApplicationAutoScaling::ScalableTarget``: SageMaker refuses an
endpoint update that changes the instance type of a variant registered for autoscaling ("Before
you update the endpoint, delete any scaling policies configured for it and deregister the variant
as a scalable target", developer guide, "Update or delete endpoints that use automatic scaling"),
and CloudFormation has no way to deregister a target before the endpoint's update and register
it again after. So two resources run this one rule around the endpoint:

    scaling is registered exactly when the endpoint runs the endpoint config it was written for

- ``Phase: before`` sits between the new endpoint config and the endpoint. On an update the
  endpoint still runs the old config: the target is deregistered (its policies go with it) and
  the endpoint update can change anything. The endpoint keeps its current instance count through
  the update (``RetainAllVariantProperties``).
- ``Phase: after`` depends on the endpoint: it now runs the new config, so the target and its
  policies are registered again (idempotently: ``RegisterScalableTarget`` and
  ``PutScalingPolicy`` update what exists; policies no longer wanted are deleted).
- On a rollback CloudFormation calls ``before`` again with the old properties, after the endpoint
  is back on the old config: the rule registers scaling again, so a failed update does not leave
  the endpoint without it. ``after``, rolled back while the endpoint still runs the new config,
  deregisters, so the endpoint's own rollback is not refused either.
- Deleting ``after`` deregisters; deleting ``before`` does nothing.

Runs on the Lambda runtime's boto3: these APIs are years old and stable, and this function runs
at deploy time only (the voice pipeline's functions bundle their own, pinned by uv.lock).

CloudFormation's custom resource protocol is a PUT of a small JSON document to the presigned
``ResponseURL``; it is done here with the standard library rather than through CDK's provider
framework, which would add a second function and role for the same thing.
"""

from __future__ import annotations

import json
import logging
import urllib.request
from typing import Any

logger = logging.getLogger()
logger.setLevel(logging.INFO)

NAMESPACE = "sagemaker"
DIMENSION = "sagemaker:variant:DesiredInstanceCount"


def handler(event: dict[str, Any], context: Any) -> None:
    """Entry point: whatever happens, CloudFormation gets an answer (else it waits an hour)."""
    status, reason = "SUCCESS", ""
    try:
        handle(event, clients())
    except Exception as error:
        logger.exception("endpoint autoscaling failed")
        status, reason = "FAILED", f"{type(error).__name__}: {error}"[:1000]
    respond(event, status, reason, context)


def handle(event: dict[str, Any], aws: dict[str, Any]) -> str:
    """Apply the rule for one CloudFormation request; returns what was done (for the log)."""
    settings = event["ResourceProperties"]
    phase, request = settings["Phase"], event["RequestType"]
    target = scalable_target(settings)
    if request == "Delete":
        done = release(aws, target) if phase == "after" else "nothing"
    else:
        running = endpoint_config(aws, settings["EndpointName"])
        if running is None:
            done = "nothing: the endpoint does not exist yet"
        elif running == settings["EndpointConfigName"]:
            done = apply(aws, target, settings)
        else:
            done = release(aws, target)
    logger.info(
        "%s %s (%s, endpoint config %s): %s",
        request,
        phase,
        target["ResourceId"],
        settings["EndpointConfigName"],
        done,
    )
    return done


def scalable_target(settings: dict[str, Any]) -> dict[str, str]:
    return {
        "ServiceNamespace": NAMESPACE,
        "ResourceId": f"endpoint/{settings['EndpointName']}/variant/{settings['VariantName']}",
        "ScalableDimension": DIMENSION,
    }


def endpoint_config(aws: dict[str, Any], endpoint_name: str) -> str | None:
    """The endpoint config the endpoint runs now, or None if there is no endpoint."""
    sagemaker = aws["sagemaker"]
    try:
        return str(sagemaker.describe_endpoint(EndpointName=endpoint_name)["EndpointConfigName"])
    except sagemaker.exceptions.ClientError as error:
        if "Could not find endpoint" in str(error):
            return None
        raise


def apply(aws: dict[str, Any], target: dict[str, str], settings: dict[str, Any]) -> str:
    """Register the target and put its policies; delete policies no longer listed."""
    scaling = aws["application-autoscaling"]
    # CloudFormation hands custom resources their properties as strings: the numbers and the
    # policies' configurations travel as one JSON document.
    wanted = json.loads(settings["Scaling"])
    scaling.register_scalable_target(
        **target, MinCapacity=int(wanted["MinCapacity"]), MaxCapacity=int(wanted["MaxCapacity"])
    )
    for policy in wanted["Policies"]:
        scaling.put_scaling_policy(
            **target,
            PolicyName=policy["PolicyName"],
            PolicyType="TargetTrackingScaling",
            TargetTrackingScalingPolicyConfiguration=policy["Configuration"],
        )
    names = {policy["PolicyName"] for policy in wanted["Policies"]}
    existing = scaling.describe_scaling_policies(**target)["ScalingPolicies"]
    stale = [policy["PolicyName"] for policy in existing if policy["PolicyName"] not in names]
    for name in stale:
        scaling.delete_scaling_policy(**target, PolicyName=name)
    return (
        f"registered ({wanted['MinCapacity']}-{wanted['MaxCapacity']} instances, policies "
        f"{sorted(names)}{', deleted ' + str(stale) if stale else ''})"
    )


def release(aws: dict[str, Any], target: dict[str, str]) -> str:
    """The developer guide's steps: delete the target's policies, then deregister it."""
    scaling = aws["application-autoscaling"]
    registered = scaling.describe_scalable_targets(
        ServiceNamespace=NAMESPACE, ResourceIds=[target["ResourceId"]], ScalableDimension=DIMENSION
    )["ScalableTargets"]
    if not registered:
        return "nothing: not registered"
    for policy in scaling.describe_scaling_policies(**target)["ScalingPolicies"]:
        scaling.delete_scaling_policy(**target, PolicyName=policy["PolicyName"])
    scaling.deregister_scalable_target(**target)
    return "deregistered"


def clients() -> dict[str, Any]:
    import boto3

    return {name: boto3.client(name) for name in ("sagemaker", "application-autoscaling")}


def respond(event: dict[str, Any], status: str, reason: str, context: Any) -> None:
    settings = event["ResourceProperties"]
    body = json.dumps(
        {
            "Status": status,
            "Reason": reason or f"see log stream {getattr(context, 'log_stream_name', '')}",
            "PhysicalResourceId": f"{settings['EndpointName']}/{settings['VariantName']}/"
            f"{settings['Phase']}",
            "StackId": event["StackId"],
            "RequestId": event["RequestId"],
            "LogicalResourceId": event["LogicalResourceId"],
        }
    ).encode()
    request = urllib.request.Request(
        event["ResponseURL"], data=body, method="PUT", headers={"Content-Type": ""}
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        logger.info("CloudFormation answered %s to %s", answer.status, status)
