"""``agent-infra``: the agent side of a deployment (the WebSocket API and its functions).

    uv run agent-infra deploy|diff|synth|destroy --bedrock-model-id ID [--endpoint-name NAME]
        [--speech-engine torch|onnx] [--allowed-origins https://app.example.com] [--with-page]
        [--binary-audio] [--create-api-logging-role] [--enable-model]
    uv run agent-infra deploy|diff|synth|destroy --runtime agentcore --bedrock-model-id ID ...
    uv run agent-infra token [--ttl 120] [--principal NAME]
    uv run agent-infra url --runtime-arn ARN [--region R] [--session-id S] [--expires 300]
    uv run agent-infra demo --url wss://... | --runtime-arn ARN [--prompt ...] [--trials 3]
    uv run agent-infra check --url wss://abc123.execute-api.eu-west-1.amazonaws.com/prod \\
        [--token TOKEN] [--json report.json]
    uv run agent-infra check --runtime-arn ARN [--json report.json]

``deploy`` and ``diff`` first read the speech endpoint (``--endpoint-name``, default
``voicewire-kokoro-82m``) for the engine its container runs: the worker's timeout and speech
stall limit (and the AgentCore app's) follow it (``functions/worker/policy.py``), so it comes
from the endpoint, not from a flag that could be wrong. ``--speech-engine`` names it where the
endpoint cannot say (not deployed yet, not voicewire's) and is refused where it contradicts the
endpoint. ``deploy`` then makes the token secret (an SSM SecureString, which CloudFormation cannot
create) if the account has none yet, says what the account has and still needs
(``account_readiness``: the API Gateway CloudWatch role the stage's access logs need, Lambda's
concurrency against what the speech fleet serves, the Bedrock model's first use), then
deploys the VoiceApi stack; ``--with-page`` also deploys
VoicePage, the browser page on CloudFront with the API's URL filled in (its ``PageUrl`` output).
``token`` mints a connection token from the deployed secret. ``demo`` runs ``voicewire demo``'s
bidi-vs-batch comparison against the deployed API (a fresh ticket for each connection unless the
URL has one).

``--runtime agentcore`` acts on the VoiceAgentRuntime stack instead (Bedrock AgentCore Runtime,
``stacks/agent_runtime.py``): no token secret, no API Gateway logging role; its callers sign
their requests with SigV4 (IAM), so ``token`` has no meaning there, and ``url`` prints a
presigned ``wss://`` URL of the runtime's ``/ws`` instead; ``demo`` and ``check`` take
``--runtime-arn`` and sign a URL per connection, its query (``audio=``) inside the signature.

``check`` verifies from outside, in a few seconds, what only a real deployment can show
(``voicewire_tools.commands.deployment_check``). It works against the local stack too
(``--url ws://127.0.0.1:8000/ws``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import sys
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from functions.access.tickets import TOKEN_SECRET_PARAMETER
from functions.worker.policy import SPEECH_ENGINES
from voicewire_tools.commands.account_readiness import (
    Finding,
    api_logging_role,
    lambda_concurrency,
    model_access,
    render,
    said,
    transcribe_streams,
)
from voicewire_tools.commands.cdk_runner import InfraError, check_account, check_node, run_cdk
from voicewire_tools.commands.demo import add_arguments as add_demo_arguments
from voicewire_tools.commands.deployed_endpoint import ENGINE_VARIABLE, describe_endpoint
from voicewire_tools.commands.up import agent_choice
from voicewire_tools.deployed_tickets import deployed_token, ticket_minter

RUNTIMES = ("apigateway", "agentcore")  # app.py's context ``runtime``
# app.py's endpoint when no speech_endpoint_name is given: voicewire-<its default speech_model>.
DEFAULT_SPEECH_ENDPOINT = "voicewire-kokoro-82m"
AGENTCORE_STACK = "VoiceAgentRuntime"
AGENTCORE_ENDPOINT = "live"  # stacks/agent_runtime.py's ENDPOINT_NAME
MAX_PRESIGNED_SECONDS = 300  # AgentCore's limit for a presigned /ws URL (the SDK enforces it)
SESSION_ID_LENGTHS = (33, 256)  # X-Amzn-Bedrock-AgentCore-Runtime-Session-Id
# Options of the WebSocket API that AgentCore Runtime has no counterpart for.
API_ONLY_OPTIONS = {
    "with_page": "--with-page (the page connects with a ticket; AgentCore takes SigV4 callers)",
    "allowed_origins": "--allowed-origins (AgentCore authenticates each caller with SigV4)",
    "create_api_logging_role": "--create-api-logging-role (no API Gateway stage here)",
}
AGENTCORE_AUTHENTICATION = (
    "AgentCore Runtime takes no voicewire tickets: every caller signs with SigV4 as an IAM "
    "principal allowed bedrock-agentcore:InvokeAgentRuntime on the runtime ARN and ARN/* "
    "(InvokeAgentRuntimeWithWebSocketStream too for /ws). POST /invocations: boto3's "
    "bedrock-agentcore invoke_agent_runtime; /ws: SigV4 headers or a presigned URL, which "
    "`agent-infra url --runtime-arn ARN` prints"
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agent-infra", description="The agent side of a voicewire deployment."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for action in ACTIONS:
        infra = commands.add_parser(
            action,
            help=f"cdk {action} the VoiceApi stack (or, --runtime agentcore, {AGENTCORE_STACK})",
        )
        add_runtime_argument(infra)
        infra.add_argument(
            "--bedrock-model-id",
            required=action != "destroy",
            help="the Bedrock model (or inference profile) the agent uses",
        )
        infra.add_argument(
            "--endpoint-name", help=f"the speech endpoint (default {DEFAULT_SPEECH_ENDPOINT})"
        )
        infra.add_argument(
            "--speech-engine",
            choices=sorted(SPEECH_ENGINES),
            help="the speech endpoint's engine, where the endpoint cannot say (not deployed yet, "
            "or not voicewire's); deploy and diff read it from the endpoint and refuse a "
            "different one. synth: the worker's limits for it (default torch)",
        )
        infra.add_argument(
            "--allowed-origins",
            help="comma-separated browser origins that may connect (default: any)",
        )
        infra.add_argument(
            "--with-page",
            action="store_true",
            help="also the VoicePage stack: the browser page (web/) on CloudFront, for this API",
        )
        infra.add_argument(
            "--binary-audio",
            action="store_true",
            help="audio as binary WebSocket frames by default (once agent-infra check has shown "
            "this deployment carries them); else base64 text frames",
        )
        infra.add_argument(
            "--agent",
            type=agent_choice,
            help="who answers: builtin (default), strands, or strands:package.module:function",
        )
        infra.add_argument(
            "--tools",
            help="the agent's tools, comma-separated (default current_time,search_docs; "
            "'' for none)",
        )
        infra.add_argument(
            "--knowledge-base-id",
            help="a Bedrock Knowledge Base search_docs asks (retrieve) instead of voicewire's "
            "docs; the worker may retrieve from it and nothing else",
        )
        infra.add_argument(
            "--create-api-logging-role",
            action="store_true",
            help="deploy: if the account has no API Gateway CloudWatch role in this Region, "
            "create one and set it (account-wide) so the stage has access logs",
        )
        infra.add_argument(
            "--enable-model",
            action="store_true",
            help="deploy: if the account has not used the Bedrock model yet, invoke it once "
            "as you (one token), which subscribes the account",
        )
    token = commands.add_parser("token", help="mint a connection token from the deployed secret")
    token.add_argument(
        "--ttl", type=int, default=120, help="seconds the ticket stays valid (at most 600)"
    )
    token.add_argument("--principal", default="agent-infra", help="who the token names")
    add_runtime_argument(token)
    url = commands.add_parser(
        "url",
        help="a SigV4-presigned wss:// URL of an AgentCore runtime's /ws (--runtime agentcore)",
    )
    url.add_argument(
        "--runtime-arn",
        required=True,
        type=runtime_arn,
        help="the runtime's ARN (the VoiceAgentRuntime stack's RuntimeArn output)",
    )
    url.add_argument("--region", help="where the runtime is (default: the ARN's region)")
    url.add_argument(
        "--session-id",
        type=session_id,
        help="the runtime session to open or rejoin, 33 to 256 characters (default: a new one)",
    )
    url.add_argument(
        "--expires",
        type=presigned_seconds,
        default=MAX_PRESIGNED_SECONDS,
        help=f"seconds the URL may be used to connect (at most {MAX_PRESIGNED_SECONDS})",
    )
    url.add_argument(
        "--qualifier",
        default=AGENTCORE_ENDPOINT,
        help=f"the runtime endpoint (default {AGENTCORE_ENDPOINT}, the stack's; DEFAULT is the "
        "service's own)",
    )
    demo = commands.add_parser("demo", help="voicewire demo's bidi vs batch on a deployed API")
    add_demo_arguments(demo, own_stack=False)
    # --url or --runtime-arn: argparse cannot say "one of", so main checks that one is given.
    demo._option_string_actions["--url"].required = False
    add_runtime_arn_argument(demo)
    check = commands.add_parser(
        "check",
        help="check a deployed WebSocket API: audio frame type, first audio, bidi vs batch",
    )
    check.add_argument("--url", help="the API's wss:// URL (the stage URL)")
    add_runtime_arn_argument(check)
    check.add_argument("--token", help="a connection token, if the API requires one")
    check.add_argument("--prompt", help="the question for the ask turns")
    check.add_argument("--json", help="also write the report to this file")
    return parser


ACTIONS = ("deploy", "diff", "synth", "destroy")


def add_runtime_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--runtime",
        choices=RUNTIMES,
        default="apigateway",
        help="the agent's front door: apigateway (the WebSocket API and Lambda, default) or "
        "agentcore (Bedrock AgentCore Runtime)",
    )


def add_runtime_arn_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--runtime-arn",
        type=runtime_arn,
        help="an AgentCore runtime instead of --url: its /ws, a presigned URL per connection",
    )


def runtime_arn(value: str) -> str:
    """``arn:<partition>:bedrock-agentcore:<region>:<account>:runtime/<id>``, checked."""
    parts = value.split(":")
    if (
        len(parts) != 6
        or parts[0] != "arn"
        or parts[2] != "bedrock-agentcore"
        or not all(parts[3:5])
        or not parts[5].startswith("runtime/")
        or parts[5] == "runtime/"
    ):
        raise argparse.ArgumentTypeError(
            f"not an AgentCore runtime ARN: {value!r} (expected "
            "arn:aws:bedrock-agentcore:REGION:ACCOUNT:runtime/ID, the stack's RuntimeArn output)"
        )
    return value


def session_id(value: str) -> str:
    low, high = SESSION_ID_LENGTHS
    if not low <= len(value) <= high:
        raise argparse.ArgumentTypeError(
            f"a runtime session id has {low} to {high} characters, not {len(value)}"
        )
    return value


def presigned_seconds(value: str) -> int:
    seconds = int(value)
    if not 1 <= seconds <= MAX_PRESIGNED_SECONDS:
        raise argparse.ArgumentTypeError(
            f"AgentCore takes a presigned URL for 1 to {MAX_PRESIGNED_SECONDS} seconds"
        )
    return seconds


def ensure_token_secret(region: str) -> bool:
    """Create the token secret if the account has none; True if it was created."""
    import boto3

    ssm = boto3.client("ssm", region_name=region)
    try:
        ssm.get_parameter(Name=TOKEN_SECRET_PARAMETER)
        return False
    except ssm.exceptions.ParameterNotFound:
        ssm.put_parameter(
            Name=TOKEN_SECRET_PARAMETER,
            Type="SecureString",
            Value=secrets.token_urlsafe(48),
            Description="voicewire: the HMAC secret of connection tokens",
        )
        return True


def plan(args: argparse.Namespace) -> tuple[list[str], dict[str, str]]:
    """The stacks an infra command acts on, and the context it gives the app."""
    context = {}
    if args.runtime == "agentcore":
        given = [words for option, words in API_ONLY_OPTIONS.items() if getattr(args, option)]
        if given:
            raise InfraError(f"not for --runtime agentcore: {'; '.join(given)}")
        context["runtime"] = "agentcore"
    if args.bedrock_model_id:
        context["bedrock_model_id"] = args.bedrock_model_id
    if args.endpoint_name:
        context["speech_endpoint_name"] = args.endpoint_name
    if args.speech_engine:
        # synth and destroy as given; deploy and diff put the endpoint's own here (infra).
        context["speech_engine"] = args.speech_engine
    if args.allowed_origins:
        context["allowed_origins"] = args.allowed_origins
    if args.binary_audio:
        context["binary_audio"] = "true"
    if args.agent:
        context["agent"] = args.agent
    if args.tools is not None:
        context["tools"] = args.tools
    if args.knowledge_base_id:
        context["knowledge_base_id"] = args.knowledge_base_id
    if args.runtime == "agentcore":
        return [AGENTCORE_STACK], context
    stacks = ["VoiceApi"]
    if args.with_page:
        context["page"] = "true"
        # The page reads the API's URL: deployed after it, destroyed before it.
        stacks = ["VoicePage", "VoiceApi"] if args.command == "destroy" else [*stacks, "VoicePage"]
    return stacks, context


def infra(args: argparse.Namespace) -> int:
    stacks, context = plan(args)
    needs_account = args.command != "synth"
    if args.command in ("deploy", "diff"):
        check_node()
        account, region = check_account()
        session = boto3_session(region)
        # Before anything is created: a wrong engine would deploy the wrong time limits.
        engine, said_engine = speech_engine(args, session)
        context["speech_engine"] = engine
        print(said_engine)
        if args.runtime == "agentcore":
            # No token secret and no stage: the model's readiness and Transcribe's streams (the
            # runtime's /ws signs listen URLs too) concern this stack.
            findings = [
                transcribe_streams(session, conversations=speech_conversations()),
                *model_findings(args, session),
            ]
            print(render(account, region, findings))
            return run_cdk(args.command, stacks, context, needs_account=needs_account)
        if args.command == "deploy" and ensure_token_secret(region):
            print(f"created the token secret {TOKEN_SECRET_PARAMETER} (SSM SecureString)")
        findings = account_findings(args, session, engine)
        print(render(account, region, findings))
        context["access_logs"] = "true" if findings[0].ready else "false"
    return run_cdk(args.command, stacks, context, needs_account=needs_account)


def speech_engine(args: argparse.Namespace, session: Any) -> tuple[str, str]:
    """The engine of the speech endpoint the agent speaks to, read from the endpoint itself
    (its model's container environment), and a line saying what the agent gets with it;
    InfraError where it cannot be known or contradicts ``--speech-engine``."""
    from stacks.voice_api import VoiceApiSettings

    name = args.endpoint_name or DEFAULT_SPEECH_ENDPOINT
    given = args.speech_engine
    deploy_it = f"speech-infra deploy {name.removeprefix('voicewire-')} " + (
        f"--engine {given}" if given else "[--engine onnx]"
    )

    def as_given(reason: str) -> tuple[str, str]:
        return given, f"{name}, the {given} engine as --speech-engine says ({reason})"

    try:
        deployed = describe_endpoint(session, name)
    except (BotoCoreError, ClientError) as error:
        if not given:
            raise InfraError(
                f"could not read the speech endpoint {name} ({said(error)}), whose engine sets "
                "the agent's time limits: allow sagemaker:DescribeEndpoint, "
                "DescribeEndpointConfig and DescribeModel, or name its engine with "
                "--speech-engine torch|onnx"
            ) from None
        engine, what = as_given(f"unverified: {said(error)}")
    else:
        if deployed is None:
            if not given:
                raise InfraError(
                    f"the speech endpoint {name} does not exist in {session.region_name}, and "
                    f"the agent's time limits follow its engine: deploy it first ({deploy_it}) "
                    "or name its engine with --speech-engine torch|onnx"
                )
            engine, what = as_given("unverified: not deployed yet")
        elif deployed.engine is None:
            if not given:
                raise InfraError(
                    f"the speech endpoint {name} is not one voicewire deployed (its model sets "
                    f"no {ENGINE_VARIABLE}), so its engine is unknown: name it with "
                    "--speech-engine torch|onnx"
                )
            engine, what = as_given("the endpoint does not say")
        elif given and given != deployed.engine:
            raise InfraError(
                f"--speech-engine {given}, but {name} runs the {deployed.engine} engine (on "
                f"{deployed.instance_type}): drop --speech-engine, or redeploy the endpoint "
                f"with the {given} engine first ({deploy_it} --replace-engine)"
            )
        else:
            engine = deployed.engine
            what = (
                f"{name} runs the {engine} engine ({deployed.instances} "
                f"{deployed.instance_type}, {deployed.status})"
            )
    policy = VoiceApiSettings(bedrock_model_id="", speech_engine=engine).worker_policy
    stall = f"a {policy.speech_chunk_timeout_seconds:g} s speech stall limit"
    gets = (
        f"the agent gets {stall}"
        if args.runtime == "agentcore"
        else f"the worker gets a {policy.timeout_seconds} s timeout and {stall}"
    )
    return engine, f"speech: {what}: {gets}"


def account_findings(args: argparse.Namespace, session: Any, engine: str) -> list[Finding]:
    """What the account has and still needs (``account_readiness``); the first is the logging
    role, which decides the stage's access logs. Only ``deploy`` creates or invokes anything."""
    from stacks.voice_api import VoiceApiSettings

    deploying = args.command == "deploy"
    # The settings app.py gives the stack (speech_capacity_sessions: its default, the fleet's
    # maximum), with the endpoint's engine.
    settings = VoiceApiSettings(bedrock_model_id=args.bedrock_model_id, speech_engine=engine)
    rate, _ = settings.stage_throttle
    return [
        api_logging_role(session, create=deploying and args.create_api_logging_role),
        lambda_concurrency(
            session,
            speech_sessions=settings.speech_capacity_sessions,
            stage_rate=rate,
            worker=settings.worker_policy,
        ),
        transcribe_streams(session, conversations=speech_conversations()),
        *model_findings(args, session),
    ]


def speech_conversations() -> int:
    """The conversations the speech fleet serves at its largest (what app.py sizes for)."""
    from stacks.voice_api import VoiceApiSettings

    return VoiceApiSettings(bedrock_model_id="").speech_capacity_sessions


def boto3_session(region: str | None) -> Any:
    import boto3

    return boto3.Session(region_name=region)


def model_findings(args: argparse.Namespace, session: Any) -> list[Finding]:
    """The Bedrock model's readiness; only ``deploy --enable-model`` invokes it."""
    if not args.bedrock_model_id:
        return []
    enable = args.command == "deploy" and args.enable_model
    return model_access(session, args.bedrock_model_id, enable=enable)


def presigned_websocket_url(
    arn: str,
    region: str | None = None,
    session: str | None = None,
    expires: int = MAX_PRESIGNED_SECONDS,
    qualifier: str = AGENTCORE_ENDPOINT,
    boto_session: Any = None,
    query: dict[str, str] | None = None,
) -> tuple[str, str]:
    """A SigV4-presigned ``wss://`` URL of the runtime's ``/ws`` and the runtime session it
    opens: the SDK's ``AgentCoreRuntimeClient.generate_presigned_url``, which puts the session
    id and the qualifier in the signed query. Signed here, with this machine's credentials;
    nothing is sent."""
    from bedrock_agentcore.runtime import AgentCoreRuntimeClient

    region = region or arn.split(":")[3]
    session = session or str(uuid.uuid4())  # 36 characters
    boto_session = boto_session or boto3_session(region)
    if boto_session.get_credentials() is None:
        raise InfraError(
            "no AWS credentials to sign with: set AWS_PROFILE, or run `aws configure` or "
            "`aws sso login`, then run this again"
        )
    client = AgentCoreRuntimeClient(region=region, session=boto_session)
    url = client.generate_presigned_url(
        arn, session_id=session, endpoint_name=qualifier, expires=expires, custom_headers=query
    )
    return url, session


@dataclass
class PresignedConnections:
    """A fresh presigned ``/ws`` URL for each connection (voicewire's ``ConnectionUrl``: a
    function giving one per connection), each a new runtime session. The audio delivery goes
    in the signed query: a parameter added after signing would break the signature, so the
    client's fallback to base64 could not add it; AgentCore's default delivery is base64 anyway
    until binary frames are proven there."""

    arn: str
    region: str | None = None
    qualifier: str = AGENTCORE_ENDPOINT
    boto_session: Any = None

    def __call__(self) -> str:
        return self.with_query({"audio": "base64"})

    def with_query(self, query: dict[str, str]) -> str:
        """A new session's URL, ``query`` signed in (``agent-infra check``'s ``audio=``)."""
        url, _ = presigned_websocket_url(
            self.arn,
            self.region,
            qualifier=self.qualifier,
            boto_session=self.boto_session,
            query=query or None,
        )
        return url

    def __str__(self) -> str:
        return f"AgentCore runtime {self.arn} (a presigned /ws URL per connection)"


def print_presigned_url(args: argparse.Namespace) -> None:
    url, session = presigned_websocket_url(
        args.runtime_arn, args.region, args.session_id, args.expires, args.qualifier
    )
    print(url)
    # On stderr: `$(agent-infra url ...)` takes the URL alone.
    print(
        f"runtime session {session}; connect within {args.expires} s (the session then lasts "
        "until it is idle 15 minutes, at most 8 hours)",
        file=sys.stderr,
    )


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    try:
        if args.command in ACTIONS:
            sys.exit(infra(args))
        if args.command == "token":
            if args.runtime == "agentcore":
                sys.exit(
                    f"agent-infra token: no token for --runtime agentcore. "
                    f"{AGENTCORE_AUTHENTICATION}."
                )
            print(deployed_token(args.ttl, args.principal))
            return
        if args.command == "url":
            print_presigned_url(args)
            return
        if args.command == "demo" and args.runtime_arn:
            from voicewire_tools.commands import demo

            presigned = PresignedConnections(args.runtime_arn)
            presigned()  # signs once now: no credentials is one line, before any turn
            args.url, args.ticket_minter = presigned, None
            demo.run(args)
            return
        if args.command in ("demo", "check") and not (args.url or args.runtime_arn):
            build_parser().error(
                f"{args.command} needs --url (the API's wss:// URL) or --runtime-arn"
            )
        presigned = None
        if args.command == "check" and args.runtime_arn:
            presigned = PresignedConnections(args.runtime_arn)
            presigned.with_query({})  # signs once now: no credentials is one line
        if args.command == "demo":
            from voicewire_tools.commands import demo

            # A ticket per connection, minted from the secret (a URL with its own is kept).
            args.ticket_minter = ticket_minter("agent-infra-demo")
            demo.run(args)
            return
    except InfraError as error:
        sys.exit(f"agent-infra {args.command}: {error}")
    from voicewire_tools.commands.deployment_check import ASK_PROMPT, CheckFailed, check, render

    try:
        prompt = args.prompt or ASK_PROMPT
        if presigned is not None:  # a presigned URL per connection, its query signed in
            report = asyncio.run(
                check(str(presigned), prompt=prompt, connection_url=presigned.with_query)
            )
        else:
            # A ticket opens one connection and the check opens several: without --token, one
            # is minted per connection from the deployed secret.
            given = args.token or "token=" in args.url
            mint = None if given else ticket_minter("agent-infra-check")
            report = asyncio.run(check(args.url, args.token, prompt, mint=mint))
    except CheckFailed as error:
        sys.exit(f"agent-infra check: {error}")
    print(render(report))
    if args.json:
        with open(args.json, "w") as out:
            json.dump(asdict(report) | {"batch_over_bidi": report.batch_over_bidi}, out, indent=2)
    if not report.ok:
        sys.exit(1)


if __name__ == "__main__":
    main()
