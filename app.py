"""CDK entry point: ``cdk synth`` / ``cdk deploy`` run it through ``cdk.json``.

cdk-nag's AwsSolutions checks run on every synth.

Context values (``cdk deploy -c name=value``): ``bedrock_model_id`` (the model the agent uses),
``speech_endpoint_name`` (default ``kokoro-82m``).
"""

import os

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks

from stacks.voice_api import VoiceApi, VoiceApiSettings

DEFAULT_MODEL = "us.anthropic.claude-haiku-4-5-20251001-v1:0"


def build_app(outdir: str | None = None) -> cdk.App:
    app = cdk.App(outdir=outdir)
    # cdk-nag's AwsSolutions pack on every synth: an unacknowledged finding fails it. Each
    # acknowledgment sits next to the construct it concerns, with its reason.
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    settings = VoiceApiSettings(
        bedrock_model_id=app.node.try_get_context("bedrock_model_id") or DEFAULT_MODEL,
        speech_endpoint_name=app.node.try_get_context("speech_endpoint_name") or "kokoro-82m",
    )
    VoiceApi(
        app,
        "VoiceApi",
        settings,
        env=cdk.Environment(
            account=os.environ.get("CDK_DEFAULT_ACCOUNT"),
            region=os.environ.get("CDK_DEFAULT_REGION"),
        ),
    )
    return app


if __name__ == "__main__":
    build_app().synth()
