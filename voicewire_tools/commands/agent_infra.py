"""``agent-infra``: the agent side of a deployment (the WebSocket API and its functions).

    uv run agent-infra deploy|diff|synth|destroy --bedrock-model-id ID [--endpoint-name NAME]
        [--allowed-origins https://app.example.com] [--with-page] [--binary-audio]
        [--create-api-logging-role] [--enable-model]
    uv run agent-infra token [--ttl 120] [--principal NAME]
    uv run agent-infra demo --url wss://... [--prompt ...] [--trials 3]
    uv run agent-infra check --url wss://abc123.execute-api.eu-west-1.amazonaws.com/prod \\
        [--token TOKEN] [--json report.json]

``deploy`` makes the token secret (an SSM SecureString, which CloudFormation cannot create) if
the account has none yet, says what the account has and still needs (``account_readiness``: the
API Gateway CloudWatch role the stage's access logs need, the Bedrock model's first use), then
deploys the VoiceApi stack; ``--with-page`` also deploys
VoicePage, the browser page on CloudFront with the API's URL filled in (its ``PageUrl`` output).
``token`` mints a connection token from the deployed secret. ``demo`` runs ``voicewire demo``'s
bidi-vs-batch comparison against the deployed API (a fresh ticket for each connection unless the
URL has one).

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
from collections.abc import Sequence
from dataclasses import asdict

from functions.auth_tokens import TOKEN_SECRET_PARAMETER
from voicewire_tools.commands.account_readiness import (
    Finding,
    api_logging_role,
    model_access,
    render,
)
from voicewire_tools.commands.cdk_runner import InfraError, check_account, check_node, run_cdk
from voicewire_tools.commands.demo import add_arguments as add_demo_arguments
from voicewire_tools.commands.up import agent_choice
from voicewire_tools.deployed_tickets import deployed_token, ticket_minter


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agent-infra", description="The agent side of a voicewire deployment."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for action in ACTIONS:
        infra = commands.add_parser(action, help=f"cdk {action} the VoiceApi stack")
        infra.add_argument(
            "--bedrock-model-id", required=action != "destroy",
            help="the Bedrock model (or inference profile) the agent uses",
        )  # fmt: skip
        infra.add_argument("--endpoint-name", help="the speech endpoint (voicewire-kokoro-82m)")
        infra.add_argument(
            "--allowed-origins",
            help="comma-separated browser origins that may connect (default: any)",
        )
        infra.add_argument(
            "--with-page", action="store_true",
            help="also the VoicePage stack: the browser page (web/) on CloudFront, for this API",
        )  # fmt: skip
        infra.add_argument(
            "--binary-audio", action="store_true",
            help="audio as binary WebSocket frames by default (once agent-infra check has shown "
            "this deployment carries them); else base64 text frames",
        )  # fmt: skip
        infra.add_argument(
            "--agent", type=agent_choice,
            help="who answers: builtin (default), strands, or strands:package.module:function",
        )  # fmt: skip
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
            "--create-api-logging-role", action="store_true",
            help="deploy: if the account has no API Gateway CloudWatch role in this Region, "
            "create one and set it (account-wide) so the stage has access logs",
        )  # fmt: skip
        infra.add_argument(
            "--enable-model", action="store_true",
            help="deploy: if the account has not used the Bedrock model yet, invoke it once "
            "as you (one token), which subscribes the account",
        )  # fmt: skip
    token = commands.add_parser("token", help="mint a connection token from the deployed secret")
    token.add_argument(
        "--ttl", type=int, default=120, help="seconds the ticket stays valid (at most 600)"
    )
    token.add_argument("--principal", default="agent-infra", help="who the token names")
    demo = commands.add_parser("demo", help="voicewire demo's bidi vs batch on a deployed API")
    add_demo_arguments(demo, own_stack=False)
    check = commands.add_parser(
        "check",
        help="check a deployed WebSocket API: audio frame type, first audio, bidi vs batch",
    )
    check.add_argument("--url", required=True, help="the API's wss:// URL (the stage URL)")
    check.add_argument("--token", help="a connection token, if the API requires one")
    check.add_argument("--prompt", help="the question for the ask turns")
    check.add_argument("--json", help="also write the report to this file")
    return parser


ACTIONS = ("deploy", "diff", "synth", "destroy")


def ensure_token_secret(region: str) -> bool:
    """Create the token secret if the account has none; True if it was created."""
    import boto3

    ssm = boto3.client("ssm", region_name=region)
    try:
        ssm.get_parameter(Name=TOKEN_SECRET_PARAMETER)
        return False
    except ssm.exceptions.ParameterNotFound:
        ssm.put_parameter(
            Name=TOKEN_SECRET_PARAMETER, Type="SecureString", Value=secrets.token_urlsafe(48),
            Description="voicewire: the HMAC secret of connection tokens",
        )  # fmt: skip
        return True


def plan(args: argparse.Namespace) -> tuple[list[str], dict[str, str]]:
    """The stacks an infra command acts on, and the context it gives the app."""
    context = {}
    if args.bedrock_model_id:
        context["bedrock_model_id"] = args.bedrock_model_id
    if args.endpoint_name:
        context["speech_endpoint_name"] = args.endpoint_name
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
        if args.command == "deploy" and ensure_token_secret(region):
            print(f"created the token secret {TOKEN_SECRET_PARAMETER} (SSM SecureString)")
        findings = account_findings(args, region)
        print(render(account, region, findings))
        context["access_logs"] = "true" if findings[0].ready else "false"
    return run_cdk(args.command, stacks, context, needs_account=needs_account)


def account_findings(args: argparse.Namespace, region: str) -> list[Finding]:
    """What the account has and still needs (``account_readiness``); the first is the logging
    role, which decides the stage's access logs. Only ``deploy`` creates or invokes anything."""
    import boto3

    session = boto3.Session(region_name=region)
    deploying = args.command == "deploy"
    findings = [api_logging_role(session, create=deploying and args.create_api_logging_role)]
    if args.bedrock_model_id:
        findings += model_access(
            session, args.bedrock_model_id, enable=deploying and args.enable_model
        )
    return findings


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    try:
        if args.command in ACTIONS:
            sys.exit(infra(args))
        if args.command == "token":
            print(deployed_token(args.ttl, args.principal))
            return
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
        # A ticket opens one connection and the check opens several: without --token, one is
        # minted per connection from the deployed secret.
        given = args.token or "token=" in args.url
        mint = None if given else ticket_minter("agent-infra-check")
        report = asyncio.run(check(args.url, args.token, args.prompt or ASK_PROMPT, mint=mint))
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
