"""``speech-infra`` and ``agent-infra``: what they run, what they say when something is missing,
and the token secret's life, over moto's SSM and STS."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import boto3
import pytest
from required_tools import needs

from functions.auth_tokens import TOKEN_SECRET_PARAMETER, verify_token
from voicewire_tools import deployed_tickets
from voicewire_tools.commands import agent_infra, speech_infra
from voicewire_tools.commands.cdk_runner import (
    BOOTSTRAP_PARAMETER,
    CDK_CLI,
    InfraError,
    cdk_command,
    check_bootstrap,
)

ROOT = Path(__file__).resolve().parent.parent


def test_speech_infra_deploys_foundation_cache_endpoint_and_destroys_in_reverse(tmp_path):
    args = speech_infra.build_parser().parse_args(
        ["deploy", "kokoro-82m", "--instance-type", "ml.g6.2xlarge"]
    )
    staged = tmp_path / "staged"
    stacks, context = speech_infra.plan(args, staged)
    assert stacks == [
        "SpeechFoundation", "SpeechModelCache-kokoro-82m", "SpeechEndpoint-kokoro-82m",
    ]  # fmt: skip
    assert context == {
        "speech_model": "kokoro-82m",
        "engine": "torch",
        "instance_type": "ml.g6.2xlarge",
        "model_files": str(staged),
    }
    destroy = speech_infra.build_parser().parse_args(["destroy", "kokoro-82m"])
    # Nothing staged on this machine: the cache stack cannot be synthesized, so it is left.
    assert speech_infra.plan(destroy, staged)[0] == ["SpeechEndpoint-kokoro-82m"]
    staged.mkdir()
    (staged / "MANIFEST.json").write_text("{}")
    assert speech_infra.plan(destroy, staged)[0] == [
        "SpeechEndpoint-kokoro-82m", "SpeechModelCache-kokoro-82m",
    ]  # fmt: skip
    synth = speech_infra.build_parser().parse_args(["synth", "kokoro-82m", "--engine", "onnx"])
    assert speech_infra.plan(synth, tmp_path / "none")[0] == [
        "SpeechFoundation", "SpeechEndpoint-kokoro-82m",
    ]  # fmt: skip


def test_agent_infra_adds_the_page_after_the_api_and_destroys_it_first():
    parse = agent_infra.build_parser().parse_args
    deploy = parse(["deploy", "--bedrock-model-id", "m", "--allowed-origins", "https://a.example"])
    assert agent_infra.plan(deploy) == (
        ["VoiceApi"], {"bedrock_model_id": "m", "allowed_origins": "https://a.example"},
    )  # fmt: skip
    with_page = parse(["deploy", "--bedrock-model-id", "m", "--with-page"])
    assert agent_infra.plan(with_page) == (
        ["VoiceApi", "VoicePage"], {"bedrock_model_id": "m", "page": "true"},
    )  # fmt: skip
    destroy = parse(["destroy", "--with-page"])
    assert agent_infra.plan(destroy) == (["VoicePage", "VoiceApi"], {"page": "true"})
    binary = parse(["deploy", "--bedrock-model-id", "m", "--binary-audio"])
    assert agent_infra.plan(binary)[1] == {"bedrock_model_id": "m", "binary_audio": "true"}


@pytest.fixture
def deploys(aws, monkeypatch):
    """agent-infra deploy up to the CDK CLI, whose command and context are recorded instead;
    Bedrock's model access on a stand-in (moto lacks it)."""
    from aws_control_standin import Account, serve

    runs: list[tuple[str, list[str], dict[str, str]]] = []
    monkeypatch.setattr(agent_infra, "check_node", lambda: None)
    monkeypatch.setattr(
        agent_infra, "run_cdk",
        lambda action, stacks, context, needs_account: runs.append((action, stacks, context)) or 0,
    )  # fmt: skip
    monkeypatch.setenv("MOTO_IAM_LOAD_MANAGED_POLICIES", "true")
    account = Account(agreement="NOT_AVAILABLE")
    with serve(account) as server:
        monkeypatch.setenv("AWS_ENDPOINT_URL_BEDROCK", server.url)
        monkeypatch.setenv("AWS_ENDPOINT_URL_BEDROCK_RUNTIME", server.url)
        yield runs


def test_deploy_on_a_fresh_account_says_what_it_needs_and_deploys_a_stage_it_can_create(
    deploys, capsys
):
    model = "us.anthropic.claude-haiku-4-5-20251001-v1:0"
    with pytest.raises(SystemExit) as exited:
        agent_infra.main(["deploy", "--bedrock-model-id", model])
    assert exited.value.code == 0
    ((action, stacks, context),) = deploys
    assert (action, stacks, context["access_logs"]) == ("deploy", ["VoiceApi"], "false")
    said = capsys.readouterr().out
    assert "account 123456789012, us-east-1: 2 thing(s) still needed" in said
    assert "NEED  API Gateway CloudWatch role" in said and "WITHOUT access logs" in said
    assert f"NEED  Bedrock model {model}: not subscribed yet" in said
    assert "ok    Anthropic use-case form (once per account): submitted" in said


def test_deploy_with_consent_creates_the_logging_role_and_enables_the_model(deploys, capsys):
    model = "us.anthropic.claude-haiku-4-5-20251001-v1:0"
    with pytest.raises(SystemExit):
        agent_infra.main(["deploy", "--bedrock-model-id", model, "--create-api-logging-role",
                          "--enable-model"])  # fmt: skip
    ((_, _, context),) = deploys
    assert context["access_logs"] == "true"
    said = capsys.readouterr().out
    assert ": ready" in said and "created arn:aws:iam::123456789012:role/" in said


def test_speech_infra_stops_before_deploying_an_endpoint_the_quota_forbids(aws, monkeypatch):
    from aws_control_standin import Account, serve

    monkeypatch.setattr(speech_infra, "gather", lambda args, staged: pytest.fail("gathered"))
    account = Account(quotas={"ml.g5.xlarge for endpoint usage": 0.0})
    with serve(account) as server:
        monkeypatch.setenv("AWS_ENDPOINT_URL_SERVICE_QUOTAS", server.url)
        with pytest.raises(SystemExit) as exited:
            speech_infra.main(["deploy", "kokoro-82m"])
    message = str(exited.value.code)
    assert message.startswith("speech-infra deploy: SageMaker quota 'ml.g5.xlarge for endpoint")
    assert "request an increase in Service Quotas" in message


def test_the_cdk_cli_is_a_pinned_2x_release_run_on_this_interpreter():
    command = cdk_command("synth", ["VoiceApi"], {"bedrock_model_id": "m"})
    assert command[:3] == ["npx", "--yes", CDK_CLI] and CDK_CLI.startswith("aws-cdk@2.")
    assert command[command.index("--app") + 1] == f"{sys.executable} app.py"
    assert command[-2:] == ["--context", "bedrock_model_id=m"]


def _run(module: str, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", module, *args], capture_output=True, text=True, env=env,
        cwd=ROOT, timeout=120,
    )  # fmt: skip


def test_missing_node_is_one_line_with_the_fix(tmp_path):
    env = {**os.environ, "PATH": str(tmp_path)}  # nothing on it: no node, no npx
    result = _run("voicewire_tools.commands.speech_infra", "synth", "kokoro-82m", env=env)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("speech-infra synth: Node.js is not installed") and "install" in line


@needs("node")
def test_missing_credentials_are_one_line_with_the_fix(tmp_path):
    env = {key: value for key, value in os.environ.items() if not key.startswith("AWS_")}
    env |= {
        "AWS_CONFIG_FILE": str(tmp_path / "none"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    result = _run(
        "voicewire_tools.commands.agent_infra", "deploy", "--bedrock-model-id", "m", env=env
    )
    assert result.returncode != 0 and "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("agent-infra deploy: no AWS credentials found") and "aws sso" in line


def test_an_account_without_the_cdk_bootstrap_is_told_how_to_bootstrap(aws):
    with pytest.raises(
        InfraError, match=r"npx aws-cdk@2\.\S+ bootstrap aws://123456789012/us-east-1"
    ):
        check_bootstrap("123456789012", "us-east-1")
    boto3.client("ssm").put_parameter(Name=BOOTSTRAP_PARAMETER, Value="30", Type="String")
    check_bootstrap("123456789012", "us-east-1")  # bootstrapped: no error


def test_deploy_makes_the_token_secret_once_and_token_mints_from_it(aws):
    assert agent_infra.ensure_token_secret("us-east-1") is True
    assert agent_infra.ensure_token_secret("us-east-1") is False  # kept, never rotated by deploy
    stored = boto3.client("ssm").get_parameter(Name=TOKEN_SECRET_PARAMETER, WithDecryption=True)
    assert stored["Parameter"]["Type"] == "SecureString"
    token = deployed_tickets.deployed_token(600, "tester")
    assert verify_token(stored["Parameter"]["Value"], token).principal == "tester"


def test_token_without_a_deployment_says_to_deploy_first(aws):
    with pytest.raises(InfraError, match="agent-infra deploy"):
        deployed_tickets.deployed_token(600, "tester")


def test_the_demo_url_gets_a_fresh_ticket_per_connection_unless_it_has_one():
    from voicewire_tools.commands.demo import ticketed

    url = "wss://abc.execute-api.eu-west-1.amazonaws.com/prod"
    tickets = iter(["T1", "T2"])
    urls = ticketed(url + "?audio=base64", lambda: next(tickets))
    assert [urls(), urls()] == [url + "?audio=base64&token=T1", url + "?audio=base64&token=T2"]
    assert ticketed(url + "?audio=base64&token=X", lambda: "T") == url + "?audio=base64&token=X"


@needs("npx")
def test_the_cdk_cli_synthesizes_the_app_without_credentials(tmp_path):
    """The real CDK CLI (npm, pinned), as ``speech-infra synth`` runs it, with no account."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("AWS_")}
    env |= {"AWS_CONFIG_FILE": str(tmp_path / "none"), "AWS_EC2_METADATA_DISABLED": "true",
            "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none")}  # fmt: skip
    command = cdk_command("synth", ["VoiceApi"], {"bedrock_model_id": "amazon.nova-lite-v1:0"})
    result = subprocess.run(
        [*command, "--output", str(tmp_path / "cdk.out"), "--quiet"],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "cdk.out" / "VoiceApi.template.json").is_file()


# --- the model's files, gathered for SpeechModelCache --------------------------------------------


def model_directory(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "config.json").write_text('{"n_token": 178}')
    (root / "kokoro-v1_0.pth").write_bytes(os.urandom(300_000))
    return root


def test_staging_holds_exactly_the_files_and_their_manifest(tmp_path):
    import json

    from speech_server.model_assets import sha256_of
    from voicewire_tools.commands.model_weights import stage_model_files, torch_weight_files

    source = model_directory(tmp_path / "kokoro")
    voices = tmp_path / "voices.npz"
    voices.write_bytes(os.urandom(1000))
    files = {**torch_weight_files(source), "voices.npz": voices}
    staged = tmp_path / "staged"
    staged.mkdir()
    (staged / "stale.pt").write_bytes(b"from an older deploy")
    lines: list[str] = []
    stage_model_files(files, staged, "kokoro-82m", "torch", lines.append)
    assert sorted(p.name for p in staged.iterdir()) == [
        "MANIFEST.json", "config.json", "kokoro-v1_0.pth", "voices.npz",
    ]  # fmt: skip
    manifest = json.loads((staged / "MANIFEST.json").read_text())
    assert manifest["engine"] == "torch"
    assert manifest["sha256"]["kokoro-v1_0.pth"] == sha256_of(source / "kokoro-v1_0.pth")
    assert (staged / "kokoro-v1_0.pth").stat().st_ino == (source / "kokoro-v1_0.pth").stat().st_ino
    # Staging again: unchanged files are left; a changed one is replaced.
    (source / "config.json").unlink()
    (source / "config.json").write_text('{"n_token": 179}')
    again: list[str] = []
    stage_model_files(files, staged, "kokoro-82m", "torch", again.append)
    assert "kokoro-v1_0.pth: staged" in again
    assert (staged / "config.json").read_text() == '{"n_token": 179}'


def test_an_incomplete_model_directory_is_named_before_any_deploy(tmp_path):
    from voicewire_tools.commands.model_weights import torch_weight_files

    directory = model_directory(tmp_path / "kokoro")
    (directory / "kokoro-v1_0.pth").unlink()
    with pytest.raises(InfraError, match=r"lacks a \*\.pth weights file"):
        torch_weight_files(directory)
    with pytest.raises(InfraError, match="is not a directory"):
        torch_weight_files(tmp_path / "absent")


def test_the_onnx_engine_gathers_what_voicewire_assembles_and_npms_voices():
    """The CPU engine's files come from the local, checksum-verified assembly (no --weights)."""
    import numpy as np

    from voicewire_tools.commands.model_weights import ONNX_MODEL, VOICES, engine_files

    files = engine_files("onnx", progress=lambda line: None)
    assert set(files) == {ONNX_MODEL, VOICES} and all(p.is_file() for p in files.values())
    with np.load(files[VOICES]) as voices:
        assert "af_heart" in voices.files


def test_deploying_without_npm_says_how_to_get_the_voices(tmp_path, monkeypatch):
    from voicewire_tools.commands.model_weights import engine_files

    monkeypatch.setenv("VOICEWIRE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(InfraError, match=r"official voices are needed.*install Node\.js"):
        engine_files("onnx", progress=lambda line: None)
