"""What a first deployment needs from the account (``account_readiness``), through boto3's real
clients: IAM, API Gateway, SageMaker's endpoints and ECR on moto; Bedrock's model access, Service
Quotas and Lambda's account settings, which moto lacks, on a stand-in speaking their wire shapes
(``aws_control_standin``)."""

from __future__ import annotations

import contextlib
import json
import zlib

import boto3
import pytest
from aws_control_standin import Account, serve
from moto_endpoints import deploy_endpoint

from functions.worker.policy import WorkerPolicy
from voicewire_tools.commands import account_readiness as readiness
from voicewire_tools.commands import deployed_endpoint

MODEL = "us.anthropic.claude-haiku-4-5-20251001-v1:0"
ENDPOINT = "voicewire-kokoro-82m"


@pytest.fixture
def control(aws, monkeypatch):
    account = Account()
    with serve(account) as server:
        for service in ("BEDROCK", "BEDROCK_RUNTIME", "SERVICE_QUOTAS", "LAMBDA"):
            monkeypatch.setenv(f"AWS_ENDPOINT_URL_{service}", server.url)
        yield account


def session() -> boto3.Session:
    return boto3.Session(region_name="us-east-1")


def test_a_fresh_account_has_no_logging_role_and_the_stage_goes_without_logs(aws):
    finding = readiness.api_logging_role(session(), create=False)
    assert not finding.ready and "WITHOUT access logs" in finding.detail
    assert "--create-api-logging-role" in finding.detail
    assert "cloudwatchRoleArn" not in boto3.client("apigateway").get_account()  # nothing changed


def test_the_role_is_created_only_when_asked_and_then_set_for_the_account(aws, monkeypatch):
    monkeypatch.setenv("MOTO_IAM_LOAD_MANAGED_POLICIES", "true")  # AWS's managed policies
    finding = readiness.api_logging_role(session(), create=True, wait=lambda s: None)
    assert finding.ready and finding.detail.startswith("created arn:aws:iam::")
    arn = boto3.client("apigateway").get_account()["cloudwatchRoleArn"]
    assert arn.endswith(f":role/{readiness.API_LOGGING_ROLE_NAME}")
    iam = boto3.client("iam")
    role = iam.get_role(RoleName=readiness.API_LOGGING_ROLE_NAME)["Role"]
    trust = role["AssumeRolePolicyDocument"]
    trust = json.loads(trust) if isinstance(trust, str) else trust
    assert trust["Statement"][0]["Principal"] == {"Service": "apigateway.amazonaws.com"}
    attached = iam.list_attached_role_policies(RoleName=readiness.API_LOGGING_ROLE_NAME)
    assert [p["PolicyArn"] for p in attached["AttachedPolicies"]] == [
        "arn:aws:iam::aws:policy/service-role/AmazonAPIGatewayPushToCloudWatchLogs"
    ]
    # Found the next time, and never replaced.
    again = readiness.api_logging_role(session(), create=True)
    assert again.ready and again.detail.startswith(arn)


def test_someone_elses_role_is_used_and_never_overwritten(aws):
    iam = boto3.client("iam")
    theirs = iam.create_role(
        RoleName="their-apigw-logs", AssumeRolePolicyDocument=json.dumps({"Statement": []})
    )["Role"]["Arn"]
    apigateway = boto3.client("apigateway")
    apigateway.update_account(
        patchOperations=[{"op": "replace", "path": "/cloudwatchRoleArn", "value": theirs}]
    )
    assert readiness.api_logging_role(session(), create=True).ready
    assert apigateway.get_account()["cloudwatchRoleArn"] == theirs
    with pytest.raises(iam.exceptions.NoSuchEntityException):
        iam.get_role(RoleName=readiness.API_LOGGING_ROLE_NAME)


def test_a_setting_that_names_a_deleted_role_is_not_trusted(aws):
    gone = "arn:aws:iam::123456789012:role/deleted-long-ago"
    boto3.client("apigateway").update_account(
        patchOperations=[{"op": "replace", "path": "/cloudwatchRoleArn", "value": gone}]
    )
    finding = readiness.api_logging_role(session(), create=False)
    assert not finding.ready and f"names {gone}, which no longer exists" in finding.detail


def test_a_model_never_used_is_said_with_how_to_enable_it(control):
    control.agreement, control.use_case_submitted = "NOT_AVAILABLE", False
    model, use_case = readiness.model_access(session(), MODEL, enable=False)
    assert not model.ready and "not subscribed yet (Marketplace agreement NOT_AVAILABLE)" in (
        model.detail
    )
    assert "aws-marketplace:Subscribe" in model.detail and "--enable-model" in model.detail
    assert not use_case.ready and "Model access" in use_case.detail
    # The profile's foundation model is what is checked; nothing was invoked.
    assert control.calls == [
        "GetFoundationModelAvailability anthropic.claude-haiku-4-5-20251001-v1:0",
        "GetUseCaseForModelAccess",
    ]


def test_enable_model_makes_the_first_call_as_the_person_deploying(control):
    control.agreement = "NOT_AVAILABLE"
    (model, use_case) = readiness.model_access(session(), MODEL, enable=True)
    assert model.ready and "subscribes the account" in model.detail and use_case.ready
    assert control.calls[-1] == f"Converse {MODEL}"  # the profile, as the worker calls it


def test_a_first_call_that_is_refused_says_why(control):
    control.agreement = "NOT_AVAILABLE"
    control.converse_error = (
        "AccessDeniedException",
        "Model access is denied due to IAM user or service role is not authorized to perform "
        "the required AWS Marketplace actions (aws-marketplace:ViewSubscriptions, "
        "aws-marketplace:Subscribe)",
    )
    (model, _) = readiness.model_access(session(), MODEL, enable=True)
    assert not model.ready and "AccessDeniedException: Model access is denied" in model.detail


def test_a_subscribed_model_is_ready_and_other_models_need_no_use_case(control):
    (model,) = readiness.model_access(session(), "amazon.nova-lite-v1:0", enable=False)
    assert model.ready and control.calls == ["GetFoundationModelAvailability amazon.nova-lite-v1:0"]


def test_a_model_not_offered_here_is_said(control):
    control.region = "NOT_AVAILABLE"
    (model,) = readiness.model_access(session(), "amazon.nova-lite-v1:0", enable=True)
    assert not model.ready and "is not offered in us-east-1" in model.detail
    assert not any(call.startswith("Converse") for call in control.calls)


GPU, CPU = "ml.g4dn.xlarge", "ml.c5.xlarge"  # moto's instance types (tests/moto_endpoints.py)
QUOTA = f"{GPU} for endpoint usage"


@pytest.mark.parametrize(
    ("value", "ready", "blocks", "said"),
    [
        (0.0, False, True, "needs 1 to start"),
        (1.0, False, False, "no update would fit even at 1 running (it needs 2)"),
        (
            2.0,
            True,
            False,
            "autoscaling stops at 2 of its 4; an update brings up a second fleet "
            "beside the first, so updates fit only while at most 1 run",
        ),
        (
            8.0,
            True,
            False,
            "autoscaling may run all 4; an update (a second fleet beside the first) fits even at 4",
        ),
    ],
)
def test_a_first_deploy_needs_the_minimum_and_says_what_updates_will_need(
    control, value, ready, blocks, said
):
    control.quotas = {"ml.g5.xlarge for endpoint usage": 8.0, QUOTA: value}
    finding = readiness.endpoint_instance_quota(session(), GPU, 1, 4)
    assert (finding.ready, finding.blocks) == (ready, blocks) and said in finding.detail


def test_other_endpoints_instances_of_the_type_count_against_the_quota(control):
    deploy_endpoint("someone-elses", "torch", GPU, instances=3)
    deploy_endpoint("a-cpu-one", "onnx", CPU, instances=2)  # another type: its own quota
    control.quotas = {QUOTA: 3.0}
    finding = readiness.endpoint_instance_quota(session(), GPU, 1, 4)
    assert finding.blocks and finding.detail.startswith("3 (3 held by someone-elses): 0 free")
    assert "request an increase to at least 4 in Service Quotas (quota L-00000000)" in (
        finding.detail
    )
    control.quotas = {QUOTA: 4.0}  # starts, but an update would need 2 free
    finding = readiness.endpoint_instance_quota(session(), GPU, 1, 4)
    assert (finding.ready, finding.blocks) == (False, False)
    assert "request an increase to at least 5" in finding.detail


def test_an_update_needs_room_for_a_second_fleet_of_what_runs_now(control):
    """Blue/green: 3 running instances need 3 more while the update runs. The check asked only
    for the minimum (1), and an update at 3 would have failed after minutes."""
    deploy_endpoint(ENDPOINT, "torch", GPU, instances=3)
    deployed = deployed_endpoint.describe_endpoint(session(), ENDPOINT)
    control.quotas = {QUOTA: 4.0}
    finding = readiness.endpoint_instance_quota(session(), GPU, 1, 4, deployed=deployed)
    assert finding.blocks
    assert f"{ENDPOINT} runs 3 {GPU}, and an update starts a second fleet of 3" in finding.detail
    assert "6 at once: only 4 free" in finding.detail
    assert "request an increase to at least 6" in finding.detail
    assert "or wait until autoscaling has scaled in to 2" in finding.detail
    control.quotas = {QUOTA: 6.0}
    finding = readiness.endpoint_instance_quota(session(), GPU, 1, 4, deployed=deployed)
    assert (
        finding.ready
        and "6 at once: 6 free (later updates fit while at most 3 of its 4 run)" in (finding.detail)
    )


def test_an_update_to_another_instance_type_needs_only_the_new_fleet_of_that_type(control):
    deploy_endpoint(ENDPOINT, "torch", GPU, instances=3)
    deployed = deployed_endpoint.describe_endpoint(session(), ENDPOINT)
    other = "ml.g4dn.2xlarge for endpoint usage"
    control.quotas = {QUOTA: 0.0, other: 3.0}  # the old fleet's own quota is not this one
    finding = readiness.endpoint_instance_quota(
        session(), "ml.g4dn.2xlarge", 1, 4, deployed=deployed
    )
    assert finding.ready and "the update starts 3 ml.g4dn.2xlarge beside them" in finding.detail
    control.quotas = {other: 1.0}
    finding = readiness.endpoint_instance_quota(
        session(), "ml.g4dn.2xlarge", 1, 4, deployed=deployed
    )
    assert finding.blocks and "only 1 free" in finding.detail
    assert "wait until autoscaling has scaled in to 1" in finding.detail


def test_an_update_with_no_room_to_wait_for_names_only_the_increase(control):
    deploy_endpoint(ENDPOINT, "torch", GPU, instances=1)
    deploy_endpoint("someone-elses", None, GPU, instances=2)
    deployed = deployed_endpoint.describe_endpoint(session(), ENDPOINT)
    control.quotas = {QUOTA: 3.0}  # 2 elsewhere + 1 running: the second fleet has no room
    finding = readiness.endpoint_instance_quota(session(), GPU, 1, 4, deployed=deployed)
    assert finding.blocks and "2 at once: only 1 free" in finding.detail
    assert "at least 4" in finding.detail and "wait" not in finding.detail


def test_a_deployed_endpoint_says_its_engine_from_its_container(aws):
    assert deployed_endpoint.describe_endpoint(session(), ENDPOINT) is None
    deploy_endpoint(ENDPOINT, "onnx", CPU, instances=2)
    deployed = deployed_endpoint.describe_endpoint(session(), ENDPOINT)
    assert (deployed.engine, deployed.instance_type, deployed.instances) == ("onnx", CPU, 2)
    assert deployed.status == "InService"
    deploy_endpoint("someone-elses", None, GPU)
    assert deployed_endpoint.describe_endpoint(session(), "someone-elses").engine is None


# --- the prebuilt image --------------------------------------------------------------------------

REPOSITORY = "voicewire-speech"
REGISTRY = "123456789012.dkr.ecr.us-east-1.amazonaws.com"
DOCKER_V2 = "application/vnd.docker.distribution.manifest.v2+json"


def push(tag: str, media_type: str) -> str:
    """An image manifest into moto's ECR under ``tag``; its digest."""
    ecr = boto3.client("ecr", region_name="us-east-1")
    with contextlib.suppress(ecr.exceptions.RepositoryAlreadyExistsException):
        ecr.create_repository(repositoryName=REPOSITORY)
    manifest = {
        "schemaVersion": 2,
        "mediaType": media_type,
        "tag": tag,
        "config": {
            "mediaType": "application/vnd.docker.container.image.v1+json",
            "size": 2,
            "digest": "sha256:" + "0" * 64,
        },
        "layers": [],
    }
    image = ecr.put_image(
        repositoryName=REPOSITORY,
        imageManifest=json.dumps(manifest),
        imageTag=tag,
        imageManifestMediaType=media_type,
    )["image"]
    return image["imageId"]["imageDigest"]


def test_an_image_pushed_with_docker_media_types_is_taken_by_tag_or_digest(aws):
    digest = push("v1", DOCKER_V2)
    for uri in (f"{REGISTRY}/{REPOSITORY}:v1", f"{REGISTRY}/{REPOSITORY}@{digest}"):
        finding = readiness.endpoint_image(session(), uri, "torch")
        assert finding.ready and finding.detail.startswith(f"{digest}, {DOCKER_V2}")


@pytest.mark.parametrize(
    "media_type",
    ["application/vnd.oci.image.manifest.v1+json", "application/vnd.oci.image.index.v1+json"],
)
def test_an_oci_image_is_refused_with_how_to_push_it_as_docker_v2(aws, media_type):
    push("oci", media_type)
    uri = f"{REGISTRY}/{REPOSITORY}:oci"
    finding = readiness.endpoint_image(session(), uri, "torch")
    assert finding.blocks and f"its manifest is OCI ({media_type})" in finding.detail
    assert "SageMaker refuses OCI manifests" in finding.detail
    assert (
        f"--provenance=false --output type=image,name={uri},oci-mediatypes=false,push=true "
        "-f container/Dockerfile --target gpu ."  # the torch engine's image
    ) in finding.detail


def test_an_image_that_is_not_there_is_one_sentence(aws):
    missing_repository = readiness.endpoint_image(session(), f"{REGISTRY}/nowhere:v1", "onnx")
    assert missing_repository.blocks
    assert missing_repository.detail == (
        "account 123456789012 has no repository nowhere in us-east-1: push the image first"
    )
    push("v1", DOCKER_V2)
    for reference, said in (
        (":v2", "the tag v2"),
        ("", "the tag latest"),
        ("@sha256:" + "1" * 64, "the digest sha256:111"),
    ):
        finding = readiness.endpoint_image(session(), f"{REGISTRY}/{REPOSITORY}{reference}", "onnx")
        assert finding.blocks and f"has no image with {said}" in finding.detail


# --- Lambda's concurrency ------------------------------------------------------------------------


def test_a_new_accounts_lambda_concurrency_is_said_against_the_speech_fleet(control):
    """A new account's 10 concurrent executions: about 6 turns at once, against the 152
    conversations 4 instances serve; each turn holds its worker up to its timeout."""
    control.lambda_concurrency = 10
    finding = readiness.lambda_concurrency(
        session(), speech_sessions=152, stage_rate=152.0, worker=WorkerPolicy()
    )
    assert (finding.ready, finding.blocks) == (False, False)
    assert finding.detail.startswith(
        "10 unreserved of 10 concurrent executions in us-east-1: about 6 turns can speak at once"
    )
    assert "the 152 conversations the speech fleet serves at its largest" in finding.detail
    assert "152 actions a second the stage throttle admits (up to 18240 turns" in finding.detail
    assert "one that waits over 30 s ends turn_expired" in finding.detail
    assert "at least 156 in Service Quotas (quota L-B99A9384)" in finding.detail
    assert control.calls == ["GetAccountSettings"]


def test_reserved_concurrency_leaves_less_for_the_turns(control):
    control.lambda_concurrency, control.lambda_unreserved = 1000, 120  # 880 reserved elsewhere
    finding = readiness.lambda_concurrency(
        session(), speech_sessions=152, stage_rate=152.0, worker=WorkerPolicy()
    )
    assert not finding.ready and "about 116 turns" in finding.detail
    assert "at least 1036" in finding.detail  # 880 reserved + 152 turns + 4 short routes
    control.lambda_unreserved = None
    assert readiness.lambda_concurrency(
        session(), speech_sessions=152, stage_rate=152.0, worker=WorkerPolicy()
    ).ready


def test_what_the_account_needs_is_one_block_of_lines():
    text = readiness.render(
        "123456789012",
        "us-east-1",
        [
            readiness.Finding("API Gateway CloudWatch role", True, "arn:aws:iam::1:role/r"),
            readiness.Finding("Bedrock model m", False, "not subscribed yet"),
        ],
    )
    assert text.splitlines() == [
        "account 123456789012, us-east-1: 1 thing(s) still needed",
        "  ok    API Gateway CloudWatch role: arn:aws:iam::1:role/r",
        "  NEED  Bedrock model m: not subscribed yet",
    ]


# --- Transcribe's concurrent streams -----------------------------------------------------------

# The stand-in's names: the page's streams count against the WebSocket one, not Transcribe
# Medical's nor the SDKs' HTTP/2 one (the quota's exact name on AWS is unverified: the check
# matches words, docs/decisions.md).
STREAMS = "Concurrent WebSocket streams for streaming transcription"
MEDICAL = "Concurrent WebSocket streams for Amazon Transcribe Medical streaming transcription"
HTTP2 = "Concurrent HTTP/2 streams for streaming transcription"


def test_transcribes_default_of_25_streams_is_said_against_the_conversations(control):
    """A fresh account has no applied value (ListServiceQuotas lists none): AWS's default is
    read. 25 streams are about 12 listening conversations; 152 need 304."""
    control.defaults = {"transcribe": {MEDICAL: 20.0, HTTP2: 25.0, STREAMS: 25.0}}
    finding = readiness.transcribe_streams(session(), conversations=152)
    assert (finding.ready, finding.blocks) == (False, False)  # deploying is not stopped
    assert finding.detail.startswith(
        f"'{STREAMS}' is 25 in us-east-1: about 12 conversations can listen at once"
    )
    assert "against the 152 the speech fleet serves at its largest" in finding.detail
    assert "refused with LimitExceededException" in finding.detail
    code = f"L-{zlib.crc32(STREAMS.encode()):08X}"
    assert f"request an increase to at least 304 in Service Quotas (quota {code})" in (
        finding.detail
    )
    assert control.calls == [
        "ListServiceQuotas transcribe",
        "ListAWSDefaultServiceQuotas transcribe",
    ]


def test_an_applied_transcribe_quota_is_the_one_read(control):
    control.applied = {"transcribe": {STREAMS: 400.0}}
    control.defaults = {"transcribe": {STREAMS: 25.0}}
    finding = readiness.transcribe_streams(session(), conversations=152)
    assert finding.ready and finding.detail.startswith(f"'{STREAMS}' is 400 in us-east-1")
    assert "about 200 conversations can listen at once" in finding.detail
    assert control.calls == ["ListServiceQuotas transcribe"]
    # Exactly enough: two streams for each conversation.
    control.applied = {"transcribe": {STREAMS: 304.0}}
    assert readiness.transcribe_streams(session(), conversations=152).ready
    control.applied = {"transcribe": {STREAMS: 303.0}}
    assert not readiness.transcribe_streams(session(), conversations=152).ready


def test_a_region_that_lists_no_such_quota_is_said_with_the_documented_default(control):
    control.defaults = {"transcribe": {MEDICAL: 20.0}}  # the medical one is not ours
    finding = readiness.transcribe_streams(session(), conversations=152)
    assert not finding.ready
    assert finding.detail.startswith(
        "Service Quotas names no WebSocket streaming quota for Transcribe in us-east-1; AWS's "
        "documented default is 25: about 12 conversations"
    )
    assert "at least 304 in Service Quotas (Amazon Transcribe's concurrent WebSocket streams)" in (
        finding.detail
    )


def test_no_permission_to_read_quotas_is_said_not_guessed(aws, monkeypatch):
    # Nothing answers on this port: the check cannot run, and says so.
    monkeypatch.setenv("AWS_ENDPOINT_URL_SERVICE_QUOTAS", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    finding = readiness.transcribe_streams(session(), conversations=152)
    assert not finding.ready and finding.detail.startswith("could not be checked (")
