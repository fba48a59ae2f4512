"""The speech endpoint's autoscaling, registered around each endpoint update.

SageMaker refuses to update an endpoint whose update changes the instance type of a variant
registered for autoscaling, until the variant is deregistered; CloudFormation cannot deregister
before an update and register after. Two custom resources of one small function
(``endpoint_autoscaling_handler/handler.py``, which says the rule) do it instead::

    EndpointConfig (new) -> Before (deregister) -> Endpoint (update) -> After (register + policies)

so that ``speech-infra deploy --instance-type ...`` (or a new image, or a new AMI) deploys
without manual steps, and the endpoint, with ``RetainAllVariantProperties``, keeps the instance
count autoscaling reached. The function has its own role, allowed exactly what Application Auto
Scaling needs of a caller for a SageMaker variant.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from aws_cdk import (
    Acknowledgment,
    CustomResource,
    Duration,
    RemovalPolicy,
    Stack,
    Validations,
)
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sagemaker as sagemaker
from constructs import Construct

from stacks.nag_findings import acknowledge_wildcard

HANDLER_DIRECTORY = Path(__file__).resolve().parent / "endpoint_autoscaling_handler"
RESOURCE_TYPE = "Custom::EndpointAutoscaling"
# The service-linked role Application Auto Scaling creates on the first SageMaker registration.
SERVICE_LINKED_ROLE_SERVICE = "sagemaker.application-autoscaling.amazonaws.com"


@dataclass(frozen=True)
class TargetTracking:
    """One target-tracking policy on a metric the container publishes (per-instance average)."""

    name: str
    namespace: str
    metric: str
    unit: str
    dimensions: dict[str, str]
    target: float
    scale_out_cooldown_seconds: int
    scale_in_cooldown_seconds: int

    def as_policy(self) -> dict[str, object]:
        """``PutScalingPolicy``'s name and ``TargetTrackingScalingPolicyConfiguration``."""
        return {
            "PolicyName": self.name,
            "Configuration": {
                "TargetValue": self.target,
                "CustomizedMetricSpecification": {
                    "MetricName": self.metric,
                    "Namespace": self.namespace,
                    "Dimensions": [
                        {"Name": name, "Value": value} for name, value in self.dimensions.items()
                    ],
                    "Statistic": "Average",
                    "Unit": self.unit,
                },
                "ScaleOutCooldown": self.scale_out_cooldown_seconds,
                "ScaleInCooldown": self.scale_in_cooldown_seconds,
            },
        }


class EndpointAutoscaling(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        endpoint: sagemaker.CfnEndpoint,
        config: sagemaker.CfnEndpointConfig,
        variant: str,
        min_capacity: int,
        max_capacity: int,
        policies: list[TargetTracking],
    ) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        endpoint_name = endpoint.endpoint_name
        if endpoint_name is None:
            raise ValueError("the endpoint needs a name the scaling target can refer to")
        log_group = logs.LogGroup(
            self,
            "Logs",
            retention=logs.RetentionDays.ONE_MONTH,
            removal_policy=RemovalPolicy.DESTROY,
        )
        role = iam.Role(self, "Role", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
        log_group.grant_write(role)
        endpoint_arn = stack.format_arn(
            service="sagemaker", resource="endpoint", resource_name=endpoint_name
        )
        endpoint_configs = stack.format_arn(
            service="sagemaker", resource="endpoint-config", resource_name="*"
        )
        scalable_targets = stack.format_arn(
            service="application-autoscaling", resource="scalable-target", resource_name="*"
        )
        permissions = iam.Policy(
            self,
            "Permissions",
            roles=[role],
            statements=[
                # What the handler reads, and what Application Auto Scaling checks that its
                # caller may do to a SageMaker variant (it then acts through its own role).
                iam.PolicyStatement(
                    actions=[
                        "sagemaker:DescribeEndpoint",
                        "sagemaker:DescribeEndpointConfig",
                        "sagemaker:UpdateEndpointWeightsAndCapacities",
                    ],
                    resources=[endpoint_arn, endpoint_configs],
                ),
                # Changing scalable targets: SageMaker's only (their ids are made at
                # registration, so no one target can be named).
                iam.PolicyStatement(
                    actions=[
                        "application-autoscaling:RegisterScalableTarget",
                        "application-autoscaling:DeregisterScalableTarget",
                        "application-autoscaling:PutScalingPolicy",
                        "application-autoscaling:DeleteScalingPolicy",
                    ],
                    resources=[scalable_targets],
                    conditions={
                        "StringEquals": {"application-autoscaling:service-namespace": "sagemaker"}
                    },
                ),
                iam.PolicyStatement(
                    actions=[
                        "application-autoscaling:DescribeScalableTargets",
                        "application-autoscaling:DescribeScalingPolicies",
                        # Target tracking policies are CloudWatch alarms that Application Auto
                        # Scaling makes and removes in the caller's name.
                        "cloudwatch:PutMetricAlarm",
                        "cloudwatch:DescribeAlarms",
                        "cloudwatch:DeleteAlarms",
                    ],
                    resources=["*"],
                ),
                iam.PolicyStatement(
                    actions=["iam:CreateServiceLinkedRole"],
                    resources=[
                        stack.format_arn(
                            service="iam",
                            region="",
                            account=stack.account,
                            resource="role",
                            resource_name=f"aws-service-role/{SERVICE_LINKED_ROLE_SERVICE}/"
                            "AWSServiceRoleForApplicationAutoScaling_SageMakerEndpoint",
                        )
                    ],
                    conditions={"StringLike": {"iam:AWSServiceName": SERVICE_LINKED_ROLE_SERVICE}},
                ),
            ],
        )
        acknowledge_wildcard(
            permissions,
            "*",
            "Describing scalable targets and policies has no resource-level permission, and "
            "the target-tracking alarms are named by Application Auto Scaling.",
        )
        acknowledge_wildcard(
            permissions,
            stack.resolve(scalable_targets),
            "Application Auto Scaling names a scalable target when it is registered; the "
            "condition keeps these actions to SageMaker's targets.",
        )
        acknowledge_wildcard(
            permissions,
            stack.resolve(endpoint_configs),
            "Application Auto Scaling reads the endpoint's config, whose name CloudFormation "
            "generates anew with each change.",
        )
        function = lambda_.Function(
            self,
            "Function",
            role=role,
            runtime=lambda_.Runtime.PYTHON_3_12,
            architecture=lambda_.Architecture.ARM_64,
            code=lambda_.Code.from_asset(str(HANDLER_DIRECTORY), exclude=["__pycache__"]),
            handler="handler.handler",
            timeout=Duration.minutes(2),
            memory_size=256,
            logging_format=lambda_.LoggingFormat.JSON,
            log_group=log_group,
        )
        function.node.add_dependency(permissions)
        Validations.of(function).acknowledge(
            Acknowledgment(
                id="AwsSolutions-L1",
                reason="Python 3.12, as every function of this project; it runs at deploy time.",
            )
        )
        settings = {
            "EndpointName": endpoint_name,
            "VariantName": variant,
            "EndpointConfigName": config.attr_endpoint_config_name,
            # One JSON document: CloudFormation hands a custom resource its properties as
            # strings, numbers included.
            "Scaling": json.dumps(
                {
                    "MinCapacity": min_capacity,
                    "MaxCapacity": max_capacity,
                    "Policies": [policy.as_policy() for policy in policies],
                },
                sort_keys=True,
            ),
        }
        self.before = CustomResource(
            self,
            "Before",
            service_token=function.function_arn,
            resource_type=RESOURCE_TYPE,
            properties={**settings, "Phase": "before"},
        )
        self.after = CustomResource(
            self,
            "After",
            service_token=function.function_arn,
            resource_type=RESOURCE_TYPE,
            properties={**settings, "Phase": "after"},
        )
        endpoint.node.add_dependency(self.before)
        self.after.node.add_dependency(endpoint)
