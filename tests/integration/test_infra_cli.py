"""``speech-infra`` and ``agent-infra``: what they run, what they say when something is missing
or wrong (before anything is created), and the token secret's life, over moto (SSM, STS,
SageMaker's endpoints, ECR) and a stand-in for what moto lacks (``aws_control_standin``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import boto3
import pytest
from moto_endpoints import deploy_endpoint
from required_tools import needs

from functions.access.tickets import TOKEN_SECRET_PARAMETER, verify_token
from functions.worker.policy import worker_policy_for
from stacks.voice_api import VoiceApiSettings
from voicewire_tools import deployed_tickets
from voicewire_tools.commands import agent_infra, speech_infra
from voicewire_tools.commands.cdk_runner import (
    BOOTSTRAP_PARAMETER,
    CDK_CLI,
    InfraError,
    cdk_command,
    check_bootstrap,
)

ROOT = Path(__file__).resolve().parents[2]


def test_speech_infra_deploys_foundation_cache_endpoint_and_destroys_in_reverse(tmp_path):
    args = speech_infra.build_parser().parse_args(
        ["deploy", "kokoro-82m", "--instance-type", "ml.g6.2xlarge"]
    )
    staged = tmp_path / "staged"
    stacks, context = speech_infra.plan(args, staged)
    assert stacks == [
        "SpeechFoundation",
        "SpeechModelCache-kokoro-82m",
        "SpeechEndpoint-kokoro-82m",
    ]
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
        "SpeechEndpoint-kokoro-82m",
        "SpeechModelCache-kokoro-82m",
    ]
    synth = speech_infra.build_parser().parse_args(["synth", "kokoro-82m", "--engine", "onnx"])
    assert speech_infra.plan(synth, tmp_path / "none")[0] == [
        "SpeechFoundation",
        "SpeechEndpoint-kokoro-82m",
    ]


def test_agent_infra_adds_the_page_after_the_api_and_destroys_it_first():
    parse = agent_infra.build_parser().parse_args
    deploy = parse(["deploy", "--bedrock-model-id", "m", "--allowed-origins", "https://a.example"])
    assert agent_infra.plan(deploy) == (
        ["VoiceApi"],
        {"bedrock_model_id": "m", "allowed_origins": "https://a.example"},
    )
    with_page = parse(["deploy", "--bedrock-model-id", "m", "--with-page"])
    assert agent_infra.plan(with_page) == (
        ["VoiceApi", "VoicePage"],
        {"bedrock_model_id": "m", "page": "true"},
    )
    destroy = parse(["destroy", "--with-page"])
    assert agent_infra.plan(destroy) == (["VoicePage", "VoiceApi"], {"page": "true"})
    binary = parse(["deploy", "--bedrock-model-id", "m", "--binary-audio"])
    assert agent_infra.plan(binary)[1] == {"bedrock_model_id": "m", "binary_audio": "true"}


# Transcribe's WebSocket streams quota, as the stand-in names it (tests/integration/
# test_account_readiness.py says why the name is matched, not known).
STREAMS = "Concurrent WebSocket streams for streaming transcription"


@pytest.fixture
def standin(aws, monkeypatch):
    """What moto lacks (Bedrock's model access, Service Quotas, Lambda's account settings) on a
    stand-in speaking their wire shapes; the rest on moto."""
    from aws_control_standin import Account, serve

    # A fresh account: Transcribe's default quota only (no value applied to the account).
    account = Account(agreement="NOT_AVAILABLE", defaults={"transcribe": {STREAMS: 25.0}})
    with serve(account) as server:
        for service in ("BEDROCK", "BEDROCK_RUNTIME", "SERVICE_QUOTAS", "LAMBDA"):
            monkeypatch.setenv(f"AWS_ENDPOINT_URL_{service}", server.url)
        yield account


@pytest.fixture
def deploys(standin, monkeypatch):
    """agent-infra deploy up to the CDK CLI, whose command and context are recorded instead,
    on an account where speech-infra deployed the default endpoint (the torch engine)."""
    runs: list[tuple[str, list[str], dict[str, str]]] = []
    monkeypatch.setattr(agent_infra, "check_node", lambda: None)
    monkeypatch.setattr(
        agent_infra,
        "run_cdk",
        lambda action, stacks, context, needs_account: runs.append((action, stacks, context)) or 0,
    )
    monkeypatch.setenv("MOTO_IAM_LOAD_MANAGED_POLICIES", "true")
    deploy_endpoint("voicewire-kokoro-82m", "torch", GPU)
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
    assert "account 123456789012, us-east-1: 3 thing(s) still needed" in said
    assert f"NEED  Transcribe concurrent WebSocket streams (speech in): '{STREAMS}' is 25" in said
    assert "NEED  API Gateway CloudWatch role" in said and "WITHOUT access logs" in said
    assert f"NEED  Bedrock model {model}: not subscribed yet" in said
    assert "ok    Anthropic use-case form (once per account): submitted" in said


def test_deploy_with_consent_creates_the_logging_role_and_enables_the_model(
    deploys, standin, capsys
):
    model = "us.anthropic.claude-haiku-4-5-20251001-v1:0"
    standin.applied = {"transcribe": {STREAMS: 400.0}}  # raised already: not one of the needs
    with pytest.raises(SystemExit):
        agent_infra.main(
            ["deploy", "--bedrock-model-id", model, "--create-api-logging-role", "--enable-model"]
        )
    ((_, _, context),) = deploys
    assert context["access_logs"] == "true"
    said = capsys.readouterr().out
    assert ": ready" in said and "created arn:aws:iam::123456789012:role/" in said


def test_speech_infra_stops_before_deploying_an_endpoint_the_quota_forbids(standin, monkeypatch):
    monkeypatch.setattr(speech_infra, "gather", lambda args, staged: pytest.fail("gathered"))
    standin.quotas = {"ml.g5.xlarge for endpoint usage": 0.0}
    with pytest.raises(SystemExit) as exited:
        speech_infra.main(["deploy", "kokoro-82m"])
    message = str(exited.value.code)
    assert message.startswith("speech-infra deploy: SageMaker quota 'ml.g5.xlarge for endpoint")
    assert "request an increase to at least 1 in Service Quotas" in message


# --- the engine the endpoint runs, and what an update of it needs -------------------------------

GPU, CPU = "ml.g4dn.xlarge", "ml.c5.xlarge"  # moto's instance types (tests/moto_endpoints.py)


@pytest.fixture
def speech_deploys(standin, monkeypatch):
    """speech-infra deploy up to the CDK CLI (recorded instead), the model's files not gathered;
    room for a few instances of each type."""
    runs: list[tuple[str, list[str], dict[str, str]]] = []
    monkeypatch.setattr(speech_infra, "check_node", lambda: None)
    monkeypatch.setattr(speech_infra, "gather", lambda args, staged: runs.append(("gather",)))
    monkeypatch.setattr(
        speech_infra,
        "run_cdk",
        lambda action, stacks, context, needs_account: runs.append((action, stacks, context)) or 0,
    )
    standin.quotas = {f"{GPU} for endpoint usage": 8.0, f"{CPU} for endpoint usage": 8.0}
    return runs


def test_a_cpu_endpoint_updated_without_its_engine_is_refused_naming_both(speech_deploys):
    """`speech-infra deploy kokoro-82m-cpu` forgetting `--engine onnx` would have replaced the
    ONNX endpoint with a torch one (and its agents' limits would no longer match)."""
    deploy_endpoint("voicewire-kokoro-82m-cpu", "onnx", CPU, instances=2)
    with pytest.raises(SystemExit) as exited:
        speech_infra.main(["deploy", "kokoro-82m-cpu", "--instance-type", GPU])
    assert str(exited.value.code) == (
        "speech-infra deploy: voicewire-kokoro-82m-cpu runs the onnx engine (2 ml.c5.xlarge, "
        "InService), and this deploy would replace it with the torch engine: add --engine onnx "
        "to update it as it is, or --replace-engine to switch it to torch (then deploy its "
        "agents again: agent-infra deploy reads the engine, and their time limits follow it)"
    )
    assert speech_deploys == []  # nothing gathered, nothing deployed


def test_replace_engine_switches_it_and_says_to_deploy_the_agents_again(speech_deploys, capsys):
    deploy_endpoint("voicewire-kokoro-82m-cpu", "onnx", CPU, instances=2)
    with pytest.raises(SystemExit) as exited:
        speech_infra.main(["deploy", "kokoro-82m-cpu", "--instance-type", GPU, "--replace-engine"])
    assert exited.value.code == 0
    assert [run[0] for run in speech_deploys] == ["gather", "deploy"]
    said = capsys.readouterr().out
    assert "ok    speech endpoint voicewire-kokoro-82m-cpu: runs the onnx engine" in said
    assert "replaces its engine with torch (--replace-engine): deploy its agents again" in said
    # A new type: only the new fleet (2) counts against its quota.
    assert f"the update starts 2 {GPU} beside them" in said


def test_the_same_engine_updates_and_counts_the_second_fleet(speech_deploys, standin, capsys):
    deploy_endpoint("voicewire-kokoro-82m-cpu", "onnx", CPU, instances=3)
    standin.quotas[f"{CPU} for endpoint usage"] = 5.0
    argv = ["deploy", "kokoro-82m-cpu", "--engine", "onnx", "--instance-type", CPU]
    with pytest.raises(SystemExit) as exited:
        speech_infra.main(argv)
    message = str(exited.value.code)
    assert message.startswith(f"speech-infra deploy: SageMaker quota '{CPU} for endpoint usage'")
    assert "a second fleet of 3 beside them" in message and "6 at once: only 5 free" in message
    assert speech_deploys == []
    standin.quotas[f"{CPU} for endpoint usage"] = 6.0
    with pytest.raises(SystemExit) as exited:
        speech_infra.main(argv)
    assert exited.value.code == 0 and [run[0] for run in speech_deploys] == ["gather", "deploy"]
    assert "ok    speech endpoint voicewire-kokoro-82m-cpu: runs the onnx engine (3" in (
        capsys.readouterr().out
    )


def test_an_endpoint_voicewire_did_not_deploy_is_not_taken_over(speech_deploys):
    deploy_endpoint("voicewire-kokoro-82m", None, GPU)
    with pytest.raises(SystemExit) as exited:
        speech_infra.main(["deploy", "kokoro-82m", "--instance-type", GPU])
    assert "is not one voicewire deployed (its model sets no VOICEWIRE_ENGINE)" in str(
        exited.value.code
    )
    assert speech_deploys == []


def test_an_oci_image_is_refused_before_anything_is_gathered(speech_deploys):
    ecr = boto3.client("ecr")
    ecr.create_repository(repositoryName="voicewire-speech")
    oci = "application/vnd.oci.image.manifest.v1+json"
    ecr.put_image(
        repositoryName="voicewire-speech",
        imageTag="v1",
        imageManifestMediaType=oci,
        imageManifest=json.dumps({"schemaVersion": 2, "mediaType": oci, "layers": []}),
    )
    uri = "123456789012.dkr.ecr.us-east-1.amazonaws.com/voicewire-speech:v1"
    with pytest.raises(SystemExit) as exited:
        speech_infra.main(["deploy", "kokoro-82m", "--instance-type", GPU, "--image-uri", uri])
    message = str(exited.value.code)
    assert message.startswith(f"speech-infra deploy: image {uri}: its manifest is OCI ({oci})")
    assert "oci-mediatypes=false" in message and speech_deploys == []
    with pytest.raises(SystemExit) as exited:
        speech_infra.main(
            [
                "deploy",
                "kokoro-82m",
                "--instance-type",
                GPU,
                "--image-uri",
                uri.replace(":v1", ":v2"),
            ]
        )
    assert str(exited.value.code).endswith("has no image with the tag v2: push it first")


def test_an_image_outside_ecr_is_one_sentence_before_the_account_is_asked(monkeypatch):
    monkeypatch.setattr(speech_infra, "check_account", lambda: pytest.fail("asked"))
    with pytest.raises(SystemExit) as exited:
        speech_infra.main(["deploy", "kokoro-82m", "--image-uri", "docker.io/someone/speech:1"])
    assert str(exited.value.code).startswith(
        "speech-infra deploy: image_uri 'docker.io/someone/speech:1' is not an Amazon ECR image"
    )


def test_an_engine_whose_image_the_dockerfile_cannot_build_is_one_sentence_first(monkeypatch):
    from stacks import speech_image

    monkeypatch.setitem(speech_image.ENGINE_TARGETS, "onnx", "cpu-gone")
    monkeypatch.setattr(speech_infra, "check_account", lambda: pytest.fail("asked"))
    with pytest.raises(SystemExit) as exited:
        speech_infra.main(["deploy", "kokoro-82m-cpu", "--engine", "onnx"])
    message = str(exited.value.code)
    assert message.startswith("speech-infra deploy: ") and "has no 'cpu-gone' target" in message


def _worker_line(engine: str) -> str:
    policy = worker_policy_for(engine, VoiceApiSettings.max_speech_seconds_per_turn)
    return (
        f"the worker gets a {policy.timeout_seconds} s timeout and a "
        f"{policy.speech_chunk_timeout_seconds:g} s speech stall limit"
    )


@pytest.mark.parametrize("command", ["deploy", "diff"])
def test_the_agent_gets_the_time_limits_of_the_engine_its_endpoint_runs(deploys, capsys, command):
    """A CPU endpoint's agent got the GPU's 120 s and 10 s stall limit: agent-infra never
    passed the endpoint's engine."""
    deploy_endpoint("voicewire-kokoro-82m-cpu", "onnx", CPU)
    with pytest.raises(SystemExit):
        agent_infra.main(
            [command, "--bedrock-model-id", "m", "--endpoint-name", "voicewire-kokoro-82m-cpu"]
        )
    ((_, _, context),) = deploys
    assert context["speech_engine"] == "onnx"
    assert (
        f"speech: voicewire-kokoro-82m-cpu runs the onnx engine (1 {CPU}, InService): "
        f"{_worker_line('onnx')}"
    ) in capsys.readouterr().out
    assert _worker_line("onnx") != _worker_line("torch")


def test_the_agentcore_app_gets_the_stall_limit_of_the_engine_its_endpoint_runs(deploys, capsys):
    deploy_endpoint("voicewire-kokoro-82m-cpu", "onnx", CPU)
    with pytest.raises(SystemExit):
        agent_infra.main(
            [
                "deploy",
                "--runtime",
                "agentcore",
                "--bedrock-model-id",
                "m",
                "--endpoint-name",
                "voicewire-kokoro-82m-cpu",
            ]
        )
    ((_, stacks, context),) = deploys
    assert (stacks, context["speech_engine"]) == (["VoiceAgentRuntime"], "onnx")
    stall = worker_policy_for("onnx", 360).speech_chunk_timeout_seconds
    said = capsys.readouterr().out
    assert f"the agent gets a {stall:g} s speech stall limit" in said
    assert "Transcribe concurrent WebSocket streams (speech in)" in said  # its /ws listens too


def test_a_speech_engine_the_endpoint_contradicts_is_refused_before_anything_is_made(deploys):
    deploy_endpoint("voicewire-kokoro-82m-cpu", "onnx", CPU)
    with pytest.raises(SystemExit) as exited:
        agent_infra.main(
            [
                "deploy",
                "--bedrock-model-id",
                "m",
                "--speech-engine",
                "torch",
                "--endpoint-name",
                "voicewire-kokoro-82m-cpu",
            ]
        )
    assert str(exited.value.code) == (
        "agent-infra deploy: --speech-engine torch, but voicewire-kokoro-82m-cpu runs the onnx "
        "engine (on ml.c5.xlarge): drop --speech-engine, or redeploy the endpoint with the torch "
        "engine first (speech-infra deploy kokoro-82m-cpu --engine torch --replace-engine)"
    )
    assert deploys == []
    with pytest.raises(boto3.client("ssm").exceptions.ParameterNotFound):
        boto3.client("ssm").get_parameter(Name=TOKEN_SECRET_PARAMETER)  # not even the secret


def test_an_endpoint_not_deployed_yet_needs_its_engine_named(deploys, capsys):
    argv = ["deploy", "--bedrock-model-id", "m", "--endpoint-name", "voicewire-kokoro-82m-cpu"]
    with pytest.raises(SystemExit) as exited:
        agent_infra.main(argv)
    assert str(exited.value.code) == (
        "agent-infra deploy: the speech endpoint voicewire-kokoro-82m-cpu does not exist in "
        "us-east-1, and the agent's time limits follow its engine: deploy it first (speech-infra "
        "deploy kokoro-82m-cpu [--engine onnx]) or name its engine with --speech-engine "
        "torch|onnx"
    )
    assert deploys == []
    with pytest.raises(SystemExit) as exited:
        agent_infra.main([*argv, "--speech-engine", "onnx"])
    assert exited.value.code == 0 and deploys[0][2]["speech_engine"] == "onnx"
    assert (
        "speech: voicewire-kokoro-82m-cpu, the onnx engine as --speech-engine says (unverified: "
        "not deployed yet)"
    ) in capsys.readouterr().out


def test_an_endpoint_that_does_not_say_its_engine_needs_it_named(deploys):
    deploy_endpoint("their-endpoint", None, GPU)
    argv = ["deploy", "--bedrock-model-id", "m", "--endpoint-name", "their-endpoint"]
    with pytest.raises(SystemExit) as exited:
        agent_infra.main(argv)
    assert "their-endpoint is not one voicewire deployed" in str(exited.value.code)
    assert "--speech-engine torch|onnx" in str(exited.value.code) and deploys == []
    with pytest.raises(SystemExit):
        agent_infra.main([*argv, "--speech-engine", "onnx"])
    assert deploys[0][2]["speech_engine"] == "onnx"


def test_synth_takes_the_engine_given_and_the_app_checks_it():
    parse = agent_infra.build_parser().parse_args
    assert "speech_engine" not in agent_infra.plan(parse(["synth", "--bedrock-model-id", "m"]))[1]
    given = parse(["synth", "--bedrock-model-id", "m", "--speech-engine", "onnx"])
    assert agent_infra.plan(given)[1]["speech_engine"] == "onnx"
    sys.path.insert(0, str(ROOT))
    import app

    assert app.speech_engine(None, "torch") == "torch"
    assert app.speech_engine(None, "onnx") == "onnx"  # the app's own endpoint's engine
    assert app.speech_engine("onnx", "torch") == "onnx"
    with pytest.raises(ValueError, match="speech_engine: expected one of torch, onnx"):
        app.speech_engine("cuda", "torch")


def test_the_agentcore_stack_follows_the_speech_engine_context(tmp_path):
    """The AgentCore app got the engine of the app's own endpoint (``engine``), never the one
    of the endpoint it speaks to."""
    sys.path.insert(0, str(ROOT))
    import app

    context = {"runtime": "agentcore", "speech_engine": "onnx"}
    built = app.build_app(str(tmp_path / "cdk.out"), context=context).synth()
    template = built.get_stack_by_name("VoiceAgentRuntime").template
    (runtime,) = [
        r["Properties"]
        for r in template["Resources"].values()
        if r["Type"] == "AWS::BedrockAgentCore::Runtime"
    ]
    stall = worker_policy_for("onnx", 360).speech_chunk_timeout_seconds
    assert runtime["EnvironmentVariables"]["VOICEWIRE_SPEECH_CHUNK_TIMEOUT_SECONDS"] == f"{stall:g}"


def test_a_small_accounts_lambda_concurrency_is_said_and_does_not_stop_the_deploy(
    deploys, standin, capsys
):
    standin.lambda_concurrency = 10
    with pytest.raises(SystemExit) as exited:
        agent_infra.main(["deploy", "--bedrock-model-id", "amazon.nova-lite-v1:0"])
    assert exited.value.code == 0 and len(deploys) == 1
    said = capsys.readouterr().out
    assert "NEED  Lambda concurrency (one execution per speaking turn): 10 unreserved" in said
    assert "about 6 turns can speak at once" in said and "quota L-B99A9384" in said
    # AWS's default of 25 streams is said against the fleet's conversations.
    assert "NEED  Transcribe concurrent WebSocket streams (speech in): '" in said


def test_the_cdk_cli_is_a_pinned_2x_release_run_on_this_interpreter():
    command = cdk_command("synth", ["VoiceApi"], {"bedrock_model_id": "m"})
    assert command[:3] == ["npx", "--yes", CDK_CLI] and CDK_CLI.startswith("aws-cdk@2.")
    assert command[command.index("--app") + 1] == f"{sys.executable} app.py"
    assert command[-2:] == ["--context", "bedrock_model_id=m"]


def _run(module: str, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )


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
    env |= {
        "AWS_CONFIG_FILE": str(tmp_path / "none"),
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
    }
    command = cdk_command("synth", ["VoiceApi"], {"bedrock_model_id": "amazon.nova-lite-v1:0"})
    result = subprocess.run(
        [*command, "--output", str(tmp_path / "cdk.out"), "--quiet"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=600,
    )
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
        "MANIFEST.json",
        "config.json",
        "kokoro-v1_0.pth",
        "voices.npz",
    ]
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
