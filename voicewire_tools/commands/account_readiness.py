"""What a first deployment needs from the account, checked before deploying and said in words.

A stack can synthesize, pass cdk-nag and still fail, or deploy and then fail its first question,
on an account that has never used these services. ``speech-infra deploy`` and ``agent-infra
deploy`` check what they can (stacks/README.md, "What a first deployment needs from the
account", gives each item's source):

- **SageMaker's instance quota** (``speech-infra``): a fresh account's quota of GPU instances for
  endpoint usage is often 0, and creating the endpoint then fails after minutes of deploying.
- **API Gateway's CloudWatch role** (``agent-infra``): a WebSocket stage with access logs needs
  the account's role (one per account and Region, shared by every API); a fresh account has
  none, and the stage cannot be created. It is never overwritten: found, the stage logs; absent,
  it is created only with ``--create-api-logging-role``, else the stage goes without access
  logs and this says so.
- **The Bedrock model's first use** (``agent-infra``): serverless models are enabled on first
  invocation, which subscribes the account through AWS Marketplace; the worker's role has no
  Marketplace rights, so its first question would fail with AccessDenied. Anthropic's models
  also need a use-case form, once per account. Checked with ``GetFoundationModelAvailability``
  and ``GetUseCaseForModelAccess``; ``--enable-model`` makes that first call as the person
  deploying (one token).

Each check is read-only unless its flag says otherwise, and a check that cannot run (no
permission to ask) says so instead of guessing.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

API_LOGGING_ROLE_NAME = "APIGatewayCloudWatchLogs"
API_LOGGING_POLICY = "policy/service-role/AmazonAPIGatewayPushToCloudWatchLogs"
ANTHROPIC = "anthropic."


@dataclass(frozen=True)
class Finding:
    """One thing the account has, or still needs."""

    item: str
    ready: bool
    detail: str
    blocks: bool = False  # deploying now would fail: stop before anything slow starts

    def line(self) -> str:
        return f"  {'ok  ' if self.ready else 'NEED'}  {self.item}: {self.detail}"


def render(account: str, region: str, findings: Iterable[Finding]) -> str:
    findings = list(findings)
    needed = sum(not finding.ready for finding in findings)
    head = f"account {account}, {region}: " + (
        "ready" if not needed else f"{needed} thing(s) still needed"
    )
    return "\n".join([head, *(finding.line() for finding in findings)])


# --- API Gateway's CloudWatch role ---------------------------------------------------------


def api_logging_role(
    session: Any, create: bool, wait: Callable[[float], None] = time.sleep
) -> Finding:
    """Whether the stage may have access logs: the account's API Gateway CloudWatch role is set
    and exists; with ``create``, a missing one is made and set (never one that is set)."""
    item = "API Gateway CloudWatch role (the WebSocket stage's access logs)"
    apigateway, iam = session.client("apigateway"), session.client("iam")
    try:
        arn = apigateway.get_account().get("cloudwatchRoleArn")
        if arn and _role_exists(iam, arn):
            return Finding(item, True, f"{arn}: the stage logs its connections")
    except (BotoCoreError, ClientError) as error:
        return Finding(item, False, f"could not be checked ({_said(error)}): the stage goes "
                       "without access logs")  # fmt: skip
    gone = f"the account's setting names {arn}, which no longer exists; " if arn else ""
    if not create:
        return Finding(
            item,
            False,
            f"{gone}none usable in this Region, so the stage is deployed WITHOUT access logs "
            "(with them, creating it would fail). --create-api-logging-role creates "
            f"{API_LOGGING_ROLE_NAME} and sets it for every API of the account in this Region.",
        )
    try:
        arn = _create_logging_role(session, iam, apigateway, wait)
    except (BotoCoreError, ClientError) as error:
        return Finding(item, False, f"could not be created ({_said(error)}): the stage goes "
                       "without access logs")  # fmt: skip
    return Finding(item, True, f"created {arn} and set it for the account: the stage logs")


def _role_exists(iam: Any, arn: str) -> bool:
    try:
        iam.get_role(RoleName=arn.rsplit("/", 1)[-1])
    except iam.exceptions.NoSuchEntityException:
        return False
    return True


def _create_logging_role(
    session: Any, iam: Any, apigateway: Any, wait: Callable[[float], None]
) -> str:
    partition = session.get_partition_for_region(session.region_name)
    trust = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Service": "apigateway.amazonaws.com"},
                "Action": "sts:AssumeRole",
            }
        ],
    }
    try:
        arn = iam.create_role(
            RoleName=API_LOGGING_ROLE_NAME,
            AssumeRolePolicyDocument=json.dumps(trust),
            Description="API Gateway writes the account's API logs to CloudWatch Logs "
            "(made by voicewire's agent-infra deploy; shared by every API of the account)",
        )["Role"]["Arn"]
    except iam.exceptions.EntityAlreadyExistsException:
        arn = iam.get_role(RoleName=API_LOGGING_ROLE_NAME)["Role"]["Arn"]
    iam.attach_role_policy(
        RoleName=API_LOGGING_ROLE_NAME, PolicyArn=f"arn:{partition}:iam::aws:{API_LOGGING_POLICY}"
    )
    # A new role takes seconds to be usable everywhere: API Gateway refuses it meanwhile.
    for attempt in range(8):
        try:
            apigateway.update_account(
                patchOperations=[{"op": "replace", "path": "/cloudwatchRoleArn", "value": arn}]
            )
            return str(arn)
        except apigateway.exceptions.BadRequestException:
            if attempt == 7:
                raise
            wait(min(2.0**attempt, 10.0))
    raise AssertionError("unreachable")


# --- the Bedrock model's first use -----------------------------------------------------------


def model_access(session: Any, model_id: str, enable: bool) -> list[Finding]:
    """Whether the worker's first question can reach the model; with ``enable``, the first
    invocation (which subscribes the account) is made now, as the person deploying."""
    from stacks.voice_api import foundation_model_of

    base_model = foundation_model_of(model_id)
    bedrock = session.client("bedrock")
    item = f"Bedrock model {model_id}"
    try:
        availability = bedrock.get_foundation_model_availability(modelId=base_model)
    except (BotoCoreError, ClientError) as error:
        return [Finding(item, False, f"could not be checked ({_said(error)}): make one call to "
                        "it before the first question (--enable-model)")]  # fmt: skip
    problems = []
    if availability["regionAvailability"] != "AVAILABLE":
        problems.append(f"{base_model} is not offered in {session.region_name}")
    if availability["authorizationStatus"] != "AUTHORIZED":
        problems.append("this account is not authorized to use it (an SCP or a model-access "
                        "policy denies it)")  # fmt: skip
    subscribed = availability["agreementAvailability"]["status"] == "AVAILABLE"
    entitled = availability["entitlementAvailability"] == "AVAILABLE"
    findings = []
    if base_model.startswith(ANTHROPIC):
        findings.append(_anthropic_use_case(bedrock))
    if problems:
        return [Finding(item, False, "; ".join(problems)), *findings]
    if subscribed and entitled:
        return [Finding(item, True, "subscribed: the worker may invoke it"), *findings]
    status = availability["agreementAvailability"]["status"]
    if not enable:
        return [
            Finding(
                item,
                False,
                f"not subscribed yet (Marketplace agreement {status}). Its first invocation "
                "subscribes the account, which needs aws-marketplace:Subscribe, and the worker's "
                "role has no Marketplace rights: make that first call as yourself "
                "(--enable-model, or once in the Bedrock console's playground).",
            ),
            *findings,
        ]
    return [_first_invocation(session, model_id, item), *findings]


def _anthropic_use_case(bedrock: Any) -> Finding:
    item = "Anthropic use-case form (once per account)"
    try:
        bedrock.get_use_case_for_model_access()
    except bedrock.exceptions.ResourceNotFoundException:
        return Finding(
            item,
            False,
            "not submitted: Bedrock console, Model access (or PutUseCaseForModelAccess); "
            "Anthropic models refuse calls until it is",
        )
    except (BotoCoreError, ClientError) as error:
        return Finding(item, False, f"could not be checked ({_said(error)})")
    return Finding(item, True, "submitted")


def _first_invocation(session: Any, model_id: str, item: str) -> Finding:
    runtime = session.client("bedrock-runtime")
    try:
        runtime.converse(
            modelId=model_id,
            messages=[{"role": "user", "content": [{"text": "Say OK."}]}],
            inferenceConfig={"maxTokens": 1},
        )
    except (BotoCoreError, ClientError) as error:
        return Finding(item, False, f"the first invocation failed ({_said(error)})")
    return Finding(item, True, "invoked once as you, which subscribes the account")


# --- SageMaker's instance quota ----------------------------------------------------------------


def endpoint_instance_quota(
    session: Any, instance_type: str, minimum: int, maximum: int
) -> Finding:
    """Whether the account may run the endpoint's ``minimum`` instances of ``instance_type``
    (to start) and its ``maximum`` (to scale)."""
    item = f"SageMaker quota '{instance_type} for endpoint usage'"
    quotas = session.client("service-quotas")
    name = f"{instance_type} for endpoint usage"
    try:
        found = [
            quota
            for page in quotas.get_paginator("list_service_quotas").paginate(
                ServiceCode="sagemaker"
            )
            for quota in page["Quotas"]
            if quota["QuotaName"] == name
        ]
    except (BotoCoreError, ClientError) as error:
        return Finding(item, False, f"could not be checked ({_said(error)})")
    if not found:
        return Finding(item, False, f"no such quota in {session.region_name}: is {instance_type} "
                       "offered for endpoints in this Region?")  # fmt: skip
    value, code = int(found[0]["Value"]), found[0]["QuotaCode"]
    if value >= maximum:
        return Finding(item, True, f"{value} (the endpoint runs {minimum} to {maximum})")
    if value >= minimum:
        return Finding(item, True, f"{value}: enough to start, but autoscaling stops at {value} "
                       f"of its {maximum} (Service Quotas, quota {code})")  # fmt: skip
    return Finding(
        item,
        False,
        f"{value}, and the endpoint needs {minimum} to start: request an increase in Service "
        f"Quotas (quota {code}) first; creating the endpoint would fail after minutes",
        blocks=True,
    )


def _said(error: Exception) -> str:
    if isinstance(error, ClientError):
        details = error.response.get("Error", {})
        return f"{details.get('Code', 'error')}: {details.get('Message', '')}".strip(": ")
    return str(error)
