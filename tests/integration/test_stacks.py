"""The CDK stacks, synthesized offline (no account, no Docker): what CloudFormation would get."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

from aws_cdk.assertions import Match, Template

from functions.worker.policy import worker_policy_for
from stacks.voice_api import bedrock_resources

ROOT = Path(__file__).resolve().parents[2]
# cfn-lint findings that are not defects: W3005, CDK's own DependsOn next to a GetAtt on the same
# role; W3037, cfn-lint's action list lacks InvokeEndpointWithBidirectionalStream (granted with
# InvokeEndpoint until a live account shows which one the stream checks, docs/aws-facts.md).
CFN_LINT_ACCEPTED = ("W3005", "W3037")


def staged_model_files(directory: Path) -> Path:
    """What speech-infra stages for the torch engine, in miniature."""
    directory.mkdir(parents=True, exist_ok=True)
    files = {"config.json": b'{"n_token": 178}', "kokoro-v1_0.pth": b"w" * 1000, "voices.npz": b"v"}
    for name, data in files.items():
        (directory / name).write_bytes(data)
    manifest = {"model": "kokoro-82m", "engine": "torch", "sha256": {n: "0" * 64 for n in files}}
    (directory / "MANIFEST.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return directory


@pytest.fixture(scope="module")
def model_files(tmp_path_factory) -> Path:
    return staged_model_files(tmp_path_factory.mktemp("staged"))


@pytest.fixture(scope="module")
def assembly(tmp_path_factory, model_files):
    sys.path.insert(0, str(ROOT))
    import app

    outdir = tmp_path_factory.mktemp("cdk.out")
    # An account with API Gateway's CloudWatch role (agent-infra deploy found it).
    context = {"model_files": str(model_files), "page": "true", "access_logs": "true"}
    return app.build_app(str(outdir), context=context).synth()


@pytest.fixture(scope="module")
def template(assembly) -> Template:
    return Template.from_json(assembly.get_stack_by_name("VoiceApi").template)


def resources(template: Template, kind: str) -> dict:
    return template.find_resources(kind)


def test_the_api_has_every_route_and_only_connect_is_authorized(template):
    found = resources(template, "AWS::ApiGatewayV2::Route").values()
    routes = {route["Properties"]["RouteKey"]: route["Properties"] for route in found}
    assert set(routes) == {
        "$connect",
        "$disconnect",
        "$default",
        "ask",
        "speak",
        "cancel",
        "voices",
        "history",
        "listen",
    }
    assert routes["$connect"]["AuthorizationType"] == "CUSTOM"
    assert all(
        r.get("AuthorizationType", "NONE") == "NONE" for k, r in routes.items() if k != "$connect"
    )
    template.has_resource_properties(
        "AWS::ApiGatewayV2::Authorizer",
        {"AuthorizerType": "REQUEST", "IdentitySource": ["route.request.querystring.token"]},
    )


def test_the_functions_are_arm64_python_312_and_run_the_handlers(template):
    functions = resources(template, "AWS::Lambda::Function")
    handlers = sorted(f["Properties"]["Handler"] for f in functions.values())
    assert handlers == sorted(
        f"functions.handlers.{name}.handler"
        for name in ("authorizer", "connect", "disconnect", "listen", "messages", "worker")
    )
    for function in functions.values():
        properties = function["Properties"]
        assert properties["Runtime"] == "python3.12" and properties["Architectures"] == ["arm64"]
        assert properties["LoggingConfig"]["LogFormat"] == "JSON"


def worker_settings(template: Template) -> tuple[dict, dict]:
    (worker,) = [
        f["Properties"]
        for f in resources(template, "AWS::Lambda::Function").values()
        if f["Properties"]["Handler"] == "functions.handlers.worker.handler"
    ]
    (invoke,) = [
        i["Properties"] for i in resources(template, "AWS::Lambda::EventInvokeConfig").values()
    ]
    return worker, invoke


def test_the_worker_has_the_policys_timeout_and_async_settings(template):
    policy = worker_policy_for("torch", 360)
    worker, invoke = worker_settings(template)
    assert worker["Timeout"] == policy.timeout_seconds == 120
    environment = worker["Environment"]["Variables"]
    assert environment["VOICEWIRE_SPEECH_CHUNK_TIMEOUT_SECONDS"] == "10"
    assert invoke["MaximumRetryAttempts"] == policy.async_retry_attempts
    assert invoke["MaximumEventAgeInSeconds"] == policy.max_event_age_seconds


def test_the_workers_time_limits_follow_the_speech_engine(tmp_path):
    """The CPU engine speaks ~10x slower: a turn of 360 s of speech takes it ~3 minutes, past
    the GPU's 120 s timeout (the time limit once cut such turns short)."""
    sys.path.insert(0, str(ROOT))
    import app

    built = app.build_app(str(tmp_path / "cdk.out"), context={"engine": "onnx"}).synth()
    worker, invoke = worker_settings(
        Template.from_json(built.get_stack_by_name("VoiceApi").template)
    )
    policy = worker_policy_for("onnx", 360)
    assert worker["Timeout"] == policy.timeout_seconds
    assert worker["Timeout"] - policy.stop_margin_seconds >= 60 + 360 * 0.5  # LLM + synthesis
    assert invoke["MaximumEventAgeInSeconds"] >= 3 * worker["Timeout"]  # both retries fit
    chunk_timeout = float(
        worker["Environment"]["Variables"]["VOICEWIRE_SPEECH_CHUNK_TIMEOUT_SECONDS"]
    )
    assert chunk_timeout >= 30  # a 320-character chunk took ~20 s on 2 loaded cores
    with pytest.raises(ValueError, match="lower max_speech_seconds_per_turn"):
        worker_policy_for("onnx", 3600)


def test_the_table_is_the_one_the_functions_expect(template):
    template.has_resource_properties(
        "AWS::DynamoDB::GlobalTable",
        {
            "KeySchema": [
                {"AttributeName": "pk", "KeyType": "HASH"},
                {"AttributeName": "sk", "KeyType": "RANGE"},
            ],
            "BillingMode": "PAY_PER_REQUEST",
            "TimeToLiveSpecification": {"AttributeName": "expires_at", "Enabled": True},
            "Replicas": [
                Match.object_like(
                    {"PointInTimeRecoverySpecification": {"PointInTimeRecoveryEnabled": True}}
                )
            ],
        },
    )


def test_the_stage_logs_access_as_json_without_request_data_and_throttles(template):
    (stage,) = resources(template, "AWS::ApiGatewayV2::Stage").values()
    properties = stage["Properties"]
    fields = json.loads(properties["AccessLogSettings"]["Format"])
    assert {"requestId", "connectionId", "routeKey", "status"} <= set(fields)
    settings = properties["DefaultRouteSettings"]
    # Shared by every client, so sized for the fleet at its largest (4 instances x 38
    # conversations), each at its own limit of 30 turns a minute, a turn an action and a cancel.
    assert settings["ThrottlingRateLimit"] == 4 * 38 * 30 / 60 * 2 == 152
    assert settings["ThrottlingBurstLimit"] == 304
    assert settings.get("DataTraceEnabled", False) is False  # the connect URL carries the token


def synth_warnings(assembly_dir: Path, stack_name: str) -> list[str]:
    """The warnings a synth wrote for one stack, read from the cloud assembly's manifest.

    Read from disk rather than through `CloudFormationStackArtifact.messages`: that property
    returns jsii interface proxies which the lazily-loaded jsii runtime cannot always resolve
    ("Unknown interface: aws-cdk-lib.cloud_assembly_schema.MetadataEntry", seen in CI only).
    """
    manifest = json.loads((assembly_dir / "manifest.json").read_text())
    artifact = manifest["artifacts"][stack_name]
    metadata = dict(artifact.get("metadata", {}))
    if "additionalMetadataFile" in artifact:  # where newer CDK releases write it
        metadata.update(json.loads((assembly_dir / artifact["additionalMetadataFile"]).read_text()))
    return [
        str(entry["data"])
        for entries in metadata.values()
        for entry in entries
        if entry["type"] == "aws:cdk:warning"
    ]


def test_an_account_without_api_gateways_logging_role_gets_a_stage_it_can_create(tmp_path):
    """A fresh account has no API Gateway CloudWatch role, and a stage with access logs then
    cannot be created: by default (agent-infra deploy found no role) the stage has none, the
    synth says so, and cdk-nag's finding is acknowledged with the reason."""
    sys.path.insert(0, str(ROOT))
    import app

    built = app.build_app(str(tmp_path / "cdk.out")).synth()
    stack = built.get_stack_by_name("VoiceApi")
    (stage,) = (
        Template.from_json(stack.template).find_resources("AWS::ApiGatewayV2::Stage").values()
    )
    assert "AccessLogSettings" not in stage["Properties"]
    warnings = synth_warnings(tmp_path / "cdk.out", "VoiceApi")
    assert any(
        "no access logs" in str(w) and "--create-api-logging-role" in str(w) for w in warnings
    )
    assert not Template.from_json(stack.template).find_resources(
        "AWS::Logs::LogGroup", {"Properties": {"LogGroupName": Match.absent()}}
    ).keys() >= {"AccessLogs"}


def test_audio_is_base64_unless_binary_frames_were_proven(template, tmp_path):
    for function in resources(template, "AWS::Lambda::Function").values():
        variables = function["Properties"]["Environment"]["Variables"]
        assert variables["VOICEWIRE_AUDIO_DELIVERY"] == "base64"
    sys.path.insert(0, str(ROOT))
    import app

    built = app.build_app(str(tmp_path / "cdk.out"), context={"binary_audio": "true"}).synth()
    functions = Template.from_json(built.get_stack_by_name("VoiceApi").template).find_resources(
        "AWS::Lambda::Function"
    )
    deliveries = {
        f["Properties"]["Environment"]["Variables"].get("VOICEWIRE_AUDIO_DELIVERY")
        for f in functions.values()
    }
    assert deliveries == {"binary"}


def _statements(template: Template) -> list[dict]:
    statements = []
    for policy in resources(template, "AWS::IAM::Policy").values():
        statements += policy["Properties"]["PolicyDocument"]["Statement"]
    return statements


# Amazon Transcribe's streaming actions have no resource type (the Service Authorization
# Reference lists none): '*' is the only resource they can be granted on.
NO_RESOURCE_TYPE = {"transcribe:StartStreamTranscriptionWebSocket"}


def test_no_iam_statement_allows_every_resource(template):
    for statement in _statements(template):
        resource = statement["Resource"]
        listed = resource if isinstance(resource, list) else [resource]
        actions = (
            statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        )
        assert "*" not in listed or set(actions) <= NO_RESOURCE_TYPE, statement


def test_listen_answers_on_its_route_with_a_role_that_may_only_start_a_transcription(template):
    """``listen`` is two-way (its function's answer is the route's response) and its function's
    role, whose credentials sign the Transcribe URL a client gets, may start a transcription and
    count the connection's listens (UpdateItem on the session table: its rate window), nothing
    else: no read, no @connections, no other service. (The URL carries the key id and the
    session token, never the secret: it signs that one request only.)"""
    found = resources(template, "AWS::ApiGatewayV2::Route")
    (listen_id,) = [k for k, r in found.items() if r["Properties"]["RouteKey"] == "listen"]
    assert found[listen_id]["Properties"]["RouteResponseSelectionExpression"] == "$default"
    (response,) = resources(template, "AWS::ApiGatewayV2::RouteResponse").values()
    assert response["Properties"]["RouteId"] == {"Ref": listen_id}
    assert response["Properties"]["RouteResponseKey"] == "$default"
    (role,) = [
        function["Properties"]["Role"]["Fn::GetAtt"][0]
        for function in resources(template, "AWS::Lambda::Function").values()
        if function["Properties"]["Handler"] == "functions.handlers.listen.handler"
    ]
    actions = sorted(
        action
        for policy in resources(template, "AWS::IAM::Policy").values()
        if {"Ref": role} in policy["Properties"]["Roles"]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        for action in (
            statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        )
    )
    assert [a for a in actions if not a.startswith("logs:")] == [
        "dynamodb:UpdateItem",
        "transcribe:StartStreamTranscriptionWebSocket",
    ]


def test_the_worker_may_invoke_the_speech_endpoint_and_the_model_only(template):
    statements = _statements(template)
    sagemaker = [s for s in statements if "sagemaker:InvokeEndpoint" in s["Action"]]
    assert len(sagemaker) == 1
    assert set(sagemaker[0]["Action"]) == {
        "sagemaker:InvokeEndpoint",
        "sagemaker:InvokeEndpointWithBidirectionalStream",
    }
    assert "endpoint/voicewire-kokoro-82m" in json.dumps(sagemaker[0]["Resource"])
    bedrock = [s for s in statements if s["Action"] == "bedrock:InvokeModelWithResponseStream"]
    assert len(bedrock) == 1 and "inference-profile/us.anthropic" in json.dumps(bedrock[0])
    # In whatever partition the stack is deployed to (aws, aws-cn, aws-us-gov).
    for arn in bedrock[0]["Resource"]:
        assert arn["Fn::Join"][1][:2] == ["arn:", {"Ref": "AWS::Partition"}]


def test_no_arn_is_written_for_one_partition(assembly):
    for path in Path(assembly.directory).glob("*.template.json"):
        assert "arn:aws:" not in path.read_text(), path.name


def test_bedrock_resources_name_the_model_and_a_profiles_routes():
    assert bedrock_resources("amazon.nova-lite-v1:0", "us-east-1", "123") == [
        "arn:aws:bedrock:us-east-1::foundation-model/amazon.nova-lite-v1:0"
    ]
    profile = bedrock_resources("eu.amazon.nova-lite-v1:0", "eu-west-1", "123")
    assert profile == [
        "arn:aws:bedrock:eu-west-1:123:inference-profile/eu.amazon.nova-lite-v1:0",
        "arn:aws:bedrock:*::foundation-model/amazon.nova-lite-v1:0",
    ]


def test_the_outputs_are_the_urls_a_client_needs(template):
    outputs = template.to_json()["Outputs"]
    assert {"WebSocketUrl", "CallbackUrl"} <= set(outputs)


def test_the_functions_asset_is_the_bundle(assembly):
    directory = Path(assembly.directory)
    bundles = [
        p.parent.parent.parent for p in directory.glob("asset.*/functions/handlers/worker.py")
    ]
    assert len(bundles) == 1  # one asset for the six functions
    assert list(bundles[0].glob("_awscrt*.so")) and not (bundles[0] / "speech_server").exists()


def _asset_directory(assembly_dir: Path, code: dict) -> Path:
    """The folder CDK staged for a function's ``Code`` (its S3 key is the asset's hash)."""
    key = code["S3Key"]
    key = key if isinstance(key, str) else "".join(str(part) for part in key["Fn::Join"][1])
    (directory,) = assembly_dir.glob(f"asset.{key.rsplit('/', 1)[-1].removesuffix('.zip')}")
    return directory


def _handler_file(directory: Path, runtime: str, handler: str) -> Path | None:
    module = handler.rpartition(".")[0]
    if runtime.startswith("python"):
        candidates = [module.replace(".", "/") + ".py", module.replace(".", "/") + "/__init__.py"]
    else:  # node: the file names the module, its extension the module system
        candidates = [f"{module}{suffix}" for suffix in (".js", ".mjs", ".cjs")]
    return next((directory / c for c in candidates if (directory / c).is_file()), None)


def test_every_function_of_every_stack_finds_its_handler_in_its_asset(assembly):
    """What Lambda imports at the first invocation: the handler's module, in the code that
    would be uploaded. The asset tests of the bundle only checked the modules a list named,
    and the list had forgotten ``listen``."""
    directory = Path(assembly.directory)
    checked = []
    for stack in assembly.stacks:
        for name, resource in stack.template["Resources"].items():
            if resource["Type"] != "AWS::Lambda::Function":
                continue
            properties = resource["Properties"]
            if "ZipFile" in properties["Code"]:
                continue  # inline code: the template carries it
            asset = _asset_directory(directory, properties["Code"])
            found = _handler_file(asset, properties["Runtime"], properties["Handler"])
            assert found is not None, (
                f"{stack.stack_name}/{name}: {properties['Handler']} is not in {asset.name}"
            )
            checked.append(properties["Handler"])
    assert "functions.handlers.listen.handler" in checked
    assert len(checked) >= 7  # the API's six functions and the endpoint's scaling function


def test_cfn_lint_passes_on_every_template(assembly):
    templates = sorted(str(path) for path in Path(assembly.directory).glob("*.template.json"))
    assert len(templates) == 5  # the foundation, the model cache, the endpoint, the API, the page
    cfn_lint = Path(sys.executable).parent / "cfn-lint"
    result = subprocess.run(
        [str(cfn_lint), "--ignore-checks", *CFN_LINT_ACCEPTED, "--", *templates],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_no_function_role_uses_a_managed_policy(template):
    for role in resources(template, "AWS::IAM::Role").values():
        assert "ManagedPolicyArns" not in role["Properties"], role


def test_cdk_nag_fails_the_synth_on_a_new_wildcard(tmp_path):
    """The acknowledged findings are exact: a wildcard added later is not covered by them."""
    from aws_cdk import aws_iam as iam

    sys.path.insert(0, str(ROOT))
    import app

    built = app.build_app(str(tmp_path / "cdk.out"))
    stack = built.node.find_child("VoiceApi")
    worker = stack.node.find_child("Worker")
    worker.add_to_role_policy(iam.PolicyStatement(actions=["dynamodb:Scan"], resources=["*"]))
    with pytest.raises(RuntimeError, match="ValidationFailed"):
        built.synth()
    report = json.loads((tmp_path / "cdk.out" / "validation-report.json").read_text())
    findings = [v["ruleName"] for r in report["pluginReports"] for v in r["violations"]]
    assert findings == ["AwsSolutions-IAM5[Resource::*]"]


# --- the SageMaker side ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def foundation(assembly) -> Template:
    return Template.from_json(assembly.get_stack_by_name("SpeechFoundation").template)


@pytest.fixture(scope="module")
def endpoint(assembly) -> Template:
    return Template.from_json(assembly.get_stack_by_name("SpeechEndpoint-kokoro-82m").template)


def test_the_weights_bucket_is_private_encrypted_versioned_tls_only_and_logged(foundation):
    buckets = resources(foundation, "AWS::S3::Bucket")
    (weights,) = [b for b in buckets.values() if "LoggingConfiguration" in b["Properties"]]
    properties = weights["Properties"]
    assert properties["VersioningConfiguration"] == {"Status": "Enabled"}
    assert properties["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    assert all(properties["PublicAccessBlockConfiguration"].values())
    assert weights["DeletionPolicy"] == "Retain"
    policies = json.dumps(resources(foundation, "AWS::S3::BucketPolicy"))
    assert '"aws:SecureTransport": "false"' in policies
    assert "LogDeliveryWrite" not in json.dumps(buckets)  # a bucket policy, not the legacy ACL


def test_sagemaker_reads_the_weights_only_and_the_wildcards_are_the_documented_ones(foundation):
    statements = _statements(foundation)
    actions = {action for s in statements for action in _listed(s["Action"])}
    assert "s3:PutObject" not in actions and not any(a.endswith("*") for a in actions)
    assert {"s3:GetObject", "s3:ListBucket"} <= actions
    everywhere = [s for s in statements if "*" in _listed(s["Resource"])]
    # No resource-level permissions exist for these (the metric namespace is pinned).
    assert sorted(a for s in everywhere for a in _listed(s["Action"])) == [
        "cloudwatch:PutMetricData",
        "ecr:GetAuthorizationToken",
    ]
    (metrics,) = [s for s in everywhere if s["Action"] == "cloudwatch:PutMetricData"]
    # The container's load figures, which the endpoint scales on, and nothing else.
    assert metrics["Condition"]["StringEquals"]["cloudwatch:namespace"] == "voicewire/speech"
    foundation.has_resource_properties(
        "AWS::IAM::Role",
        {
            "AssumeRolePolicyDocument": Match.object_like(
                {
                    "Statement": [
                        Match.object_like({"Principal": {"Service": "sagemaker.amazonaws.com"}})
                    ]
                }
            )
        },
    )


def test_clients_may_invoke_this_projects_endpoints_only(foundation):
    (policy,) = resources(foundation, "AWS::IAM::ManagedPolicy").values()
    (statement,) = policy["Properties"]["PolicyDocument"]["Statement"]
    assert set(statement["Action"]) == {
        "sagemaker:InvokeEndpoint",
        "sagemaker:InvokeEndpointWithBidirectionalStream",
    }
    assert json.dumps(statement["Resource"]).endswith(':endpoint/voicewire-*"]]}')


def test_the_endpoint_mounts_the_weights_on_a_gpu_with_time_to_load(endpoint):
    (model,) = resources(endpoint, "AWS::SageMaker::Model").values()
    container = model["Properties"]["PrimaryContainer"]
    source = container["ModelDataSource"]["S3DataSource"]
    assert (source["S3DataType"], source["CompressionType"]) == ("S3Prefix", "None")
    assert "models/kokoro-82m/" in json.dumps(source["S3Uri"])
    environment = container["Environment"]
    # The GPU engine on CUDA or not at all, and the load figures the endpoint scales on.
    assert (environment["VOICEWIRE_ENGINE"], environment["VOICEWIRE_DEVICE"]) == ("torch", "cuda")
    assert environment["VOICEWIRE_LOAD_METRICS"] == "cloudwatch"
    assert (environment["VOICEWIRE_ENDPOINT_NAME"], environment["VOICEWIRE_VARIANT_NAME"]) == (
        "voicewire-kokoro-82m",
        "AllTraffic",
    )
    assert environment["VOICEWIRE_METRICS_REGION"] == {"Ref": "AWS::Region"}
    (config,) = resources(endpoint, "AWS::SageMaker::EndpointConfig").values()
    (variant,) = config["Properties"]["ProductionVariants"]
    assert variant["InstanceType"] == "ml.g5.xlarge"
    assert variant["ContainerStartupHealthCheckTimeoutInSeconds"] >= 600
    endpoint.has_resource_properties(
        "AWS::SageMaker::Endpoint", {"EndpointName": "voicewire-kokoro-82m"}
    )


def test_a_gpu_variant_names_the_ami_whose_driver_runs_the_images_cuda(endpoint):
    from speech_server.gpu_pairing import IMAGE_CUDA, INFERENCE_AMI, INFERENCE_AMIS, driver_runs

    (config,) = resources(endpoint, "AWS::SageMaker::EndpointConfig").values()
    (variant,) = config["Properties"]["ProductionVariants"]
    assert variant["InferenceAmiVersion"] == INFERENCE_AMI == "al2-ami-sagemaker-inference-gpu-3-1"
    assert driver_runs(IMAGE_CUDA, INFERENCE_AMIS[variant["InferenceAmiVersion"]])


def test_an_endpoint_that_could_not_work_is_refused_at_synth(monkeypatch):
    from stacks import speech
    from stacks.speech import EndpointSettings

    with pytest.raises(ValueError, match="the torch engine needs a GPU instance"):
        EndpointSettings(instance_type="ml.c7i.xlarge").check()
    with pytest.raises(ValueError, match="unknown inference AMI 'al2-ami-sagemaker-inference'"):
        EndpointSettings(inference_ami="al2-ami-sagemaker-inference").check()
    monkeypatch.setattr(speech, "IMAGE_CUDA", (13, 0))  # a lock moved to CUDA 13 alone
    with pytest.raises(ValueError, match=r"driver cannot run the image's CUDA 13\.0"):
        EndpointSettings().check()
    monkeypatch.undo()
    with pytest.raises(ValueError, match="not an Amazon ECR image"):
        EndpointSettings(image_uri="docker.io/library/voicewire:1").check()
    EndpointSettings(engine="onnx").check()  # a CPU variant needs no AMI
    assert EndpointSettings(engine="onnx").ami is None


def test_updates_keep_the_instance_count_and_scaling_lets_go_around_them(endpoint):
    """An instance-type change of an autoscaled variant is refused by SageMaker until the
    variant is deregistered: the template orders a custom resource that lets go of it before the
    endpoint's update and one that registers it again after, and the update keeps the instance
    count autoscaling reached (stacks/endpoint_autoscaling.py)."""
    ((endpoint_id, endpoint_resource),) = resources(endpoint, "AWS::SageMaker::Endpoint").items()
    assert endpoint_resource["Properties"]["RetainAllVariantProperties"] is True
    (config_id,) = resources(endpoint, "AWS::SageMaker::EndpointConfig")
    phases = {
        r["Properties"]["Phase"]: (logical_id, r)
        for logical_id, r in resources(endpoint, "Custom::EndpointAutoscaling").items()
    }
    (before_id, before), (_, after) = phases["before"], phases["after"]
    # Before: written for the new config, and the endpoint waits for it.
    assert before["Properties"]["EndpointConfigName"] == {
        "Fn::GetAtt": [config_id, "EndpointConfigName"]
    }
    assert before_id in endpoint_resource["DependsOn"]
    # After: runs once the endpoint runs that config.
    assert endpoint_id in after["DependsOn"]
    assert after["Properties"]["EndpointConfigName"] == before["Properties"]["EndpointConfigName"]
    # CloudFormation's own scalable target could not let go around an update: none is left.
    assert not resources(endpoint, "AWS::ApplicationAutoScaling::ScalableTarget")
    assert not resources(endpoint, "AWS::ApplicationAutoScaling::ScalingPolicy")


def test_the_endpoint_scales_on_its_engines_load_and_open_sessions(endpoint):
    (after,) = [
        r
        for r in resources(endpoint, "Custom::EndpointAutoscaling").values()
        if r["Properties"]["Phase"] == "after"
    ]
    scaling = json.loads(after["Properties"]["Scaling"])
    assert (scaling["MinCapacity"], scaling["MaxCapacity"]) == (1, 4)
    policies = {p["PolicyName"]: p["Configuration"] for p in scaling["Policies"]}
    busy = policies["voicewire-kokoro-82m-EngineBusy"]
    sessions = policies["voicewire-kokoro-82m-OpenSessions"]
    dimensions = [
        {"Name": "EndpointName", "Value": "voicewire-kokoro-82m"},
        {"Name": "VariantName", "Value": "AllTraffic"},
    ]
    for policy, metric, target in ((busy, "EngineBusy", 60.0), (sessions, "OpenSessions", 38.0)):
        assert policy["TargetValue"] == target
        assert policy["CustomizedMetricSpecification"] == {
            "MetricName": metric,
            "Namespace": "voicewire/speech",
            "Dimensions": dimensions,
            "Statistic": "Average",
            "Unit": "Percent" if metric == "EngineBusy" else "Count",
        }
        assert policy["ScaleInCooldown"] > policy["ScaleOutCooldown"]
    alarms = {
        a["Properties"]["MetricName"]: a["Properties"]
        for a in resources(endpoint, "AWS::CloudWatch::Alarm").values()
    }
    assert set(alarms) == {"Invocation5XXErrors", "FirstAudio", "EngineBusy"}
    # Latency as the listener meets it, from the container: not SageMaker's ModelLatency, which
    # times a whole bidirectional session as one invocation.
    first_audio = alarms["FirstAudio"]
    assert (first_audio["Namespace"], first_audio["ExtendedStatistic"]) == (
        "voicewire/speech",
        "p90",
    )
    assert first_audio["Threshold"] == 1000  # the GPU engine's
    assert first_audio["Dimensions"] == dimensions


def test_the_scaling_function_may_touch_sagemakers_scalable_targets_only(endpoint):
    statements = _statements(endpoint)
    changing = [
        s
        for s in statements
        if "application-autoscaling:RegisterScalableTarget" in _listed(s["Action"])
    ]
    (statement,) = changing
    assert statement["Condition"] == {
        "StringEquals": {"application-autoscaling:service-namespace": "sagemaker"}
    }
    assert "scalable-target/*" in json.dumps(statement["Resource"])
    (linked,) = [s for s in statements if s["Action"] == "iam:CreateServiceLinkedRole"]
    assert linked["Condition"]["StringLike"]["iam:AWSServiceName"] == (
        "sagemaker.application-autoscaling.amazonaws.com"
    )


def test_the_image_asset_carries_the_bidirectional_streaming_label(assembly):
    stack = assembly.get_stack_by_name("SpeechEndpoint-kokoro-82m")
    manifest = json.loads(Path(assembly.directory, f"{stack.stack_name}.assets.json").read_text())
    (image,) = manifest["dockerImages"].values()
    source = Path(assembly.directory) / image["source"]["directory"]
    dockerfile = (source / image["source"]["dockerFile"]).read_text()
    assert "com.amazonaws.sagemaker.capabilities.bidirectional-streaming=true" in dockerfile
    assert image["source"].get("platform") == "linux/amd64"
    # The torch engine's own target, pushed with Docker v2 media types: SageMaker refuses OCI
    # manifests, which BuildKit writes unless told otherwise.
    assert image["source"]["dockerBuildTarget"] == "gpu"
    assert image["source"]["dockerOutputs"] == ["type=image,oci-mediatypes=false"]
    # The build context is exactly what the Dockerfile copies (.dockerignore is an allowlist):
    # CDK names the image by the context's hash, and a new image rolls the endpoint, so a README,
    # page or stack edit must not be in it.
    assert sorted(path.name for path in source.iterdir()) == [
        ".dockerignore",
        "container",
        "pyproject.toml",
        "uv.lock",
        "voicewire",
    ]
    assert sorted(path.name for path in (source / "container").iterdir()) == [
        "Dockerfile",
        "speech_server",
    ]
    copied = re.findall(r"^COPY (?!--from)(.+) \S+$", dockerfile, re.MULTILINE)
    assert sorted(set(" ".join(copied).split())) == [
        "container/speech_server",
        "pyproject.toml",
        "uv.lock",
        "voicewire",
    ]
    assert not list(source.rglob("__pycache__"))


def test_the_gpu_image_asks_the_nvidia_runtime_for_the_gpu_and_the_cpu_one_needs_none():
    """An image built FROM ubuntu gets no GPU from the NVIDIA container runtime unless its
    environment names one (CUDA base images set these); the GPU server would then refuse to
    start. No NVIDIA_REQUIRE_CUDA: it would refuse the AMI's driver 550 for the locked CUDA 12.8,
    which runs there through minor-version compatibility."""
    from stacks.speech_image import image_environment, image_stages, stage_chain

    stages = image_stages()
    gpu = image_environment(stage_chain(stages, "gpu"))
    assert gpu["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert set(gpu["NVIDIA_DRIVER_CAPABILITIES"].split(",")) >= {"compute", "utility"}
    assert "NVIDIA_REQUIRE_CUDA" not in gpu
    assert (gpu["VOICEWIRE_ENGINE"], gpu["VOICEWIRE_DEVICE"]) == ("torch", "cuda")
    cpu = image_environment(stage_chain(stages, "cpu"))
    assert not any(key.startswith("NVIDIA_") for key in cpu)
    assert cpu["VOICEWIRE_ENGINE"] == "onnx"
    assert cpu["VOICEWIRE_MODEL_PATH"] == "/opt/ml/model/model.onnx"
    # Both answer SageMaker's bidirectional stream: the label is on the stage both build from.
    (base,) = {chain[0].name for chain in (stage_chain(stages, "gpu"), stage_chain(stages, "cpu"))}
    assert any("bidirectional-streaming=true" in label for label in stages[base].values("LABEL"))


def test_an_engine_whose_image_the_dockerfile_cannot_build_is_refused_at_synth(tmp_path):
    from stacks.speech import EndpointSettings
    from stacks.speech_image import engine_target

    # The Dockerfile as it was: one image, the GPU one, whatever the engine.
    single = tmp_path / "Dockerfile"
    single.write_text("FROM ubuntu:24.04 AS base\nRUN true\nFROM base AS gpu\nRUN true\n")
    assert engine_target("torch", single) == "gpu"
    with pytest.raises(ValueError, match="has no 'cpu' target, which builds the onnx engine"):
        engine_target("onnx", single)
    unnamed = tmp_path / "Unnamed"
    unnamed.write_text("FROM ubuntu:24.04\nRUN true\n")
    with pytest.raises(ValueError, match="name every stage"):
        engine_target("torch", unnamed)
    # The project's own Dockerfile builds both; a prebuilt image needs no target.
    EndpointSettings(engine="onnx").check()
    EndpointSettings(engine="torch").check()


def test_the_model_waits_for_the_role_to_be_allowed_to_pull_its_image(endpoint, tmp_path):
    """SageMaker checks the execution role's right to pull the image at CreateModel: the model
    depends on the pull policy, built image or prebuilt alike."""
    sys.path.insert(0, str(ROOT))
    import app

    uri = "210987654321.dkr.ecr.eu-west-1.amazonaws.com/team/voicewire-speech:v1"
    prebuilt = app.build_app(str(tmp_path / "cdk.out"), context={"image_uri": uri}).synth()
    prebuilt_template = Template.from_json(
        prebuilt.get_stack_by_name("SpeechEndpoint-kokoro-82m").template
    )
    for template in (endpoint, prebuilt_template):
        (pull_id,) = [
            logical_id
            for logical_id, policy in resources(template, "AWS::IAM::Policy").items()
            if "ecr:BatchGetImage" in json.dumps(policy["Properties"]["PolicyDocument"])
        ]
        (model,) = resources(template, "AWS::SageMaker::Model").values()
        assert pull_id in model["DependsOn"]


def test_a_prebuilt_image_needs_no_asset_and_its_repository_may_be_pulled(tmp_path):
    sys.path.insert(0, str(ROOT))
    import app

    uri = "210987654321.dkr.ecr.eu-west-1.amazonaws.com/team/voicewire-speech@sha256:" + "a" * 64
    built = app.build_app(str(tmp_path / "cdk.out"), context={"image_uri": uri}).synth()
    stack = built.get_stack_by_name("SpeechEndpoint-kokoro-82m")
    template = Template.from_json(stack.template)
    (model,) = template.find_resources("AWS::SageMaker::Model").values()
    assert model["Properties"]["PrimaryContainer"]["Image"] == uri
    manifest = json.loads(Path(built.directory, f"{stack.stack_name}.assets.json").read_text())
    assert not manifest.get("dockerImages")
    # SageMaker pulls with the execution role: exactly that repository's layers.
    (pull,) = [s for s in _statements(template) if "ecr:BatchGetImage" in _listed(s["Action"])]
    assert sorted(pull["Action"]) == [
        "ecr:BatchCheckLayerAvailability",
        "ecr:BatchGetImage",
        "ecr:GetDownloadUrlForLayer",
    ]
    assert pull["Resource"] == {
        "Fn::Join": [
            "",
            [
                "arn:",
                {"Ref": "AWS::Partition"},
                ":ecr:eu-west-1:210987654321:repository/team/voicewire-speech",
            ],
        ]
    }


def _listed(value) -> list:
    return value if isinstance(value, list) else [value]


def test_the_dashboard_shows_first_audio_and_turns_and_the_alarms_watch_failures(template):
    (dashboard,) = resources(template, "AWS::CloudWatch::Dashboard").values()
    body = json.dumps(dashboard["Properties"]["DashboardBody"])
    for name in ("TimeToFirstAudio", "Turns_failed", "Turns_complete", "WorkerJobsDropped"):
        assert name in body
    alarms = resources(template, "AWS::CloudWatch::Alarm").values()
    watched = set()
    for alarm in alarms:
        properties = alarm["Properties"]
        if "MetricName" in properties:
            watched.add(properties["MetricName"])
        for query in properties.get("Metrics", []):
            if "MetricStat" in query:
                watched.add(query["MetricStat"]["Metric"]["MetricName"])
    assert {
        "Turns_failed",
        "TimeToFirstAudio",
        "Errors",
        "Throttles",
        "TurnRecordsFailed",
    } <= watched


def test_the_onnx_engine_runs_on_a_cpu_instance_with_the_assembled_files(tmp_path, monkeypatch):
    sys.path.insert(0, str(ROOT))
    import app

    monkeypatch.setenv("VOICEWIRE_CACHE_DIR", str(tmp_path))  # nothing staged: no cache stack
    context = {"engine": "onnx", "speech_model": "kokoro-82m-cpu"}
    built = app.build_app(str(tmp_path / "cdk.out"), context=context).synth()
    template = Template.from_json(built.get_stack_by_name("SpeechEndpoint-kokoro-82m-cpu").template)
    (model,) = template.find_resources("AWS::SageMaker::Model").values()
    environment = model["Properties"]["PrimaryContainer"]["Environment"]
    assert {key: value for key, value in environment.items() if "METRICS" not in key} == {
        "VOICEWIRE_ENGINE": "onnx",
        "VOICEWIRE_MODEL_PATH": "/opt/ml/model/model.onnx",
        "VOICEWIRE_VOICES_PATH": "/opt/ml/model/voices.npz",
        "VOICEWIRE_ENDPOINT_NAME": "voicewire-kokoro-82m-cpu",
        "VOICEWIRE_VARIANT_NAME": "AllTraffic",
    }
    (config,) = template.find_resources("AWS::SageMaker::EndpointConfig").values()
    (variant,) = config["Properties"]["ProductionVariants"]
    assert variant["InstanceType"] == "ml.c7i.xlarge"
    assert "InferenceAmiVersion" not in variant  # a CPU has no NVIDIA driver to choose
    # The ONNX engine's own image (the GPU one lacks onnxruntime and the graph tools), and the
    # CPU engine's first-audio alarm.
    stack = built.get_stack_by_name("SpeechEndpoint-kokoro-82m-cpu")
    manifest = json.loads(Path(built.directory, f"{stack.stack_name}.assets.json").read_text())
    (image,) = manifest["dockerImages"].values()
    assert image["source"]["dockerBuildTarget"] == "cpu"
    assert image["source"]["dockerOutputs"] == ["type=image,oci-mediatypes=false"]
    (first_audio,) = [
        a
        for a in template.find_resources("AWS::CloudWatch::Alarm").values()
        if a["Properties"]["MetricName"] == "FirstAudio"
    ]
    assert first_audio["Properties"]["Threshold"] == 2500
    voice_api = json.dumps(built.get_stack_by_name("VoiceApi").template)
    assert "voicewire-kokoro-82m-cpu" in voice_api  # the agent speaks through that endpoint
    assert "SpeechModelCache-kokoro-82m-cpu" not in [s.stack_name for s in built.stacks]


# --- SpeechModelCache ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cache(assembly) -> Template:
    return Template.from_json(assembly.get_stack_by_name("SpeechModelCache-kokoro-82m").template)


def test_the_model_cache_deploys_the_staged_files_under_the_models_prefix(
    assembly, cache, model_files
):
    from stacks.speech import WEIGHTS_ARN_EXPORT

    (copy,) = cache.find_resources("Custom::CDKBucketDeployment").values()
    properties = copy["Properties"]
    assert properties["DestinationBucketKeyPrefix"] == "models/kokoro-82m/"
    assert properties["Prune"] is True and properties["RetainOnDelete"] is True
    assert properties["SignContent"] is True
    assert WEIGHTS_ARN_EXPORT in json.dumps(properties["DestinationBucketName"])
    # The asset CDK uploads is the staged directory, byte for byte.
    stack = assembly.get_stack_by_name("SpeechModelCache-kokoro-82m")
    (key,) = properties["SourceObjectKeys"]
    asset = Path(assembly.directory) / f"asset.{key.removesuffix('.zip')}"
    assert sorted(p.name for p in asset.iterdir()) == sorted(p.name for p in model_files.iterdir())
    assert (asset / "MANIFEST.json").read_bytes() == (model_files / "MANIFEST.json").read_bytes()
    assert stack.stack_name == "SpeechModelCache-kokoro-82m"


def test_the_copy_has_room_for_the_weights_and_its_grants_are_the_constructs(cache):
    (function,) = cache.find_resources("AWS::Lambda::Function").values()
    assert function["Properties"]["MemorySize"] == 2048
    assert function["Properties"]["EphemeralStorage"] == {"Size": 2048}
    statements = _statements(cache)
    actions = sorted({a for s in statements for a in _listed(s["Action"])})
    assert "s3:PutObject" in actions and "s3:DeleteObject*" in actions
    assert not any(a.startswith(("iam:", "sagemaker:", "s3:PutBucket")) for a in actions)
    resources_named = json.dumps([s["Resource"] for s in statements])
    assert (
        "cdk-hnb659fds-assets" in resources_named
        and "voicewire-weights-bucket-arn" in resources_named
    )
    assert all("*" not in _listed(s["Resource"]) for s in statements)


def test_the_endpoint_carries_the_manifests_digest_and_waits_for_the_cache(assembly, model_files):
    import hashlib

    template = Template.from_json(assembly.get_stack_by_name("SpeechEndpoint-kokoro-82m").template)
    (model,) = template.find_resources("AWS::SageMaker::Model").values()
    environment = model["Properties"]["PrimaryContainer"]["Environment"]
    digest = hashlib.sha256((model_files / "MANIFEST.json").read_bytes()).hexdigest()
    assert environment["VOICEWIRE_MODEL_FILES_SHA256"] == digest
    endpoint_stack = assembly.get_stack_by_name("SpeechEndpoint-kokoro-82m")
    assert "SpeechModelCache-kokoro-82m" in [d.id for d in endpoint_stack.dependencies]


def test_new_files_make_a_new_digest_and_an_unstaged_directory_is_named(tmp_path):
    from stacks.speech_model_cache import manifest_digest

    directory = staged_model_files(tmp_path / "a")
    before = manifest_digest(directory)
    manifest = json.loads((directory / "MANIFEST.json").read_text())
    manifest["sha256"]["voices.npz"] = "1" * 64
    (directory / "MANIFEST.json").write_text(json.dumps(manifest))
    assert manifest_digest(directory) != before
    with pytest.raises(ValueError, match=r"holds no MANIFEST\.json: stage"):
        manifest_digest(tmp_path)


def test_the_foundation_exports_the_bucket_and_expires_old_versions(foundation):
    from stacks.speech import WEIGHTS_ARN_EXPORT

    exports = [o.get("Export", {}).get("Name") for o in foundation.to_json()["Outputs"].values()]
    assert WEIGHTS_ARN_EXPORT in exports
    buckets = resources(foundation, "AWS::S3::Bucket")
    (weights,) = [b for b in buckets.values() if "LoggingConfiguration" in b["Properties"]]
    (rule,) = weights["Properties"]["LifecycleConfiguration"]["Rules"]
    assert rule["NoncurrentVersionExpiration"] == {"NoncurrentDays": 30}


def deployed_environment(variables: dict) -> dict[str, str]:
    """A function's environment as Lambda gives it: CloudFormation's references resolved (to a
    stand-in name) and the region Lambda sets."""
    resolved = {name: "resolved-by-cfn" for name in variables}
    resolved |= {name: value for name, value in variables.items() if isinstance(value, str)}
    return resolved | {"AWS_REGION": "eu-west-1"}


def test_every_function_s_environment_is_valid_settings_with_no_unknown_name(template):
    """What the stack sets is what the settings read: a renamed or mistyped variable (which the
    settings would ignore, keeping a default) fails here, as does a value they refuse."""
    from functions.settings import Settings, environment_variables

    known = environment_variables()
    for logical, function in resources(template, "AWS::Lambda::Function").items():
        variables = function["Properties"].get("Environment", {}).get("Variables", {})
        if "VOICEWIRE_TABLE" not in variables:
            continue  # not one of the voice functions (the endpoint autoscaling handler)
        ours = {name for name in variables if name.startswith("VOICEWIRE_")}
        assert ours <= known, (logical, ours - known)
        settings = Settings.from_env(deployed_environment(variables))
        assert settings.llm == "bedrock" and settings.bedrock_model_id, logical
        assert settings.voices and settings.token_secret_parameter, logical


def test_the_functions_get_the_connection_limits_and_the_authorizer_only_puts_tickets(template):
    """The per-connection limits reach every function as the settings read them, and the
    authorizer, which records each ticket's first use, may put items and do nothing else."""
    from functions.settings import Settings

    defaults = {name: field.default for name, field in Settings.model_fields.items()}
    functions = resources(template, "AWS::Lambda::Function").values()
    for function in functions:
        variables = function["Properties"]["Environment"]["Variables"]
        settings = Settings.from_env(deployed_environment(variables))
        assert settings.max_turns_per_minute == defaults["max_turns_per_minute"]
        assert settings.max_speech_seconds_per_turn == defaults["max_speech_seconds_per_turn"]
        assert settings.allowed_origins is None
        assert variables["VOICEWIRE_ALLOWED_ORIGINS"] == ""  # no -c allowed_origins: any
    roles = {
        logical: function["Properties"]["Role"]["Fn::GetAtt"][0]
        for logical, function in resources(template, "AWS::Lambda::Function").items()
    }
    (authorizer_role,) = [role for logical, role in roles.items() if "Authorizer" in logical]
    table_actions = [
        statement["Action"]
        for policy in resources(template, "AWS::IAM::Policy").values()
        if {"Ref": authorizer_role} in policy["Properties"]["Roles"]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        if "dynamodb" in json.dumps(statement["Action"])
    ]
    assert table_actions == ["dynamodb:PutItem"]


def test_allowed_origins_reach_the_functions(tmp_path):
    import app

    assembly = app.build_app(
        outdir=str(tmp_path), context={"allowed_origins": "https://a.example,https://b.example"}
    ).synth()
    stack = assembly.get_stack_by_name("VoiceApi")
    assert "VoicePage" not in [s.stack_name for s in assembly.stacks]  # only with page=true
    functions = Template.from_json(stack.template).find_resources("AWS::Lambda::Function")
    for function in functions.values():
        variables = function["Properties"]["Environment"]["Variables"]
        assert variables["VOICEWIRE_ALLOWED_ORIGINS"] == "https://a.example,https://b.example"


def test_the_worker_gets_the_agent_and_tools_and_a_knowledge_base_only_when_given(
    template, tmp_path
):
    def worker_of(found: Template) -> dict:
        functions = found.find_resources("AWS::Lambda::Function")
        handler = "functions.handlers.worker.handler"
        return next(f for f in functions.values() if f["Properties"]["Handler"] == handler)

    variables = worker_of(template)["Properties"]["Environment"]["Variables"]
    assert variables["VOICEWIRE_AGENT"] == "builtin"
    assert variables["VOICEWIRE_TOOLS"] == "current_time,search_docs"
    assert "VOICEWIRE_KNOWLEDGE_BASE_ID" not in variables
    assert not [s for s in _statements(template) if "bedrock:Retrieve" in json.dumps(s)]

    import app

    context = {"agent": "strands", "tools": "search_docs", "knowledge_base_id": "KB12345678"}
    stack = app.build_app(outdir=str(tmp_path), context=context).synth()
    found = Template.from_json(stack.get_stack_by_name("VoiceApi").template)
    variables = worker_of(found)["Properties"]["Environment"]["Variables"]
    assert variables["VOICEWIRE_AGENT"] == "strands"
    assert variables["VOICEWIRE_TOOLS"] == "search_docs"
    assert variables["VOICEWIRE_KNOWLEDGE_BASE_ID"] == "KB12345678"
    retrieve = [s for s in _statements(found) if s["Action"] == "bedrock:Retrieve"]
    assert len(retrieve) == 1
    assert "knowledge-base/KB12345678" in json.dumps(retrieve[0]["Resource"])


# --- the browser page (optional) -----------------------------------------------------------------


@pytest.fixture(scope="module")
def page(assembly) -> Template:
    return Template.from_json(assembly.get_stack_by_name("VoicePage").template)


def test_the_page_is_served_over_https_from_a_private_bucket_with_its_security_headers(page):
    from voicewire_tools.page_headers import CONTENT_SECURITY_POLICY

    (content_id,) = [
        name for name in resources(page, "AWS::S3::Bucket") if name.startswith("Content")
    ]
    content = resources(page, "AWS::S3::Bucket")[content_id]["Properties"]
    assert all(content["PublicAccessBlockConfiguration"].values())
    assert content["LoggingConfiguration"]["LogFilePrefix"] == "content/"
    (distribution,) = resources(page, "AWS::CloudFront::Distribution").values()
    config = distribution["Properties"]["DistributionConfig"]
    assert config["DefaultRootObject"] == "index.html"
    assert config["DefaultCacheBehavior"]["ViewerProtocolPolicy"] == "redirect-to-https"
    assert config["DefaultCacheBehavior"]["AllowedMethods"] == ["GET", "HEAD"]
    assert config["Logging"]["Prefix"] == "cloudfront/"
    (origin,) = config["Origins"]
    assert origin["DomainName"] == {"Fn::GetAtt": [content_id, "RegionalDomainName"]}
    assert "OriginAccessControlId" in origin  # CloudFront reads the bucket; nobody else
    # The bucket lets CloudFront read, for this distribution only.
    policies = [
        statement
        for policy in resources(page, "AWS::S3::BucketPolicy").values()
        if policy["Properties"]["Bucket"] == {"Ref": content_id}
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        if statement["Effect"] == "Allow"
    ]
    assert [statement["Principal"] for statement in policies] == [
        {"Service": "cloudfront.amazonaws.com"}
    ]
    assert policies[0]["Action"] == "s3:GetObject"
    assert "AWS:SourceArn" in json.dumps(policies[0]["Condition"])
    # The same headers the local stack sends, under which the browser tests run.
    (headers,) = resources(page, "AWS::CloudFront::ResponseHeadersPolicy").values()
    security = headers["Properties"]["ResponseHeadersPolicyConfig"]["SecurityHeadersConfig"]
    assert security["ContentSecurityPolicy"]["ContentSecurityPolicy"] == CONTENT_SECURITY_POLICY
    assert security["ReferrerPolicy"]["ReferrerPolicy"] == "no-referrer"
    assert security["FrameOptions"]["FrameOption"] == "DENY"
    url = page.to_json()["Outputs"]["PageUrl"]["Value"]["Fn::Join"][1]
    assert url[0] == "https://" and url[2] == "/"


def test_the_page_is_web_as_it_is_with_a_config_naming_the_apis_url(page, assembly):
    (deployment,) = resources(page, "Custom::CDKBucketDeployment").values()
    properties = deployment["Properties"]
    assert properties["Prune"] is True and properties["RetainOnDelete"] is False
    assert properties["DistributionPaths"] == ["/*"]  # every deploy is live when it ends
    # The first source is web/ itself: every file of the folder, nothing else.
    folder, config = properties["SourceObjectKeys"]
    asset = Path(assembly.directory) / f"asset.{folder.removesuffix('.zip')}"
    assert sorted(p.name for p in asset.iterdir()) == sorted(
        p.name for p in (ROOT / "web").iterdir()
    )
    # The second is config.json, {"url": ..., "tickets": true}: CDK puts the API's URL in at
    # deploy time, where its marker stands, as a JSON string; the API takes connect tickets.
    config_asset = Path(assembly.directory) / f"asset.{config.removesuffix('.zip')}"
    written = (config_asset / "config.json").read_text()
    ((marker, value),) = properties["SourceMarkers"][1].items()
    separator, parts = value["Fn::Join"]
    assert separator == ""
    assert parts[0] == '"wss://' and parts[-1] == '/prod"'
    assert "VoiceApi:ExportsOutputRef" in json.dumps(parts)
    url = "wss://abc123.execute-api.eu-west-1.amazonaws.com/prod"
    assert json.loads(written.replace(marker, json.dumps(url))) == {"url": url, "tickets": True}
