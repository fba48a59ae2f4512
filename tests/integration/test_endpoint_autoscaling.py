"""The speech endpoint's autoscaling around endpoint updates
(``stacks/endpoint_autoscaling_handler/handler.py``): registered exactly when the endpoint runs the
endpoint config it was written for. The handler runs as Lambda runs it, through boto3's real
SageMaker and Application Auto Scaling clients over moto, and answers CloudFormation over real
HTTP. moto has no UpdateEndpoint: an endpoint "moves" to a config by being made again on it."""

from __future__ import annotations

import contextlib
import json
from http.server import BaseHTTPRequestHandler
from typing import ClassVar

import boto3
import pytest
from loopback_http import LoopbackServer

from stacks.endpoint_autoscaling import TargetTracking
from stacks.endpoint_autoscaling_handler import handler as autoscaling

ENDPOINT, VARIANT = "voicewire-kokoro-82m", "AllTraffic"
RESOURCE_ID = f"endpoint/{ENDPOINT}/variant/{VARIANT}"
POLICIES = [
    TargetTracking(
        name=f"{ENDPOINT}-{metric}",
        namespace="voicewire/speech",
        metric=metric,
        unit=unit,
        dimensions={"EndpointName": ENDPOINT, "VariantName": VARIANT},
        target=target,
        scale_out_cooldown_seconds=120,
        scale_in_cooldown_seconds=900,
    ).as_policy()
    for metric, unit, target in (("EngineBusy", "Percent", 60.0), ("OpenSessions", "Count", 38.0))
]


def event(request: str, phase: str, config: str, response_url: str = "http://unused") -> dict:
    scaling = {"MinCapacity": 1, "MaxCapacity": 4, "Policies": POLICIES}
    return {
        "RequestType": request,
        "ResponseURL": response_url,
        "StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/SpeechEndpoint/1",
        "RequestId": "request-1",
        "LogicalResourceId": f"Autoscaling{phase.capitalize()}",
        "ResourceType": "Custom::EndpointAutoscaling",
        # As CloudFormation hands them: strings, the scaling settings one JSON document.
        "ResourceProperties": {
            "ServiceToken": "arn:aws:lambda:us-east-1:123456789012:function:f",
            "Phase": phase,
            "EndpointName": ENDPOINT,
            "VariantName": VARIANT,
            "EndpointConfigName": config,
            "Scaling": json.dumps(scaling),
        },
    }


@pytest.fixture
def account(aws):
    sagemaker = boto3.client("sagemaker")
    sagemaker.create_model(
        ModelName="kokoro",
        ExecutionRoleArn="arn:aws:iam::123456789012:role/speech",
        PrimaryContainer={"Image": "123456789012.dkr.ecr.us-east-1.amazonaws.com/speech:1"},
    )
    for config, instance_type in (
        ("config-g4dn", "ml.g4dn.xlarge"),
        ("config-p3", "ml.p3.2xlarge"),
    ):
        sagemaker.create_endpoint_config(
            EndpointConfigName=config,
            ProductionVariants=[
                {
                    "VariantName": VARIANT,
                    "ModelName": "kokoro",
                    "InitialInstanceCount": 1,
                    "InstanceType": instance_type,
                }
            ],
        )
    return {
        "sagemaker": sagemaker,
        "application-autoscaling": boto3.client("application-autoscaling"),
    }


def run_endpoint_on(account, config: str) -> None:
    sagemaker = account["sagemaker"]
    with contextlib.suppress(sagemaker.exceptions.ClientError):
        sagemaker.delete_endpoint(EndpointName=ENDPOINT)
    sagemaker.create_endpoint(EndpointName=ENDPOINT, EndpointConfigName=config)


def registered(account) -> tuple[list, list[str]]:
    scaling = account["application-autoscaling"]
    targets = scaling.describe_scalable_targets(
        ServiceNamespace="sagemaker", ResourceIds=[RESOURCE_ID]
    )["ScalableTargets"]
    policies = scaling.describe_scaling_policies(
        ServiceNamespace="sagemaker", ResourceId=RESOURCE_ID
    )["ScalingPolicies"]
    return targets, sorted(p["PolicyName"] for p in policies)


def test_a_new_stack_registers_after_the_endpoint_exists(account):
    # CloudFormation creates "before" first: there is no endpoint yet.
    done = autoscaling.handle(event("Create", "before", "config-g4dn"), account)
    assert done == "nothing: the endpoint does not exist yet"
    run_endpoint_on(account, "config-g4dn")
    autoscaling.handle(event("Create", "after", "config-g4dn"), account)
    (target,), policies = registered(account)
    assert (target["MinCapacity"], target["MaxCapacity"]) == (1, 4)
    assert policies == [f"{ENDPOINT}-EngineBusy", f"{ENDPOINT}-OpenSessions"]
    stored = account["application-autoscaling"].describe_scaling_policies(
        ServiceNamespace="sagemaker", ResourceId=RESOURCE_ID
    )["ScalingPolicies"]
    busy = next(p for p in stored if p["PolicyName"].endswith("EngineBusy"))
    tracking = busy["TargetTrackingScalingPolicyConfiguration"]
    assert tracking["TargetValue"] == 60.0
    assert tracking["CustomizedMetricSpecification"]["Namespace"] == "voicewire/speech"
    assert tracking["CustomizedMetricSpecification"]["Statistic"] == "Average"


def test_an_instance_type_change_deregisters_before_and_registers_after(account):
    run_endpoint_on(account, "config-g4dn")
    autoscaling.handle(event("Create", "after", "config-g4dn"), account)
    # The new config exists; the endpoint still runs the old one: SageMaker would refuse the
    # update while the variant is registered, so "before" lets go of it.
    assert autoscaling.handle(event("Update", "before", "config-p3"), account) == "deregistered"
    assert registered(account) == ([], [])
    run_endpoint_on(account, "config-p3")  # CloudFormation's UpdateEndpoint
    autoscaling.handle(event("Update", "after", "config-p3"), account)
    targets, policies = registered(account)
    assert len(targets) == 1 and len(policies) == 2


def test_a_failed_update_rolls_back_to_a_registered_endpoint(account):
    run_endpoint_on(account, "config-g4dn")
    autoscaling.handle(event("Create", "after", "config-g4dn"), account)
    autoscaling.handle(event("Update", "before", "config-p3"), account)
    # UpdateEndpoint failed: SageMaker keeps the old config, and CloudFormation calls "before"
    # again with its old properties.
    assert autoscaling.handle(event("Update", "before", "config-g4dn"), account).startswith(
        "registered"
    )
    targets, policies = registered(account)
    assert len(targets) == 1 and len(policies) == 2


def test_an_after_rolled_back_before_the_endpoint_lets_go(account):
    """If "after" itself failed, CloudFormation rolls it back while the endpoint still runs the
    new config, before rolling the endpoint back: registered then, the endpoint's own rollback
    (an instance-type change) would be refused."""
    run_endpoint_on(account, "config-p3")
    autoscaling.handle(event("Update", "after", "config-p3"), account)
    assert autoscaling.handle(event("Update", "after", "config-g4dn"), account) == "deregistered"


def test_a_policy_no_longer_wanted_is_deleted(account):
    run_endpoint_on(account, "config-g4dn")
    scaling = account["application-autoscaling"]
    autoscaling.handle(event("Create", "after", "config-g4dn"), account)
    scaling.put_scaling_policy(
        ServiceNamespace="sagemaker",
        ResourceId=RESOURCE_ID,
        PolicyName="SessionsPerInstance",
        ScalableDimension="sagemaker:variant:DesiredInstanceCount",
        PolicyType="TargetTrackingScaling",
        TargetTrackingScalingPolicyConfiguration={
            "TargetValue": 60.0,
            "PredefinedMetricSpecification": {
                "PredefinedMetricType": "SageMakerVariantInvocationsPerInstance"
            },
        },
    )
    done = autoscaling.handle(event("Update", "after", "config-g4dn"), account)
    assert "deleted ['SessionsPerInstance']" in done
    assert registered(account)[1] == [f"{ENDPOINT}-EngineBusy", f"{ENDPOINT}-OpenSessions"]


def test_deleting_the_stack_deregisters_once(account):
    run_endpoint_on(account, "config-g4dn")
    autoscaling.handle(event("Create", "after", "config-g4dn"), account)
    assert autoscaling.handle(event("Delete", "before", "config-g4dn"), account) == "nothing"
    assert autoscaling.handle(event("Delete", "after", "config-g4dn"), account) == "deregistered"
    assert registered(account) == ([], [])
    again = autoscaling.handle(event("Delete", "after", "config-g4dn"), account)
    assert again == "nothing: not registered"


class CloudFormation(BaseHTTPRequestHandler):
    """The presigned ResponseURL: records each PUT."""

    answers: ClassVar[list[tuple[dict, str | None]]] = []

    def do_PUT(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).answers.append((json.loads(body), self.headers.get("Content-Type")))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_cloudformation_always_gets_an_answer(account):
    run_endpoint_on(account, "config-g4dn")
    CloudFormation.answers = []
    with LoopbackServer(CloudFormation) as cloudformation:
        autoscaling.handler(event("Create", "after", "config-g4dn", cloudformation.url), None)
        broken = event("Update", "after", "config-g4dn", cloudformation.url)
        broken["ResourceProperties"]["Scaling"] = "{not json"
        autoscaling.handler(broken, None)
    (created, content_type), (failed, _) = CloudFormation.answers
    assert content_type == ""  # the presigned URL was signed without one
    assert created["Status"] == "SUCCESS"
    assert created["PhysicalResourceId"] == f"{ENDPOINT}/{VARIANT}/after"
    assert (created["StackId"], created["RequestId"], created["LogicalResourceId"]) == (
        "arn:aws:cloudformation:us-east-1:123456789012:stack/SpeechEndpoint/1",
        "request-1",
        "AutoscalingAfter",
    )
    assert failed["Status"] == "FAILED" and failed["Reason"].startswith("JSONDecodeError")
