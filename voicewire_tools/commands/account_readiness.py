"""What a first deployment needs from the account, checked before deploying and said in words.

A stack can synthesize, pass cdk-nag and still fail, or deploy and then fail its first question,
on an account that has never used these services. ``speech-infra deploy`` and ``agent-infra
deploy`` check what they can (stacks/README.md, "What a first deployment needs from the
account", gives each item's source):

- **SageMaker's instance quota** (``speech-infra``): a fresh account's quota of GPU instances for
  endpoint usage is often 0, and creating the endpoint then fails after minutes of deploying.
  The quota is per account, Region and instance type, so other endpoints' instances of the type
  count against it; and every update after the first is blue/green (SageMaker's default): a
  second fleet as large as the running one starts before the old one retires, so N running
  instances need room for N more (``deployed_endpoint`` reads what runs).
- **The prebuilt image** (``speech-infra --image-uri``): it must be in ECR under its tag or
  digest, with a Docker v2 manifest; SageMaker refuses OCI manifests at CreateModel.
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
- **Lambda's concurrency** (``agent-infra``, the WebSocket API): each turn holds one worker for
  its length, and a new account's concurrency is reduced (Lambda's quotas page); turns beyond it
  wait in Lambda's queue and end ``turn_expired``. Said against what the speech fleet serves.
- **Transcribe's concurrent streams** (``agent-infra``, both runtimes): speech in holds one
  Transcribe WebSocket stream per listening conversation, two for a moment at each turn change,
  and the account's quota is 25 by default (the Transcribe Developer Guide, "Guidelines and
  quotas"); a stream beyond it is refused with ``LimitExceededException``. Read from Service
  Quotas (applied values, else AWS's defaults) and said against the conversations the speech
  fleet serves.

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

from functions.worker.policy import WorkerPolicy
from voicewire_tools.commands.deployed_endpoint import (
    DeployedEndpoint,
    InstanceUsage,
    instances_elsewhere,
)

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
        return Finding(
            item, False, f"could not be checked ({said(error)}): the stage goes without access logs"
        )
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
        return Finding(
            item, False, f"could not be created ({said(error)}): the stage goes without access logs"
        )
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
        return [
            Finding(
                item,
                False,
                f"could not be checked ({said(error)}): make one call to "
                "it before the first question (--enable-model)",
            )
        ]
    problems = []
    if availability["regionAvailability"] != "AVAILABLE":
        problems.append(f"{base_model} is not offered in {session.region_name}")
    if availability["authorizationStatus"] != "AUTHORIZED":
        problems.append(
            "this account is not authorized to use it (an SCP or a model-access policy denies it)"
        )
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
        return Finding(item, False, f"could not be checked ({said(error)})")
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
        return Finding(item, False, f"the first invocation failed ({said(error)})")
    return Finding(item, True, "invoked once as you, which subscribes the account")


# --- SageMaker's instance quota ----------------------------------------------------------------


def endpoint_instance_quota(
    session: Any,
    instance_type: str,
    minimum: int,
    maximum: int,
    deployed: DeployedEndpoint | None = None,
    endpoint_name: str | None = None,
) -> Finding:
    """Whether the account may run this deploy's fleet of ``instance_type``: ``minimum`` to
    create the endpoint; to update ``deployed``, a second fleet of the count it runs now beside
    the old one. The quota is per account, Region and instance type, so what the account's other
    endpoints hold of that type is counted against it."""
    item = f"SageMaker quota '{instance_type} for endpoint usage'"
    name = f"{instance_type} for endpoint usage"
    try:
        found = [
            quota
            for page in session.client("service-quotas")
            .get_paginator("list_service_quotas")
            .paginate(ServiceCode="sagemaker")
            for quota in page["Quotas"]
            if quota["QuotaName"] == name
        ]
        if found:
            excluding = deployed.name if deployed else endpoint_name or ""
            elsewhere = instances_elsewhere(session, instance_type, excluding)
    except (BotoCoreError, ClientError) as error:
        return Finding(item, False, f"could not be checked ({said(error)})")
    if not found:
        return Finding(
            item,
            False,
            f"no such quota in {session.region_name}: is {instance_type} "
            "offered for endpoints in this Region?",
        )
    value, code = int(found[0]["Value"]), found[0]["QuotaCode"]
    quota = _QuotaRoom(value, code, elsewhere)
    if deployed is None:
        return quota.first_deploy(item, minimum, maximum)
    return quota.update(item, deployed, instance_type, minimum, maximum)


@dataclass(frozen=True)
class _QuotaRoom:
    """One instance type's quota, and what of it this endpoint may use."""

    value: int
    code: str
    elsewhere: InstanceUsage

    @property
    def free(self) -> int:
        return max(0, self.value - self.elsewhere.instances)

    def head(self) -> str:
        return f"{self.value} ({self.elsewhere.said()})"

    def increase(self, needed: int) -> str:
        return (
            f"request an increase to at least {self.elsewhere.instances + needed} in Service "
            f"Quotas (quota {self.code})"
        )

    def first_deploy(self, item: str, minimum: int, maximum: int) -> Finding:
        free = self.free
        if free < minimum:
            return Finding(
                item,
                False,
                f"{self.head()}: {free} free, and the endpoint needs {minimum} to start: "
                f"{self.increase(minimum)} first; creating the endpoint would fail after minutes",
                blocks=True,
            )
        # Every later update of the endpoint (a new image, new files, another AMI) is blue/green:
        # SageMaker starts a second fleet as large as the first before retiring the first.
        updatable = free // 2
        scaling = (
            f"autoscaling may run all {maximum}"
            if free >= maximum
            else f"autoscaling stops at {free} of its {maximum}"
        )
        if updatable >= maximum:
            updates = f"an update (a second fleet beside the first) fits even at {maximum}"
        else:
            updates = (
                f"an update brings up a second fleet beside the first, so updates fit only while "
                f"at most {updatable} run (at its maximum of {maximum}, an update needs "
                f"{2 * maximum}: {self.increase(2 * maximum)})"
            )
        if updatable < minimum:
            return Finding(
                item,
                False,
                f"{self.head()}: enough to start, but no update would fit even at {minimum} "
                f"running (it needs {2 * minimum}): {self.increase(2 * minimum)} before the "
                "first update",
            )
        return Finding(item, True, f"{self.head()}: {scaling}; {updates}")

    def update(
        self,
        item: str,
        deployed: DeployedEndpoint,
        instance_type: str,
        minimum: int,
        maximum: int,
    ) -> Finding:
        # RetainAllVariantProperties: the new fleet has the count autoscaling reached, not the
        # config's initial count (at least the minimum, for an endpoint that runs none yet).
        running = max(deployed.instances, minimum)
        same_type = deployed.instance_type == instance_type
        # Blue/green, SageMaker's default: the new fleet starts beside the old one, which is
        # retired once the new one serves. The old one counts here only if it is of this type.
        needed = running + (deployed.instances if same_type else 0)
        fleet = f"{deployed.name} runs {deployed.instances} {deployed.instance_type}"
        if same_type:
            second = (
                f"an update starts a second fleet of {running} beside them before retiring "
                f"them (blue/green, SageMaker's default), {needed} at once"
            )
        else:
            second = f"the update starts {running} {instance_type} beside them before retiring them"
        free = self.free
        if free < needed:
            # Scaled in to n instances, the update needs 2n (n of another type: n).
            fits = free // 2 if same_type else free
            wait = (
                f", or wait until autoscaling has scaled in to {fits} (it scales in after 15 "
                "minutes under both targets) and deploy then"
                if fits >= minimum
                else ""
            )
            return Finding(
                item,
                False,
                f"{self.head()}; {fleet}, and {second}: only {free} free. To update, "
                f"{self.increase(needed)}{wait}; the update would fail after minutes otherwise",
                blocks=True,
            )
        later = free // 2  # afterwards: one fleet of instance_type, updated the same way
        note = (
            ""
            if later >= maximum
            else f" (later updates fit while at most {later} of its {maximum} run)"
        )
        return Finding(item, True, f"{self.head()}; {fleet}, and {second}: {free} free{note}")


# --- the speech image ------------------------------------------------------------------------

# Manifests SageMaker refuses at CreateModel: "Unsupported manifest media type
# application/vnd.oci.image.manifest.v1+json ... Ensure that valid manifest media type is used"
# (aws/amazon-sagemaker-feedback#180); it takes Docker's v2 manifests. BuildKit's image exporter
# writes OCI ones by default, and an OCI index when it adds a provenance attestation.
OCI_MANIFESTS = (
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.oci.image.index.v1+json",
)
DOCKER_V2_REBUILD = (
    "docker buildx build --platform linux/amd64 --provenance=false "
    "--output type=image,name={uri},oci-mediatypes=false,push=true "
    "-f container/Dockerfile --target {target} ."
)


def endpoint_image(session: Any, uri: str, engine: str) -> Finding:
    """Whether SageMaker can take the prebuilt image ``uri`` of ``engine``: it is in its ECR
    repository under that tag or digest, with a Docker v2 manifest. ``uri`` is already known to
    be an ECR URI (``stacks.speech.ecr_image``)."""
    from stacks.speech import ecr_image
    from stacks.speech_image import ENGINE_TARGETS

    image = ecr_image(uri)
    reference = uri.split("/", 1)[1][len(image.name) :]  # "", ":tag" or "@sha256:..."
    if reference.startswith("@"):
        image_id = {"imageDigest": reference[1:]}
    else:
        image_id = {"imageTag": reference[1:] or "latest"}  # no tag: Docker pulls latest
    item = f"image {uri}"
    ecr = session.client("ecr", region_name=image.region)
    try:
        (detail,) = ecr.describe_images(
            registryId=image.account, repositoryName=image.name, imageIds=[image_id]
        )["imageDetails"]
    except ecr.exceptions.RepositoryNotFoundException:
        return Finding(
            item,
            False,
            f"account {image.account} has no repository {image.name} in "
            f"{image.region}: push the image first",
            blocks=True,
        )
    except ecr.exceptions.ImageNotFoundException:
        what = "digest" if "imageDigest" in image_id else "tag"
        return Finding(
            item,
            False,
            f"repository {image.name} has no image with the {what} "
            f"{next(iter(image_id.values()))}: push it first",
            blocks=True,
        )
    except (BotoCoreError, ClientError) as error:
        return Finding(
            item,
            False,
            f"could not be checked ({said(error)}): SageMaker will say "
            "at CreateModel whether it can pull it",
        )
    media_type = detail.get("imageManifestMediaType", "")
    if media_type in OCI_MANIFESTS:
        return Finding(
            item,
            False,
            f"its manifest is OCI ({media_type}), and SageMaker refuses OCI manifests at "
            "CreateModel (Unsupported manifest media type): build and push it again with "
            "Docker's v2 media types: "
            + DOCKER_V2_REBUILD.format(uri=uri, target=ENGINE_TARGETS.get(engine, "TARGET")),
            blocks=True,
        )
    digest, media_type = detail["imageDigest"], media_type or "no media type said"
    return Finding(item, True, f"{digest}, {media_type}: SageMaker can take it")


# --- Lambda's concurrency --------------------------------------------------------------------

# Service Quotas' code of Lambda's "Concurrent executions" (service code lambda).
LAMBDA_CONCURRENCY_QUOTA = "L-B99A9384"
# The API's short functions (authorizer, connect, messages, disconnect) run for milliseconds
# each; at once they hold about one execution each. Each turn holds one worker for its length.
SHORT_ROUTE_EXECUTIONS = 4


def lambda_concurrency(
    session: Any, speech_sessions: int, stage_rate: float, worker: WorkerPolicy
) -> Finding:
    """Whether the account's unreserved Lambda concurrency lets as many turns speak at once as
    the speech fleet serves (``speech_sessions``). A turn beyond it waits in Lambda's queue for
    a free execution and, started too late, ends ``turn_expired``; the stage throttle
    (``stage_rate`` requests a second) admits far more, so it does not stop them first."""
    item = "Lambda concurrency (one execution per speaking turn)"
    try:
        limit = session.client("lambda").get_account_settings()["AccountLimit"]
    except (BotoCoreError, ClientError) as error:
        return Finding(item, False, f"could not be checked ({said(error)})")
    total = int(limit.get("ConcurrentExecutions", 0))
    unreserved = int(limit.get("UnreservedConcurrentExecutions", total))
    turns = max(0, unreserved - SHORT_ROUTE_EXECUTIONS)
    # Each action the stage admits may start a turn that holds its worker up to the timeout.
    admitted = int(stage_rate * worker.timeout_seconds)
    figures = (
        f"{unreserved} unreserved of {total} concurrent executions in {session.region_name}: "
        f"about {turns} turns can speak at once (each holds a worker up to "
        f"{worker.timeout_seconds} s; the authorizer, connect, messages and disconnect take a "
        f"few), against the {speech_sessions} conversations the speech fleet serves at its "
        f"largest and the {stage_rate:g} actions a second the stage throttle admits (up to "
        f"{admitted} turns at once)"
    )
    if turns >= speech_sessions:
        return Finding(item, True, figures)
    return Finding(
        item,
        False,
        f"{figures}. A turn beyond them waits for a free execution, and one that waits over "
        f"{worker.start_deadline_seconds:g} s ends turn_expired: request an increase of "
        f"Lambda's 'Concurrent executions' to at least "
        f"{total - unreserved + speech_sessions + SHORT_ROUTE_EXECUTIONS} in Service Quotas "
        f"(quota {LAMBDA_CONCURRENCY_QUOTA}); new accounts start low and AWS raises it with use",
    )


# --- Transcribe's concurrent streams ------------------------------------------------------

TRANSCRIBE_SERVICE_CODE = "transcribe"
TRANSCRIBE_DEFAULT_STREAMS = 25  # the developer guide's default, where Service Quotas says none
# Streams one listening conversation may hold at once: its stream, and the next one the page
# opens as a turn ends while Transcribe finishes the last (web/speech_in.js, nextSession).
STREAMS_PER_CONVERSATION = 2


def _is_websocket_stream_quota(name: str) -> bool:
    """The quota of concurrent streams the page's WebSocket streams count against: not
    Transcribe Medical's, not Call Analytics', not HTTP/2's (the SDKs' streams)."""
    lowered = name.lower()
    return (
        "stream" in lowered
        and "websocket" in lowered
        and not any(word in lowered for word in ("medical", "call analytics", "http/2"))
    )


def transcribe_streams(session: Any, conversations: int) -> Finding:
    """Whether the account's quota of concurrent Transcribe WebSocket streams lets as many
    conversations listen at once as the speech fleet serves (``conversations``). Service
    Quotas lists only quotas the account has a value applied for; otherwise AWS's default
    is asked. The quota's name is matched, not its code: the code was not found published
    (docs/decisions.md), so the one Service Quotas names is what this says to raise."""
    item = "Transcribe concurrent WebSocket streams (speech in)"
    needed = STREAMS_PER_CONVERSATION * conversations
    quotas = session.client("service-quotas")
    try:
        found = []
        for operation in ("list_service_quotas", "list_aws_default_service_quotas"):
            found = [
                quota
                for page in quotas.get_paginator(operation).paginate(
                    ServiceCode=TRANSCRIBE_SERVICE_CODE
                )
                for quota in page["Quotas"]
                if _is_websocket_stream_quota(quota["QuotaName"])
            ]
            if found:
                break
    except (BotoCoreError, ClientError) as error:
        return Finding(item, False, f"could not be checked ({said(error)})")
    if found:
        quota = found[0]
        value = int(quota["Value"])
        named = f"'{quota['QuotaName']}' is {value} in {session.region_name}"
        raise_it = f"quota {quota['QuotaCode']}"
    else:
        value = TRANSCRIBE_DEFAULT_STREAMS
        named = (
            f"Service Quotas names no WebSocket streaming quota for Transcribe in "
            f"{session.region_name}; AWS's documented default is {value}"
        )
        raise_it = "Amazon Transcribe's concurrent WebSocket streams"
    figures = (
        f"{named}: about {value // STREAMS_PER_CONVERSATION} conversations can listen at once "
        f"(each holds a stream while it listens, two for a moment as a turn ends), against the "
        f"{conversations} the speech fleet serves at its largest"
    )
    if value >= needed:
        return Finding(item, True, figures)
    return Finding(
        item,
        False,
        f"{figures}. A stream beyond the quota is refused with LimitExceededException and the "
        f"page stops listening (typing still works): request an increase to at least {needed} "
        f"in Service Quotas ({raise_it})",
    )


def said(error: Exception) -> str:
    """An AWS error in a few words: its code and message."""
    if isinstance(error, ClientError):
        details = error.response.get("Error", {})
        return f"{details.get('Code', 'error')}: {details.get('Message', '')}".strip(": ")
    return str(error)
