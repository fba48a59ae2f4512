"""What a first deployment needs from the account (``account_readiness``), through boto3's real
clients: IAM and API Gateway on moto; Bedrock's model access and Service Quotas, which moto lacks,
on a stand-in speaking their wire shapes (``aws_control_standin``)."""

from __future__ import annotations

import json

import boto3
import pytest
from aws_control_standin import Account, serve

from voicewire_tools.commands import account_readiness as readiness

MODEL = "us.anthropic.claude-haiku-4-5-20251001-v1:0"


@pytest.fixture
def control(aws, monkeypatch):
    account = Account()
    with serve(account) as server:
        for service in ("BEDROCK", "BEDROCK_RUNTIME", "SERVICE_QUOTAS"):
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


@pytest.mark.parametrize(
    ("value", "ready", "blocks", "said"),
    [(0.0, False, True, "needs 1 to start"), (2.0, True, False, "autoscaling stops at 2 of its 4"),
     (4.0, True, False, "runs 1 to 4")],
)  # fmt: skip
def test_the_endpoints_instance_quota(control, value, ready, blocks, said):
    control.quotas = {"ml.g4dn.xlarge for endpoint usage": 8.0,
                      "ml.g5.xlarge for endpoint usage": value}  # fmt: skip
    finding = readiness.endpoint_instance_quota(session(), "ml.g5.xlarge", 1, 4)
    assert (finding.ready, finding.blocks) == (ready, blocks) and said in finding.detail


def test_what_the_account_needs_is_one_block_of_lines():
    text = readiness.render("123456789012", "us-east-1", [
        readiness.Finding("API Gateway CloudWatch role", True, "arn:aws:iam::1:role/r"),
        readiness.Finding("Bedrock model m", False, "not subscribed yet"),
    ])  # fmt: skip
    assert text.splitlines() == [
        "account 123456789012, us-east-1: 1 thing(s) still needed",
        "  ok    API Gateway CloudWatch role: arn:aws:iam::1:role/r",
        "  NEED  Bedrock model m: not subscribed yet",
    ]
