"""``agent-infra`` with ``--runtime agentcore``: the stack and context it gives the CDK, what it
refuses, and ``agent-infra url``'s presigned ``/ws`` URL, signed offline with fake credentials."""

from __future__ import annotations

import datetime
from urllib.parse import parse_qs, quote, urlsplit

import pytest

from voicewire_tools.commands import agent_infra
from voicewire_tools.commands.cdk_runner import InfraError

ARN = "arn:aws:bedrock-agentcore:eu-west-1:123456789012:runtime/voicewire_agent-AbCdEf1234"
SESSION = "voicewire-session-0123456789abcdef0123"  # 38 characters


def parse(*argv: str):
    return agent_infra.build_parser().parse_args(list(argv))


def test_agentcore_acts_on_its_own_stack_with_the_agents_context():
    deploy = parse(
        "deploy",
        "--runtime",
        "agentcore",
        "--bedrock-model-id",
        "m",
        "--knowledge-base-id",
        "KB1",
        "--binary-audio",
    )
    assert agent_infra.plan(deploy) == (
        ["VoiceAgentRuntime"],
        {
            "runtime": "agentcore",
            "bedrock_model_id": "m",
            "knowledge_base_id": "KB1",
            "binary_audio": "true",
        },
    )
    destroy = parse("destroy", "--runtime", "agentcore")
    assert agent_infra.plan(destroy) == (["VoiceAgentRuntime"], {"runtime": "agentcore"})
    # The default is the WebSocket API, as before.
    assert agent_infra.plan(parse("deploy", "--bedrock-model-id", "m"))[0] == ["VoiceApi"]


@pytest.mark.parametrize(
    "option",
    [["--with-page"], ["--allowed-origins", "https://a.example"], ["--create-api-logging-role"]],
)
def test_the_apis_own_options_are_refused_for_agentcore(option):
    args = parse("deploy", "--runtime", "agentcore", "--bedrock-model-id", "m", *option)
    with pytest.raises(InfraError, match=f"not for --runtime agentcore: {option[0]}"):
        agent_infra.plan(args)


def test_token_says_how_a_caller_authenticates_to_agentcore(capsys):
    with pytest.raises(SystemExit) as exited:
        agent_infra.main(["token", "--runtime", "agentcore"])
    message = str(exited.value.code)
    assert "SigV4" in message and "bedrock-agentcore:InvokeAgentRuntime" in message
    assert "presigned URL" in message and "agent-infra url --runtime-arn" in message
    assert capsys.readouterr().out == ""  # no token printed


@pytest.fixture
def fake_credentials(monkeypatch):
    """Credentials that sign but reach nothing, and a fixed clock for the signature."""
    import botocore.auth

    for name, value in {
        "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE",
        "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG",
        "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
        "AWS_CONFIG_FILE": "/nonexistent",
    }.items():
        monkeypatch.setenv(name, value)
    for name in ("AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    moment = datetime.datetime(2026, 12, 4, 6, 0, 0, tzinfo=datetime.UTC)
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: moment)


def presigned(capsys, *extra: str) -> str:
    agent_infra.main(["url", "--runtime-arn", ARN, *extra])
    captured = capsys.readouterr()
    return captured.out.strip()


def test_url_prints_a_sigv4_presigned_wss_url_of_the_runtimes_ws(fake_credentials, capsys):
    url = presigned(capsys, "--session-id", SESSION, "--expires", "120")
    parts = urlsplit(url)
    assert (parts.scheme, parts.hostname) == ("wss", "bedrock-agentcore.eu-west-1.amazonaws.com")
    assert parts.path == f"/runtimes/{quote(ARN, safe='')}/ws"
    query = {name: values[0] for name, values in parse_qs(parts.query).items()}
    assert query["qualifier"] == "live"
    assert query["X-Amzn-Bedrock-AgentCore-Runtime-Session-Id"] == SESSION
    assert query["X-Amz-Algorithm"] == "AWS4-HMAC-SHA256"
    assert (
        query["X-Amz-Credential"] == "AKIDEXAMPLE/20261204/eu-west-1/bedrock-agentcore/aws4_request"
    )
    assert (query["X-Amz-Date"], query["X-Amz-Expires"]) == ("20261204T060000Z", "120")
    assert query["X-Amz-SignedHeaders"] == "host"
    assert len(query["X-Amz-Signature"]) == 64
    # The session id and the qualifier are signed: another gives another signature, the same
    # gives the same (the clock is fixed).
    assert presigned(capsys, "--session-id", SESSION, "--expires", "120") == url
    other = presigned(capsys, "--session-id", SESSION[::-1], "--expires", "120")
    assert parse_qs(urlsplit(other).query)["X-Amz-Signature"][0] != query["X-Amz-Signature"]
    default = presigned(
        capsys, "--session-id", SESSION, "--expires", "120", "--qualifier", "DEFAULT"
    )
    assert parse_qs(urlsplit(default).query)["X-Amz-Signature"][0] != query["X-Amz-Signature"]


def test_url_opens_a_new_session_by_default_and_says_which(fake_credentials, capsys):
    agent_infra.main(["url", "--runtime-arn", ARN, "--region", "us-west-2"])
    captured = capsys.readouterr()
    query = parse_qs(urlsplit(captured.out.strip()).query)
    session = query["X-Amzn-Bedrock-AgentCore-Runtime-Session-Id"][0]
    assert 33 <= len(session) <= 256 and f"runtime session {session}" in captured.err
    assert query["X-Amz-Expires"] == ["300"]
    assert urlsplit(captured.out).hostname == "bedrock-agentcore.us-west-2.amazonaws.com"


@pytest.mark.parametrize(
    "argv",
    [
        ["--runtime-arn", "arn:aws:lambda:eu-west-1:123456789012:function:f"],
        ["--runtime-arn", ARN, "--expires", "301"],
        ["--runtime-arn", ARN, "--session-id", "too-short"],
    ],
)
def test_url_refuses_what_agentcore_would(argv, capsys):
    with pytest.raises(SystemExit) as exited:
        agent_infra.main(["url", *argv])
    assert exited.value.code == 2
    assert "error: argument" in capsys.readouterr().err


def test_url_without_credentials_says_so(monkeypatch):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(SystemExit) as exited:
        agent_infra.main(["url", "--runtime-arn", ARN])
    assert "agent-infra url: no AWS credentials to sign with" in str(exited.value.code)


def test_demo_runs_on_a_runtime_with_a_presigned_url_per_connection(fake_credentials, monkeypatch):
    from voicewire_tools.commands import demo

    ran = []
    monkeypatch.setattr(demo, "run", ran.append)
    agent_infra.main(["demo", "--runtime-arn", ARN, "--trials", "1"])
    (args,) = ran
    assert callable(args.url) and args.ticket_minter is None
    assert ARN in str(args.url)  # what the demo prints as its target
    first, second = args.url(), args.url()
    sessions = set()
    for url in (first, second):
        query = {name: values[0] for name, values in parse_qs(urlsplit(url).query).items()}
        assert query["audio"] == "base64"  # in the signed query: nothing is added after
        assert (
            query["X-Amz-Algorithm"] == "AWS4-HMAC-SHA256" and len(query["X-Amz-Signature"]) == 64
        )
        sessions.add(query["X-Amzn-Bedrock-AgentCore-Runtime-Session-Id"])
    assert len(sessions) == 2  # a new runtime session per connection
    with pytest.raises(SystemExit) as exited:  # neither --url nor --runtime-arn
        agent_infra.main(["demo"])
    assert exited.value.code == 2


def test_check_runs_on_a_runtime_with_its_query_signed_into_each_url(fake_credentials, monkeypatch):
    from voicewire_tools.commands import deployment_check

    checked = {}

    async def fake_check(url, token=None, prompt="", mint=None, connection_url=None):
        checked.update(url=url, connection_url=connection_url)
        raise deployment_check.CheckFailed("stopped here: nothing is reached offline")

    monkeypatch.setattr(deployment_check, "check", fake_check)
    with pytest.raises(SystemExit, match="stopped here"):
        agent_infra.main(["check", "--runtime-arn", ARN])
    assert ARN in checked["url"]
    url = checked["connection_url"]({"audio": "binary"})
    query = {name: values[0] for name, values in parse_qs(urlsplit(url).query).items()}
    assert query["audio"] == "binary" and len(query["X-Amz-Signature"]) == 64
    plain = checked["connection_url"]({})
    assert "audio" not in parse_qs(urlsplit(plain).query)
