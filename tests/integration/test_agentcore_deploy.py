"""`agent-infra deploy --runtime agentcore` up to the CDK CLI, on moto and the account stand-in."""

from __future__ import annotations

import boto3
import pytest
from test_infra_cli import deploys, standin  # noqa: F401 (fixtures: deploy up to the CDK CLI)

from functions.access.tickets import TOKEN_SECRET_PARAMETER
from voicewire_tools.commands import agent_infra


def test_deploy_checks_the_model_and_makes_no_token_secret(deploys, capsys):  # noqa: F811
    model = "us.anthropic.claude-haiku-4-5-20251001-v1:0"
    with pytest.raises(SystemExit) as exited:
        agent_infra.main(["deploy", "--runtime", "agentcore", "--bedrock-model-id", model])
    assert exited.value.code == 0
    ((action, stacks, context),) = deploys
    assert (action, stacks) == ("deploy", ["VoiceAgentRuntime"])
    # No access_logs; the speech engine read from the endpoint (its stall limit follows it).
    assert context == {"runtime": "agentcore", "bedrock_model_id": model, "speech_engine": "torch"}
    said = capsys.readouterr().out
    assert f"NEED  Bedrock model {model}: not subscribed yet" in said
    assert "API Gateway CloudWatch role" not in said
    ssm = boto3.client("ssm", region_name="us-east-1")
    with pytest.raises(ssm.exceptions.ParameterNotFound):
        ssm.get_parameter(Name=TOKEN_SECRET_PARAMETER)
