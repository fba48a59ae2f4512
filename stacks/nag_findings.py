"""cdk-nag acknowledgments, made exact: each names one finding on one construct with its reason.

cdk-nag's AwsSolutions pack runs on every synth (``app.py``) and an unacknowledged finding fails
it. A wildcard finding (IAM5) is acknowledged for exactly the resource it names, so a wildcard
added later is a new finding and still fails; ``tests/integration/test_stacks.py`` checks that
it does.
"""

from __future__ import annotations

from aws_cdk import Acknowledgment, Validations
from aws_cdk import aws_s3_deployment as s3_deployment
from constructs import Construct

# The CDK bootstrap's asset bucket (default qualifier), as cdk-nag renders its objects' ARN.
CDK_ASSET_OBJECTS = (
    "arn:<AWS::Partition>:s3:::cdk-hnb659fds-assets-<AWS::AccountId>-<AWS::Region>/*"
)
# What CDK's BucketDeployment grants its copy on the asset bucket (read) and the destination
# (a sync that may prune), beyond s3:PutObject*, which names no wildcard action.
BUCKET_DEPLOYMENT_ACTIONS = (
    "s3:GetObject*",
    "s3:GetBucket*",
    "s3:List*",
    "s3:DeleteObject*",
    "s3:Abort*",
)


def nag_rendering(value: object) -> str:
    """A resolved CloudFormation value as cdk-nag names it in a finding's id: ``Ref`` as
    ``<Name>``, ``Fn::GetAtt`` as ``<Name.Attribute>``, ``Fn::Join`` joined."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and "Ref" in value:
        return f"<{value['Ref']}>"
    if isinstance(value, dict) and "Fn::GetAtt" in value:
        return "<{}.{}>".format(*value["Fn::GetAtt"])
    if isinstance(value, dict) and "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return separator.join(nag_rendering(part) for part in parts)
    raise ValueError(f"cannot render {value!r} as cdk-nag does")


def acknowledge_wildcard(scope: Construct, resolved_resource: object, reason: str) -> None:
    """Acknowledge cdk-nag's IAM5 finding for exactly this resource, on exactly this construct:
    any other wildcard added later still fails the synth."""
    finding = f"AwsSolutions-IAM5[Resource::{nag_rendering(resolved_resource)}]"
    Validations.of(scope).acknowledge(Acknowledgment(id=finding, reason=reason))


def acknowledge_bucket_deployment(
    deployment: s3_deployment.BucketDeployment,
    destination: str,
    destination_objects: object,
    extra_wildcards: tuple[tuple[object, str], ...] = (),
) -> None:
    """The findings of CDK's BucketDeployment singleton (its function and role), which the
    construct makes and grants: acknowledged on that role and function, exactly.

    destination: what the copy writes, in words; destination_objects: the destination's objects
    as cdk-nag renders them (``Stack.resolve`` of ``arn_for_objects("*")``, or an export's
    name); extra_wildcards: (resource, reason) of any other wildcard the deployment's options
    add (an invalidation's ``*``)."""
    role = deployment.handler_role
    policy = role.node.find_child("DefaultPolicy")
    for action in BUCKET_DEPLOYMENT_ACTIONS:
        Validations.of(policy).acknowledge(
            Acknowledgment(
                id=f"AwsSolutions-IAM5[Action::{action}]",
                reason="CDK's BucketDeployment grants its copy these object actions on the CDK "
                f"asset bucket (read) and {destination} (sync with prune).",
            )
        )
    acknowledge_wildcard(
        policy,
        CDK_ASSET_OBJECTS,
        "The CDK bootstrap's asset bucket, where the files arrive as a zip.",
    )
    acknowledge_wildcard(policy, destination_objects, f"{destination}: the copy writes and prunes.")
    for resource, reason in extra_wildcards:
        acknowledge_wildcard(policy, resource, reason)
    Validations.of(role).acknowledge(
        Acknowledgment(
            id="AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/"
            "AWSLambdaBasicExecutionRole]",
            reason="CDK's BucketDeployment function writes its logs with the basic role.",
        )
    )
    Validations.of(role.node.scope).acknowledge(  # the function the role belongs to
        Acknowledgment(
            id="AwsSolutions-L1",
            reason="CDK's BucketDeployment function runs the runtime its CDK release pins.",
        )
    )
