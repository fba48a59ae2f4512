"""``speech-infra`` and ``agent-infra``: what they run, what they say when something is missing,
and the token secret's life, over moto's SSM and STS."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import boto3
import pytest

from functions.auth_tokens import TOKEN_SECRET_PARAMETER, verify_token
from voicewire_tools.commands import agent_infra, speech_infra
from voicewire_tools.commands.cdk_runner import (
    BOOTSTRAP_PARAMETER,
    CDK_CLI,
    InfraError,
    cdk_command,
    check_bootstrap,
)

ROOT = Path(__file__).resolve().parent.parent


def test_speech_infra_deploys_the_foundation_then_the_endpoint_and_destroys_the_endpoint():
    args = speech_infra.build_parser().parse_args(
        ["deploy", "kokoro-82m", "--instance-type", "ml.g6.2xlarge"]
    )
    stacks, context = speech_infra.plan(args)
    assert stacks == ["SpeechFoundation", "SpeechEndpoint-kokoro-82m"]
    assert context == {
        "speech_model": "kokoro-82m",
        "engine": "torch",
        "instance_type": "ml.g6.2xlarge",
    }
    destroy = speech_infra.build_parser().parse_args(["destroy", "kokoro-82m"])
    assert speech_infra.plan(destroy)[0] == ["SpeechEndpoint-kokoro-82m"]


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


@pytest.mark.skipif(shutil.which("node") is None, reason="Node.js is not installed")
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
    token = agent_infra.deployed_token(600, "tester")
    assert verify_token(stored["Parameter"]["Value"], token) == "tester"


def test_token_without_a_deployment_says_to_deploy_first(aws):
    with pytest.raises(InfraError, match="agent-infra deploy"):
        agent_infra.deployed_token(600, "tester")


def test_the_demo_url_gets_a_token_unless_it_has_one():
    url = "wss://abc.execute-api.eu-west-1.amazonaws.com/prod"
    assert agent_infra.with_token(url, "T") == url + "?token=T"
    assert agent_infra.with_token(url + "?audio=base64&token=X", "T").endswith(
        "?audio=base64&token=X"
    )


@pytest.mark.skipif(shutil.which("npx") is None, reason="npx is not installed")
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


# --- the model's weights into the bucket -------------------------------------------------------


def model_directory(root: Path) -> Path:
    (root / "voices").mkdir(parents=True)
    (root / "config.json").write_text('{"n_token": 178}')
    (root / "kokoro-v1_0.pth").write_bytes(os.urandom(300_000))
    for voice in ("af_heart", "am_adam"):
        (root / "voices" / f"{voice}.pt").write_bytes(os.urandom(20_000))
    return root


def test_weights_go_up_once_with_their_sha256_and_a_manifest(aws, tmp_path):
    import json

    from voicewire_tools.commands.model_weights import sha256_of, upload_weights, weights_in_bucket

    s3 = boto3.client("s3")
    s3.create_bucket(Bucket="weights")
    directory = model_directory(tmp_path / "kokoro")
    assert weights_in_bucket("weights", "kokoro-82m", s3) is False
    lines: list[str] = []
    first = upload_weights(directory, "weights", "kokoro-82m", s3, lines.append)
    assert sorted(first.uploaded) == [
        "config.json", "kokoro-v1_0.pth", "voices/af_heart.pt", "voices/am_adam.pt",
    ]  # fmt: skip
    assert any("uploading" in line and "[2/4]" in line for line in lines)  # progress shown
    head = s3.head_object(Bucket="weights", Key="models/kokoro-82m/kokoro-v1_0.pth")
    assert head["Metadata"]["sha256"] == sha256_of(directory / "kokoro-v1_0.pth")
    manifest = json.loads(
        s3.get_object(Bucket="weights", Key="models/kokoro-82m/MANIFEST.json")["Body"].read()
    )
    assert set(manifest["sha256"]) == set(first.uploaded)
    assert weights_in_bucket("weights", "kokoro-82m", s3) is True
    # A second deploy sends only what changed.
    (directory / "voices" / "am_adam.pt").write_bytes(os.urandom(20_000))
    second = upload_weights(directory, "weights", "kokoro-82m", s3, lines.append)
    assert second.uploaded == ["voices/am_adam.pt"] and len(second.unchanged) == 3


def test_an_incomplete_model_directory_is_named_before_any_deploy(tmp_path):
    from voicewire_tools.commands.model_weights import weight_files

    directory = model_directory(tmp_path / "kokoro")
    (directory / "kokoro-v1_0.pth").unlink()
    with pytest.raises(InfraError, match=r"lacks a \*\.pth weights file"):
        weight_files(directory)


def test_the_weights_bucket_is_found_from_the_deployed_foundation(aws):
    from voicewire_tools.commands.model_weights import weights_bucket

    cloudformation = boto3.client("cloudformation")
    with pytest.raises(InfraError, match="speech-infra deploy"):
        weights_bucket(cloudformation)
    template = {
        "Resources": {"Weights": {"Type": "AWS::S3::Bucket"}},
        "Outputs": {"WeightsBucket": {"Value": {"Ref": "Weights"}}},
    }
    import json

    cloudformation.create_stack(StackName="SpeechFoundation", TemplateBody=json.dumps(template))
    bucket = weights_bucket(cloudformation)
    assert bucket == boto3.client("s3").list_buckets()["Buckets"][0]["Name"]


def test_the_onnx_engine_uploads_what_voicewire_assembles(aws, onnx_engine, tmp_path):
    """The CPU engine's files come from the local, checksum-verified assembly (no --weights)."""
    from voicewire_tools.commands.model_weights import (
        ONNX_MODEL,
        ONNX_VOICES,
        onnx_files,
        upload_files,
        weights_in_bucket,
    )

    files = onnx_files(progress=lambda line: None)
    assert set(files) == {ONNX_MODEL, ONNX_VOICES} and all(p.is_file() for p in files.values())
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket="weights")
    small = {ONNX_VOICES: files[ONNX_VOICES]}  # the 90 MB model's upload is the same code path
    report = upload_files(small, "weights", "kokoro-82m-cpu", s3, lambda line: None)
    assert report.uploaded == [ONNX_VOICES]
    assert weights_in_bucket("weights", "kokoro-82m-cpu", s3)
    args = speech_infra.build_parser().parse_args(["synth", "kokoro-82m-cpu", "--engine", "onnx"])
    assert speech_infra.plan(args)[1] == {"speech_model": "kokoro-82m-cpu", "engine": "onnx"}
