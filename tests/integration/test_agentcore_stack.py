"""VoiceAgentRuntime (Bedrock AgentCore Runtime), synthesized offline with ``runtime=agentcore``:
the ARM64 image and its staged context, the runtime's settings, the execution role's exact
grants, the endpoint and outputs, cdk-nag; and the image's Dockerfile and context."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import tomllib
import urllib.request
from pathlib import Path
from urllib.parse import quote

import pytest

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

from aws_cdk.assertions import Template

from stacks.agent_image import (
    DOCKERFILE,
    BundleError,
    image_requirements,
    locked_versions,
    stage_agent_image,
)
from stacks.uv_lock import uv_command

ROOT = Path(__file__).resolve().parents[2]
KNOWLEDGE_BASE = "KB12345678"
MODEL = "us.anthropic.claude-haiku-4-5-20251001-v1:0"
SAMPLE_ARN = "arn:aws:bedrock-agentcore:eu-west-1:123456789012:runtime/voicewire_agent-AbCdEf1234"
# What aws-cdk-lib's Runtime grants every agent's role on "*": actions that take no resource.
CONSTRUCT_UNSCOPED_ACTIONS = {
    "xray:PutTraceSegments",
    "xray:PutTelemetryRecords",
    "xray:GetSamplingRules",
    "xray:GetSamplingTargets",
    "ecr:GetAuthorizationToken",
    "cloudwatch:PutMetricData",
}


def synthesized(outdir: Path, **context: str):
    sys.path.insert(0, str(ROOT))
    import app

    return app.build_app(str(outdir), context={"runtime": "agentcore", **context}).synth()


@pytest.fixture(scope="module")
def assembly(tmp_path_factory):
    outdir = tmp_path_factory.mktemp("cdk.out")
    return synthesized(outdir, knowledge_base_id=KNOWLEDGE_BASE, agent="strands")


@pytest.fixture(scope="module")
def template(assembly) -> Template:
    return Template.from_json(assembly.get_stack_by_name("VoiceAgentRuntime").template)


def only(template: Template, kind: str) -> dict:
    (found,) = template.find_resources(kind).values()
    return found["Properties"]


def policies(template: Template) -> dict[str, list[dict]]:
    """Each IAM policy's statements, by the policy's logical id."""
    return {
        logical: policy["Properties"]["PolicyDocument"]["Statement"]
        for logical, policy in template.find_resources("AWS::IAM::Policy").items()
    }


def as_list(value: object) -> list:
    return value if isinstance(value, list) else [value]


def resolve(value: object, attributes: dict[str, str]) -> object:
    """CloudFormation's intrinsics as the service evaluates them, for the few the outputs use."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return [resolve(item, attributes) for item in value]
    (name, argument), *_ = value.items()
    if name == "Ref":
        return attributes[argument]
    if name == "Fn::GetAtt":
        return attributes[".".join(argument)]
    if name == "Fn::Join":
        separator, parts = argument
        return separator.join(str(part) for part in as_list(resolve(parts, attributes)))
    if name == "Fn::Split":
        separator, source = argument
        return str(resolve(source, attributes)).split(separator)
    raise ValueError(name)


# --- the app's choice of front door -----------------------------------------------------------


def test_agentcore_replaces_the_websocket_api_and_the_default_is_unchanged(assembly, tmp_path):
    names = {stack.stack_name for stack in assembly.stacks}
    assert "VoiceAgentRuntime" in names and not names & {"VoiceApi", "VoicePage"}
    sys.path.insert(0, str(ROOT))
    import app

    with pytest.raises(ValueError, match="page=true needs the VoiceApi stack"):
        app.build_app(str(tmp_path / "a"), context={"runtime": "agentcore", "page": "true"})
    with pytest.raises(ValueError, match="runtime: expected one of apigateway, agentcore"):
        app.build_app(str(tmp_path / "b"), context={"runtime": "lambda"})
    default = app.build_app(str(tmp_path / "c"))
    assert {child.node.id for child in default.node.children} >= {"VoiceApi"}
    assert default.node.try_find_child("VoiceAgentRuntime") is None


# --- the runtime -------------------------------------------------------------------------------


def test_the_runtime_runs_the_arm64_image_built_from_the_staged_context(template, assembly):
    directory = Path(assembly.directory)
    manifest = json.loads((directory / "VoiceAgentRuntime.assets.json").read_text())
    ((digest, image),) = manifest["dockerImages"].items()
    assert image["source"]["platform"] == "linux/arm64"
    uri = only(template, "AWS::BedrockAgentCore::Runtime")["AgentRuntimeArtifact"]
    assert uri["ContainerConfiguration"]["ContainerUri"]["Fn::Sub"].endswith(f":{digest}")
    context = directory / image["source"]["directory"]
    top = {path.name for path in context.iterdir()}
    assert top == {
        "Dockerfile",
        "requirements.txt",
        "constraints.txt",
        "functions",
        "voicewire",
        "README.md",
        "docs",
    }
    assert (context / "Dockerfile").read_text() == DOCKERFILE.read_text()
    assert (context / "functions" / "agentcore" / "__main__.py").is_file()
    # What the agent does not reach stays out: the Lambda handlers, the speech server's code.
    assert not (context / "functions" / "handlers").exists()
    assert not list(context.rglob("__pycache__")) and not list(context.rglob("*.pyc"))


def test_the_runtime_is_public_http_with_agentcores_session_limits(template):
    runtime = only(template, "AWS::BedrockAgentCore::Runtime")
    assert runtime["AgentRuntimeName"] == "voicewire_agent"
    assert runtime["NetworkConfiguration"] == {"NetworkMode": "PUBLIC"}
    assert runtime["ProtocolConfiguration"] == "HTTP"
    assert runtime["LifecycleConfiguration"] == {
        "IdleRuntimeSessionTimeout": 900,
        "MaxLifetime": 8 * 3600,
    }


def test_the_runtimes_environment_is_valid_settings_naming_the_model_and_the_speech_endpoint(
    template,
):
    from functions.settings import Settings, environment_variables

    variables = only(template, "AWS::BedrockAgentCore::Runtime")["EnvironmentVariables"]
    ours = {name for name in variables if name.startswith("VOICEWIRE_")}
    assert ours <= environment_variables(), ours - environment_variables()
    # The API's own settings have no meaning here: no table, no tickets, no origins.
    assert not ours & {
        "VOICEWIRE_TABLE",
        "VOICEWIRE_TOKEN_SECRET_PARAMETER",
        "VOICEWIRE_ALLOWED_ORIGINS",
    }
    assert variables["AWS_REGION"] == variables["AWS_DEFAULT_REGION"] == {"Ref": "AWS::Region"}
    resolved = {name: value for name, value in variables.items() if isinstance(value, str)}
    settings = Settings.from_env(resolved | {"AWS_REGION": "eu-west-1"})
    assert settings.speech_target == "voicewire-kokoro-82m"
    assert (settings.llm, settings.bedrock_model_id) == ("bedrock", MODEL)
    assert (settings.agent, settings.knowledge_base_id) == ("strands", KNOWLEDGE_BASE)
    assert settings.tools == ("current_time", "search_docs")
    assert settings.audio_delivery == "base64"  # until a deployment shows /ws carries binary
    assert settings.voices and "af_heart" in settings.voices
    assert settings.speech_chunk_timeout_seconds == 10  # the GPU engine's stall limit


def test_the_endpoint_is_on_the_version_each_deploy_makes(template):
    endpoint = only(template, "AWS::BedrockAgentCore::RuntimeEndpoint")
    (runtime,) = template.find_resources("AWS::BedrockAgentCore::Runtime")
    assert endpoint["Name"] == "live"
    assert endpoint["AgentRuntimeId"] == {"Fn::GetAtt": [runtime, "AgentRuntimeId"]}
    assert endpoint["AgentRuntimeVersion"] == {"Fn::GetAtt": [runtime, "AgentRuntimeVersion"]}


def test_the_outputs_give_the_arns_and_the_ws_url_the_sdk_would_sign(template):
    from bedrock_agentcore.runtime import AgentCoreRuntimeClient

    outputs = template.to_json()["Outputs"]
    (runtime,) = template.find_resources("AWS::BedrockAgentCore::Runtime")
    (endpoint,) = template.find_resources("AWS::BedrockAgentCore::RuntimeEndpoint")
    assert outputs["RuntimeArn"]["Value"] == {"Fn::GetAtt": [runtime, "AgentRuntimeArn"]}
    assert outputs["RuntimeEndpointArn"]["Value"] == {
        "Fn::GetAtt": [endpoint, "AgentRuntimeEndpointArn"]
    }
    attributes = {
        f"{runtime}.AgentRuntimeArn": SAMPLE_ARN,
        "AWS::Region": "eu-west-1",
        "AWS::URLSuffix": "amazonaws.com",
    }
    url = resolve(outputs["WebSocketUrl"]["Value"], attributes)
    encoded = quote(SAMPLE_ARN, safe="")
    assert (
        url
        == f"wss://bedrock-agentcore.eu-west-1.amazonaws.com/runtimes/{encoded}/ws?qualifier=live"
    )
    # The URL the SDK signs for this runtime and endpoint (before its session id and signature).
    client = AgentCoreRuntimeClient.__new__(AgentCoreRuntimeClient)
    client.region = "eu-west-1"
    assert client._build_websocket_url(SAMPLE_ARN, "live") == url


# --- the execution role ------------------------------------------------------------------------


def test_the_role_may_call_the_model_the_speech_endpoint_and_the_knowledge_base_only(template):
    found = policies(template)
    model = next(statements for logical, statements in found.items() if "ModelAccess" in logical)
    calls = next(statements for logical, statements in found.items() if "AgentCalls" in logical)
    ((model_statement),) = model
    assert sorted(model_statement["Action"]) == [
        "bedrock:InvokeModel",
        "bedrock:InvokeModelWithResponseStream",
    ]
    model_arns = json.dumps(model_statement["Resource"])
    assert f"inference-profile/{MODEL}" in model_arns
    assert ":bedrock:*::foundation-model/anthropic.claude-haiku-4-5" in model_arns
    speech, retrieve = calls
    assert sorted(speech["Action"]) == [
        "sagemaker:InvokeEndpoint",
        "sagemaker:InvokeEndpointWithBidirectionalStream",
    ]
    assert speech["Resource"]["Fn::Join"][1][-1] == ":endpoint/voicewire-kokoro-82m"
    assert retrieve["Action"] == "bedrock:Retrieve"
    assert retrieve["Resource"]["Fn::Join"][1][-1] == f":knowledge-base/{KNOWLEDGE_BASE}"
    # Each in the stack's partition.
    for statement in (*model, *calls):
        for arn in as_list(statement["Resource"]):
            assert arn["Fn::Join"][1][:2] == ["arn:", {"Ref": "AWS::Partition"}]


def test_the_only_unscoped_grants_are_the_constructs_resourceless_actions(template):
    """No ``*`` resource where a scoped one exists: the construct's X-Ray, ECR token and metrics
    actions take none, metrics are held to AgentCore's namespace; the image pull names the
    asset repository; nothing this stack adds is unscoped."""
    unscoped: set[str] = set()
    for logical, statements in policies(template).items():
        for statement in statements:
            if "*" in as_list(statement["Resource"]):
                if logical.startswith("ListenRole"):  # Transcribe's: no resource type at all
                    assert statement["Action"] == "transcribe:StartStreamTranscriptionWebSocket"
                    continue
                assert "ExecutionRoleDefaultPolicy" in logical, statement
                unscoped.update(as_list(statement["Action"]))
                if statement["Action"] == "cloudwatch:PutMetricData":
                    assert statement["Condition"] == {
                        "StringEquals": {"cloudwatch:namespace": "bedrock-agentcore"}
                    }
    assert unscoped == CONSTRUCT_UNSCOPED_ACTIONS
    (default,) = [
        s for logical, s in policies(template).items() if "ExecutionRoleDefaultPolicy" in logical
    ]
    (pull,) = [s for s in default if "ecr:BatchGetImage" in as_list(s["Action"])]
    assert "cdk-hnb659fds-container-assets-" in json.dumps(pull["Resource"])


def execution_role(template: Template) -> tuple[str, dict]:
    ((logical, role),) = [
        (logical, role)
        for logical, role in template.find_resources("AWS::IAM::Role").items()
        if not logical.startswith("ListenRole")
    ]
    return logical, role


def test_the_role_trusts_agentcore_for_this_account_and_runtime_only(template):
    _, role = execution_role(template)
    (trust,) = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"Service": "bedrock-agentcore.amazonaws.com"}
    assert trust["Condition"]["StringEquals"] == {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}
    source = trust["Condition"]["ArnLike"]["aws:SourceArn"]["Fn::Join"][1]
    assert source[-1] == ":runtime/voicewire_agent*"


def test_listen_signs_with_a_role_that_only_the_runtime_assumes_and_that_only_transcribes(
    template,
):
    """``/ws`` answers ``listen`` with a URL signed by the listen role's credentials: only the
    runtime's role may assume it (its trust and the runtime's one sts:AssumeRole grant), it may
    only start a streaming transcription, and the runtime is told its ARN."""
    execution, _ = execution_role(template)
    ((listen, role),) = [
        (logical, role)
        for logical, role in template.find_resources("AWS::IAM::Role").items()
        if logical.startswith("ListenRole")
    ]
    (trust,) = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"AWS": {"Fn::GetAtt": [execution, "Arn"]}}
    assert trust["Action"] == "sts:AssumeRole"
    granted = {
        logical: [
            (statement["Action"], statement["Resource"])
            for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        ]
        for logical, policy in template.find_resources("AWS::IAM::Policy").items()
    }
    (own,) = [g for logical, g in granted.items() if logical.startswith("ListenRole")]
    assert own == [("transcribe:StartStreamTranscriptionWebSocket", "*")]
    assumes = [
        resource
        for statements in granted.values()
        for action, resource in statements
        if action == "sts:AssumeRole"
    ]
    assert assumes == [{"Fn::GetAtt": [listen, "Arn"]}]
    variables = only(template, "AWS::BedrockAgentCore::Runtime")["EnvironmentVariables"]
    assert variables["VOICEWIRE_LISTEN_ROLE_ARN"] == {"Fn::GetAtt": [listen, "Arn"]}


def test_without_a_knowledge_base_there_is_no_retrieve_and_binary_audio_follows_the_flag(
    tmp_path,
):
    built = synthesized(tmp_path / "cdk.out", binary_audio="true")
    template = Template.from_json(built.get_stack_by_name("VoiceAgentRuntime").template)
    actions = {
        action
        for statements in policies(template).values()
        for statement in statements
        for action in as_list(statement["Action"])
    }
    assert "bedrock:Retrieve" not in actions
    variables = only(template, "AWS::BedrockAgentCore::Runtime")["EnvironmentVariables"]
    assert "VOICEWIRE_KNOWLEDGE_BASE_ID" not in variables
    assert variables["VOICEWIRE_AUDIO_DELIVERY"] == "binary"


def test_cdk_nag_fails_the_synth_on_a_new_wildcard(tmp_path):
    """The construct's findings are acknowledged on its own policy, exactly: a wildcard granted
    by this stack is a new finding."""
    from aws_cdk import aws_iam as iam

    sys.path.insert(0, str(ROOT))
    import app

    built = app.build_app(str(tmp_path / "cdk.out"), context={"runtime": "agentcore"})
    stack = built.node.find_child("VoiceAgentRuntime")
    iam.Policy(
        stack,
        "Extra",
        roles=[stack.runtime.role],
        statements=[iam.PolicyStatement(actions=["sagemaker:InvokeEndpoint"], resources=["*"])],
    )
    with pytest.raises(RuntimeError, match="ValidationFailed"):
        built.synth()
    report = json.loads((tmp_path / "cdk.out" / "validation-report.json").read_text())
    findings = [v["ruleName"] for r in report["pluginReports"] for v in r["violations"]]
    assert findings == ["AwsSolutions-IAM5[Resource::*]"]


def test_cfn_lint_passes_on_the_runtime_template(assembly):
    path = Path(assembly.directory) / "VoiceAgentRuntime.template.json"
    cfn_lint = Path(sys.executable).parent / "cfn-lint"
    result = subprocess.run(
        [str(cfn_lint), "--ignore-checks", "W3005", "W3037", "--", str(path)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


# --- the image: its Dockerfile and context -----------------------------------------------------


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(instruction, arguments) of each line, continuations joined, comments left out."""
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text())
    lines = [line.strip() for line in text.splitlines()]
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1])
        for line in lines
        if line and not line.startswith("#")
    ]


def test_the_dockerfile_is_arm64_python_312_on_port_8080_as_a_user_that_is_not_root():
    steps = dockerfile_instructions()
    froms = [arguments for instruction, arguments in steps if instruction == "FROM"]
    assert froms == ["--platform=linux/arm64 python:3.12-slim"]
    assert ("EXPOSE", "8080") in steps
    assert steps[-1] == ("CMD", '["python", "-m", "functions.agentcore"]')
    users = [index for index, (instruction, _) in enumerate(steps) if instruction == "USER"]
    assert len(users) == 1
    user = steps[users[0]][1]
    assert user.split(":")[0] not in ("0", "root")
    # Nothing runs as root after the switch, and the process is that user.
    assert all(instruction != "RUN" for instruction, _ in steps[users[0] :])
    assert "--uid 10001" in " ".join(a for i, a in steps if i == "RUN") and user == "10001:10001"


def test_the_dockerfile_copies_the_staged_context_only_and_installs_locked_wheels():
    steps = dockerfile_instructions()
    sources = {
        source
        for instruction, arguments in steps
        if instruction == "COPY"
        for source in arguments.split()[:-1]
    }
    assert sources == {
        "requirements.txt",
        "constraints.txt",
        "functions/",
        "voicewire/",
        "README.md",
        "docs/",
    }
    (install,) = [a for i, a in steps if i == "RUN" and "pip install" in a]
    assert "--only-binary=:all:" in install
    assert "--requirement requirements.txt" in install and "--constraint constraints.txt" in install


@pytest.fixture(scope="module")
def staged(tmp_path_factory):
    return stage_agent_image(tmp_path_factory.mktemp("image") / "context")


def test_the_requirements_are_the_agents_imports_at_uv_locks_versions(staged):
    lock = tomllib.loads((ROOT / "uv.lock").read_text())
    locked = {package["name"]: package["version"] for package in lock["package"]}
    lines = (staged.directory / "requirements.txt").read_text().split()
    pinned = {re.sub(r"\[.*\]", "", line.split("==")[0]): line.split("==")[1] for line in lines}
    assert {"bedrock-agentcore", "uvicorn", "starlette", "boto3", "strands-agents"} <= set(pinned)
    for name, version in pinned.items():
        assert locked[name] == version, name
    constraints = locked_versions((staged.directory / "constraints.txt").read_text())
    assert constraints["bedrock-agentcore"] == locked["bedrock-agentcore"]
    # Nothing of the speech server, the benchmarks or the CDK is the agent's.
    assert not set(pinned) & {"onnxruntime", "kokoro-onnx", "aws-cdk-lib", "numpy", "torch"}


def test_an_import_without_a_known_distribution_fails_the_staging():
    with pytest.raises(BundleError, match="leftpad"):
        image_requirements({"boto3", "leftpad"}, {"boto3": "1.0"})
    with pytest.raises(BundleError, match=r"uvicorn is not in uv\.lock"):
        image_requirements({"json"}, {"bedrock-agentcore": "1", "starlette": "1"})


def test_staging_refuses_to_empty_a_directory_it_did_not_stage(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(BundleError, match="not emptying it"):
        stage_agent_image(tmp_path)
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_the_requirements_resolve_to_arm64_wheels(staged):
    """What the image's pip will install, resolved for the image's platform without Docker."""
    result = subprocess.run(
        [
            *uv_command(),
            "pip",
            "compile",
            "--quiet",
            "--no-header",
            "--python-platform",
            "aarch64-manylinux2014",
            "--python-version",
            "3.12",
            "--only-binary",
            ":all:",
            "--constraint",
            str(staged.directory / "constraints.txt"),
            str(staged.directory / "requirements.txt"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    resolved = locked_versions(result.stdout)
    constraints = locked_versions((staged.directory / "constraints.txt").read_text())
    assert resolved and all(constraints[name] == version for name, version in resolved.items())


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_the_images_command_serves_ping_from_the_staged_context_alone(staged, tmp_path):
    """The container's command, run from the staged context with only its requirements
    installed (for this machine's platform) and no site packages: the modules and the
    distributions the image gets are enough for the app to start and answer /ping."""
    packages = tmp_path / "site"
    installed = subprocess.run(
        [
            *uv_command(),
            "pip",
            "install",
            "--quiet",
            "--target",
            str(packages),
            "--python-platform",
            "x86_64-manylinux2014",
            "--python-version",
            "3.12",
            "--only-binary",
            ":all:",
            "--constraint",
            str(staged.directory / "constraints.txt"),
            "--requirement",
            str(staged.directory / "requirements.txt"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert installed.returncode == 0, installed.stderr
    port = free_port()
    environment = {
        "PATH": os.environ["PATH"],
        "PYTHONPATH": str(packages),
        "HOME": str(tmp_path),
        "VOICEWIRE_LLM": "bedrock",
        "VOICEWIRE_BEDROCK_MODEL_ID": MODEL,
        "VOICEWIRE_SPEECH_TARGET": "voicewire-kokoro-82m",
        "AWS_REGION": "eu-west-1",
        "AWS_DEFAULT_REGION": "eu-west-1",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
    }
    server = subprocess.Popen(
        [
            sys.executable,
            "-S",
            "-m",
            "functions.agentcore",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        cwd=staged.directory,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/ping", timeout=2) as reply:
                    answer = json.loads(reply.read())
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    output = server.stdout.read().decode() if server.poll() is not None else ""
                    pytest.fail(f"the image's command did not serve /ping: {output}")
                time.sleep(0.2)
        assert answer["status"] in ("Healthy", "HealthyBusy")
    finally:
        server.terminate()
        server.wait(timeout=10)
