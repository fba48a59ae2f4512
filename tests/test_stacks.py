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

from functions.worker_policy import WORKER_POLICY
from stacks.voice_api import bedrock_resources

ROOT = Path(__file__).resolve().parent.parent
# cfn-lint findings that are not defects: W3005, CDK's own DependsOn next to a GetAtt on the same
# role; W3037, cfn-lint's action list lacks InvokeEndpointWithBidirectionalStream (granted with
# InvokeEndpoint until a live account shows which one the stream checks, AWS-FACTS.md).
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
    context = {"model_files": str(model_files), "page": "true"}
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
        for name in ("authorizer", "connect", "disconnect", "messages", "worker")
    )
    for function in functions.values():
        properties = function["Properties"]
        assert properties["Runtime"] == "python3.12" and properties["Architectures"] == ["arm64"]
        assert properties["LoggingConfig"]["LogFormat"] == "JSON"


def test_the_worker_has_the_policys_timeout_and_async_settings(template):
    template.has_resource_properties(
        "AWS::Lambda::Function",
        {"Handler": "functions.handlers.worker.handler", "Timeout": WORKER_POLICY.timeout_seconds},
    )
    template.has_resource_properties(
        "AWS::Lambda::EventInvokeConfig",
        {
            "MaximumRetryAttempts": WORKER_POLICY.async_retry_attempts,
            "MaximumEventAgeInSeconds": WORKER_POLICY.max_event_age_seconds,
        },
    )


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
    assert settings["ThrottlingRateLimit"] > 0 and settings["ThrottlingBurstLimit"] > 0
    assert settings.get("DataTraceEnabled", False) is False  # the connect URL carries the token


def _statements(template: Template) -> list[dict]:
    statements = []
    for policy in resources(template, "AWS::IAM::Policy").values():
        statements += policy["Properties"]["PolicyDocument"]["Statement"]
    return statements


def test_no_iam_statement_allows_every_resource(template):
    for statement in _statements(template):
        resource = statement["Resource"]
        listed = resource if isinstance(resource, list) else [resource]
        assert "*" not in listed, statement


def test_the_worker_may_invoke_the_speech_endpoint_and_the_model_only(template):
    statements = _statements(template)
    sagemaker = [s for s in statements if "sagemaker:InvokeEndpoint" in s["Action"]]
    assert len(sagemaker) == 1
    assert set(sagemaker[0]["Action"]) == {
        "sagemaker:InvokeEndpoint", "sagemaker:InvokeEndpointWithBidirectionalStream",
    }  # fmt: skip
    assert "endpoint/voicewire-kokoro-82m" in json.dumps(sagemaker[0]["Resource"])
    bedrock = [s for s in statements if s["Action"] == "bedrock:InvokeModelWithResponseStream"]
    assert len(bedrock) == 1 and "inference-profile/us.anthropic" in json.dumps(bedrock[0])


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
    assert len(bundles) == 1  # one asset for the five functions
    assert list(bundles[0].glob("_awscrt*.so")) and not (bundles[0] / "speech_server").exists()


def test_cfn_lint_passes_on_every_template(assembly):
    templates = sorted(str(path) for path in Path(assembly.directory).glob("*.template.json"))
    assert len(templates) == 5  # the foundation, the model cache, the endpoint, the API, the page
    cfn_lint = Path(sys.executable).parent / "cfn-lint"
    result = subprocess.run(
        [str(cfn_lint), "--ignore-checks", *CFN_LINT_ACCEPTED, "--", *templates],
        capture_output=True, text=True,
    )  # fmt: skip
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
        "cloudwatch:PutMetricData", "ecr:GetAuthorizationToken",
    ]  # fmt: skip
    (metrics,) = [s for s in everywhere if s["Action"] == "cloudwatch:PutMetricData"]
    assert metrics["Condition"]["StringEquals"]["cloudwatch:namespace"]
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
        "sagemaker:InvokeEndpoint", "sagemaker:InvokeEndpointWithBidirectionalStream",
    }  # fmt: skip
    assert json.dumps(statement["Resource"]).endswith(':endpoint/voicewire-*"]]}')


def test_the_endpoint_mounts_the_weights_on_a_gpu_with_time_to_load(endpoint):
    (model,) = resources(endpoint, "AWS::SageMaker::Model").values()
    container = model["Properties"]["PrimaryContainer"]
    source = container["ModelDataSource"]["S3DataSource"]
    assert (source["S3DataType"], source["CompressionType"]) == ("S3Prefix", "None")
    assert "models/kokoro-82m/" in json.dumps(source["S3Uri"])
    assert container["Environment"]["VOICEWIRE_ENGINE"] == "torch"
    (config,) = resources(endpoint, "AWS::SageMaker::EndpointConfig").values()
    (variant,) = config["Properties"]["ProductionVariants"]
    assert variant["InstanceType"] == "ml.g5.xlarge"
    assert variant["ContainerStartupHealthCheckTimeoutInSeconds"] >= 600
    endpoint.has_resource_properties(
        "AWS::SageMaker::Endpoint", {"EndpointName": "voicewire-kokoro-82m"}
    )


def test_the_endpoint_scales_on_sessions_and_alarms_on_errors_and_latency(endpoint):
    endpoint.has_resource_properties(
        "AWS::ApplicationAutoScaling::ScalableTarget",
        {"ResourceId": "endpoint/voicewire-kokoro-82m/variant/AllTraffic", "MinCapacity": 1,
         "MaxCapacity": 4, "ScalableDimension": "sagemaker:variant:DesiredInstanceCount"},
    )  # fmt: skip
    (policy,) = resources(endpoint, "AWS::ApplicationAutoScaling::ScalingPolicy").values()
    tracking = policy["Properties"]["TargetTrackingScalingPolicyConfiguration"]
    assert tracking["PredefinedMetricSpecification"]["PredefinedMetricType"] == (
        "SageMakerVariantInvocationsPerInstance"
    )
    assert tracking["ScaleInCooldown"] > tracking["ScaleOutCooldown"]
    alarms = {
        a["Properties"]["MetricName"]
        for a in resources(endpoint, "AWS::CloudWatch::Alarm").values()
    }
    assert alarms == {"Invocation5XXErrors", "ModelLatency"}


def test_the_image_asset_carries_the_bidirectional_streaming_label(assembly):
    stack = assembly.get_stack_by_name("SpeechEndpoint-kokoro-82m")
    manifest = json.loads(Path(assembly.directory, f"{stack.stack_name}.assets.json").read_text())
    (image,) = manifest["dockerImages"].values()
    source = Path(assembly.directory) / image["source"]["directory"]
    dockerfile = (source / image["source"]["dockerFile"]).read_text()
    assert "com.amazonaws.sagemaker.capabilities.bidirectional-streaming=true" in dockerfile
    assert image["source"].get("platform") == "linux/amd64"
    # The build context is exactly what the Dockerfile copies (.dockerignore is an allowlist):
    # CDK names the image by the context's hash, and a new image rolls the endpoint, so a README,
    # page or stack edit must not be in it.
    assert sorted(path.name for path in source.iterdir()) == [
        ".dockerignore", "container", "pyproject.toml", "uv.lock", "voicewire",
    ]  # fmt: skip
    assert sorted(path.name for path in (source / "container").iterdir()) == [
        "Dockerfile", "speech_server",
    ]  # fmt: skip
    copied = re.findall(r"^COPY (?!--from)(.+) \S+$", dockerfile, re.MULTILINE)
    assert sorted(" ".join(copied).split()) == [
        "container/speech_server", "pyproject.toml", "uv.lock", "voicewire",
    ]  # fmt: skip
    assert not list(source.rglob("__pycache__"))


def test_a_prebuilt_image_needs_no_asset(tmp_path):
    sys.path.insert(0, str(ROOT))
    import app

    uri = "123456789012.dkr.ecr.us-east-1.amazonaws.com/voicewire-speech:1"
    built = app.build_app(str(tmp_path / "cdk.out"), context={"image_uri": uri}).synth()
    stack = built.get_stack_by_name("SpeechEndpoint-kokoro-82m")
    (model,) = Template.from_json(stack.template).find_resources("AWS::SageMaker::Model").values()
    assert model["Properties"]["PrimaryContainer"]["Image"] == uri
    manifest = json.loads(Path(built.directory, f"{stack.stack_name}.assets.json").read_text())
    assert not manifest.get("dockerImages")


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
    assert environment == {
        "VOICEWIRE_ENGINE": "onnx",
        "VOICEWIRE_MODEL_PATH": "/opt/ml/model/model.onnx",
        "VOICEWIRE_VOICES_PATH": "/opt/ml/model/voices.npz",
    }
    (config,) = template.find_resources("AWS::SageMaker::EndpointConfig").values()
    assert config["Properties"]["ProductionVariants"][0]["InstanceType"] == "ml.c7i.xlarge"
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


def test_the_functions_get_the_connection_limits_and_the_authorizer_only_puts_tickets(template):
    """The per-connection limits reach every function as the settings read them, and the
    authorizer, which records each ticket's first use, may put items and do nothing else."""
    from functions.settings import Settings

    functions = resources(template, "AWS::Lambda::Function").values()
    for function in functions:
        variables = function["Properties"]["Environment"]["Variables"]
        assert variables["VOICEWIRE_MAX_TURNS_PER_MINUTE"] == str(Settings.max_turns_per_minute)
        assert float(variables["VOICEWIRE_MAX_SPEECH_SECONDS_PER_TURN"]) == (
            Settings.max_speech_seconds_per_turn
        )
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
    # The second is config.json, {"url": ...}: CDK puts the API's URL in at deploy time, where
    # its marker stands, as a JSON string.
    config_asset = Path(assembly.directory) / f"asset.{config.removesuffix('.zip')}"
    written = (config_asset / "config.json").read_text()
    ((marker, value),) = properties["SourceMarkers"][1].items()
    separator, parts = value["Fn::Join"]
    assert separator == ""
    assert parts[0] == '"wss://' and parts[-1] == '/prod"'
    assert "VoiceApi:ExportsOutputRef" in json.dumps(parts)
    url = "wss://abc123.execute-api.eu-west-1.amazonaws.com/prod"
    assert json.loads(written.replace(marker, json.dumps(url))) == {"url": url}
