"""CDK entry point: ``cdk synth`` / ``cdk deploy`` run it through ``cdk.json``.

cdk-nag's AwsSolutions checks run on every synth.

Context values (``cdk deploy -c name=value``): ``bedrock_model_id`` (the model the agent uses),
``speech_model`` (default ``kokoro-82m``; the endpoint is ``voicewire-<model>``), ``engine``
(``torch`` on a GPU, the default, or ``onnx`` on a CPU), ``instance_type`` (default
``ml.g5.xlarge``, ``ml.c7i.xlarge`` for onnx), ``image_uri`` (a prebuilt speech image: no
Docker build), ``speech_endpoint_name`` (another endpoint for the agent's speech),
``speech_engine`` (the engine of the endpoint the agent speaks to, ``torch`` or ``onnx``:
the worker's and the AgentCore app's time limits follow it; default: ``engine``, whose endpoint
this app describes; ``agent-infra deploy`` reads it from the deployed endpoint and sets it),
``model_files`` (the directory of the model's files that SpeechModelCache deploys; default: where
``speech-infra`` stages them, ``~/.cache/voicewire/speech-model/<model>-<engine>``; without one,
the app has no SpeechModelCache stack and the endpoint mounts what the bucket already holds),
``allowed_origins`` (comma-separated browser origins that may connect; default: any),
``page`` (``true``: also the VoicePage stack, the browser page on CloudFront pointed at the API),
``access_logs`` (``true``: the WebSocket stage's access logs, which need the account's API
Gateway CloudWatch role; ``agent-infra deploy`` checks for it and sets this), ``binary_audio``
(``true``: audio as binary frames by default, once ``agent-infra check`` has shown that the
deployment carries them; else base64 text frames), ``runtime`` (the agent's front door:
``apigateway``, the default, the VoiceApi stack (WebSocket API and Lambda functions); or
``agentcore``, the VoiceAgentRuntime stack (Bedrock AgentCore Runtime) instead of VoiceApi and
VoicePage: docs/deploy.md).
"""

import os
from pathlib import Path

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks

from functions.worker.policy import SPEECH_ENGINES
from stacks.agent_runtime import VoiceAgentRuntime
from stacks.speech import EndpointSettings, SpeechEndpoint, SpeechFoundation
from stacks.speech_model_cache import SpeechModelCache
from stacks.voice_api import VoiceApi, VoiceApiSettings
from stacks.voice_page import VoicePage

DEFAULT_MODEL = "us.anthropic.claude-haiku-4-5-20251001-v1:0"
RUNTIMES = ("apigateway", "agentcore")  # the agent's front doors (context ``runtime``)


# Feature flags (also in cdk.json): server access logs are granted by a bucket policy, not the
# legacy LogDeliveryWrite ACL.
FEATURE_FLAGS = {"@aws-cdk/aws-s3:serverAccessLogsUseBucketPolicy": True}


def build_app(outdir: str | None = None, context: dict[str, object] | None = None) -> cdk.App:
    """The app; ``context`` as ``cdk -c`` would give it (tests)."""
    app = cdk.App(outdir=outdir, context={**FEATURE_FLAGS, **(context or {})})
    # cdk-nag's AwsSolutions pack on every synth: an unacknowledged finding fails it. Each
    # acknowledgment sits next to the construct it concerns, with its reason.
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    context = app.node.try_get_context
    env = cdk.Environment(
        account=os.environ.get("CDK_DEFAULT_ACCOUNT"), region=os.environ.get("CDK_DEFAULT_REGION")
    )
    foundation = SpeechFoundation(app, "SpeechFoundation", env=env)
    endpoint_settings = EndpointSettings(
        model=context("speech_model") or "kokoro-82m",
        engine=context("engine") or "torch",
        instance_type=context("instance_type"),
        image_uri=context("image_uri"),
    )
    model_files = staged_files(
        context("model_files"), endpoint_settings.model, endpoint_settings.engine
    )
    cache = None
    if model_files is not None:
        cache = SpeechModelCache(
            app,
            f"SpeechModelCache-{endpoint_settings.model}",
            foundation,
            endpoint_settings.model,
            model_files,
            env=env,
        )
    endpoint = SpeechEndpoint(
        app,
        f"SpeechEndpoint-{endpoint_settings.model}",
        foundation,
        endpoint_settings,
        model_files_digest=cache.digest if cache else None,
        env=env,
    )
    if cache is not None:
        endpoint.add_stack_dependency(cache)  # the files are in the bucket before the model starts
    settings = VoiceApiSettings(
        bedrock_model_id=context("bedrock_model_id") or DEFAULT_MODEL,
        speech_endpoint_name=context("speech_endpoint_name") or endpoint_settings.endpoint_name,
        speech_engine=speech_engine(context("speech_engine"), endpoint_settings.engine),
        speech_capacity_sessions=int(
            endpoint_settings.max_instances * endpoint_settings.target_sessions_per_instance
        ),
        allowed_origins=tuple(
            origin.strip() for origin in str(context("allowed_origins") or "").split(",") if origin
        ),
        access_logs=flag(context("access_logs")),
        binary_audio=flag(context("binary_audio")),
        agent=str(context("agent") or "builtin"),
        tools=tuple(
            name.strip()
            for name in str(
                "current_time,search_docs" if context("tools") is None else context("tools")
            ).split(",")
            if name.strip()
        ),
        knowledge_base_id=context("knowledge_base_id") or None,
    )
    runtime = str(context("runtime") or "apigateway")
    if runtime not in RUNTIMES:
        raise ValueError(f"runtime: expected one of {', '.join(RUNTIMES)}, not {runtime!r}")
    if runtime == "agentcore":
        # Instead of VoiceApi, not beside it: the Lambda bundle is not built for a synth that
        # does not deploy it, and the page's client speaks to the API with a ticket, which
        # AgentCore (SigV4) does not take. A VoiceApi stack already deployed is left as it is:
        # CloudFormation stacks outside a synth are not touched.
        if flag(context("page")):
            raise ValueError(
                "page=true needs the VoiceApi stack (the page connects with a ticket); "
                "AgentCore Runtime takes SigV4 callers only"
            )
        VoiceAgentRuntime(app, "VoiceAgentRuntime", settings, env=env)
        return app
    api = VoiceApi(app, "VoiceApi", settings, env=env)
    if flag(context("page")):
        VoicePage(app, "VoicePage", api, env=env)
    return app


def speech_engine(given: object, endpoint_engine: str) -> str:
    """The ``speech_engine`` context, checked: the agent may speak to an endpoint this app does
    not describe (``speech_endpoint_name``), and its time limits must follow that endpoint's
    engine, not this app's ``engine``."""
    engine = str(given or endpoint_engine)
    if engine not in SPEECH_ENGINES:
        raise ValueError(
            f"speech_engine: expected one of {', '.join(SPEECH_ENGINES)} (the engine of the "
            f"endpoint the agent speaks to), not {engine!r}"
        )
    return engine


def flag(value: object) -> bool:
    """A yes/no context value (``-c name=true``); absent is no."""
    text = str(value or "").lower()
    if text not in ("", "true", "false", "1", "0", "yes", "no"):
        raise ValueError(f"expected true or false, not {value!r}")
    return text in ("true", "1", "yes")


def staged_files(given: object, model: str, engine: str) -> Path | None:
    """The model_files context, else speech-infra's staging directory if it holds files."""
    if given:
        return Path(str(given)).expanduser()
    from voicewire_tools.commands.model_weights import MANIFEST, staging_directory

    staged = staging_directory(model, engine)
    return staged if (staged / MANIFEST).is_file() else None


if __name__ == "__main__":
    build_app().synth()
