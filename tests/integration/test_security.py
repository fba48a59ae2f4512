"""Who may connect, how much one connection may do, and what the logs never hold
(docs/security.md): connect tickets, browser origins, per-connection limits, log hygiene."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import threading
import warnings

import httpx
import jwt
import pytest
from test_handlers import (  # noqa: F401 (fixture)
    CONNECTION,
    SAMPLE_NOW,
    SAMPLE_SECRET,
    adapters,
    posted,
    sample,
)
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from functions.access.tickets import (
    AUDIENCE,
    ISSUER,
    LEEWAY_SECONDS,
    MAX_TICKET_SECONDS,
    mint_token,
    verify_token,
)
from functions.handlers.authorizer import authorize
from functions.handlers.connect import connect as connect_handler
from functions.handlers.messages import handle_message
from voicewire.turn_client import run_turn
from voicewire_tools.local_stack.stack import LocalStack, StackOptions

NOW = 1_800_000_000.0


def claims(**changes: object) -> dict:
    base = {
        "sub": "alice",
        "iss": ISSUER,
        "aud": AUDIENCE,
        "iat": int(NOW),
        "exp": int(NOW) + 120,
        "jti": "ticket-1",
    }
    base.update(changes)
    return {key: value for key, value in base.items() if value is not None}


def signed(payload: dict, secret: str = SAMPLE_SECRET, algorithm: str = "HS256") -> str:
    with warnings.catch_warnings():  # HS512 with a 37-byte secret: weak, and meant to be
        warnings.simplefilter("ignore")
        return jwt.encode(payload, secret, algorithm=algorithm)


def forged(header: dict, payload: dict, secret: str = SAMPLE_SECRET) -> str:
    """A token with any header, HMAC-SHA256 signed with the secret: what an attacker who
    learned nothing but the algorithm list would try (``alg`` swapped to RS256, say)."""

    def part(value: dict) -> bytes:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=")

    head = part(header) + b"." + part(payload)
    signature = hmac.new(secret.encode(), head, hashlib.sha256).digest()
    return (head + b"." + base64.urlsafe_b64encode(signature).rstrip(b"=")).decode()


def unsigned(payload: dict) -> str:
    return forged({"alg": "none", "typ": "JWT"}, payload).rsplit(".", 1)[0] + "."


REJECTED = {
    "expired past the leeway": signed(claims(exp=int(NOW) - LEEWAY_SECONDS - 1)),
    "issued in the future past the leeway": signed(
        claims(iat=int(NOW) + LEEWAY_SECONDS + 60, exp=int(NOW) + LEEWAY_SECONDS + 120)
    ),
    "wrong signature": signed(claims(), secret="another-secret-of-the-same-length-xxxxx"),
    "alg none": unsigned(claims()),
    "alg HS512 with the same secret": signed(claims(), algorithm="HS512"),
    "alg RS256 in the header, HMAC-signed (confusion)": forged({"alg": "RS256"}, claims()),
    "no exp": signed(claims(exp=None)),
    "no sub": signed(claims(sub=None)),
    "empty sub": signed(claims(sub="")),
    "numeric sub": signed(claims(sub=42)),
    "no iat": signed(claims(iat=None)),
    "no jti": signed(claims(jti=None)),
    "no aud": signed(claims(aud=None)),
    "another audience": signed(claims(aud="some-other-api")),
    "another issuer": signed(claims(iss="someone-else")),
    "a lifetime over the limit": signed(claims(exp=int(NOW) + MAX_TICKET_SECONDS + 60)),
    "not a JWT": "not.a.jwt",
    "garbage": "%%%",
    "empty": "",
}


@pytest.mark.parametrize("name", list(REJECTED))
def test_every_bad_ticket_is_rejected_by_the_authorizer(adapters, name):  # noqa: F811
    event = sample("authorizer_valid")
    event["queryStringParameters"] = {"token": REJECTED[name]}
    verdict = authorize(event, adapters, now=NOW)
    assert verdict["policyDocument"]["Statement"][0]["Effect"] == "Deny"
    assert verdict["principalId"] == "anonymous"


def test_a_good_ticket_passes_within_the_leeway_and_opens_one_connection_only(adapters):  # noqa: F811
    event = sample("authorizer_valid")
    token = signed(claims(exp=int(NOW) - LEEWAY_SECONDS + 5))  # just expired, within leeway
    event["queryStringParameters"] = {"token": token}
    first = authorize(event, adapters, now=NOW)
    again = authorize(event, adapters, now=NOW)
    assert first["policyDocument"]["Statement"][0]["Effect"] == "Allow"
    assert first["principalId"] == "alice"
    assert again["policyDocument"]["Statement"][0]["Effect"] == "Deny"  # replayed
    other = dict(event, queryStringParameters={"token": signed(claims(jti="ticket-2"))})
    assert authorize(other, adapters, now=NOW)["principalId"] == "alice"


def test_minted_tickets_are_short_lived_and_unique():
    first, second = (verify_token("s" * 32, mint_token("s" * 32, "bob")) for _ in range(2))
    assert first.ticket_id != second.ticket_id
    with pytest.raises(ValueError):
        mint_token("s" * 32, "bob", ttl_seconds=MAX_TICKET_SECONDS + 1)


# --- browser origins -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("origin", "effect"),
    [
        ("https://app.example.com", "Allow"),
        ("HTTPS://APP.EXAMPLE.COM/", "Allow"),  # origins compare case-insensitively
        ("https://evil.example.net", "Deny"),
        ("https://app.example.com.evil.net", "Deny"),
        ("null", "Deny"),  # a sandboxed frame or a file page
        (None, "Allow"),  # not a browser: held by its ticket
    ],
)
def test_the_authorizer_allows_only_listed_browser_origins(adapters, origin, effect):  # noqa: F811
    adapters.settings = _with_origins(adapters.settings, "https://app.example.com")
    event = sample("authorizer_browser")
    event["headers"].pop("Origin")
    if origin is not None:
        event["headers"]["Origin"] = origin
    verdict = authorize(event, adapters, now=SAMPLE_NOW)
    assert verdict["policyDocument"]["Statement"][0]["Effect"] == effect


def test_connect_refuses_a_foreign_origin_when_there_is_no_authorizer(adapters):  # noqa: F811
    adapters.settings = _with_origins(adapters.settings, "https://app.example.com")
    event = sample("connect")
    event["headers"]["Origin"] = "https://evil.example.net"
    assert connect_handler(event, adapters)["statusCode"] == 403
    assert adapters.connections.get(CONNECTION) is None
    event["headers"]["Origin"] = "https://app.example.com"
    assert connect_handler(event, adapters)["statusCode"] == 200


def _with_origins(settings, origins: str):

    from functions.settings import parse_origins

    return settings.changed(allowed_origins=parse_origins(origins))


# --- per-connection limits -------------------------------------------------------------------


def test_turns_past_the_per_minute_limit_are_refused_and_the_connection_stays(adapters):  # noqa: F811

    adapters.settings = adapters.settings.changed(max_turns_per_minute=3)
    connect_handler(sample("connect"), adapters)
    for _ in range(4):
        handle_message(sample("speak"), adapters)
    assert len(adapters.lambda_client.calls) == 3
    (refusal,) = [frame for frame in posted(adapters) if frame["type"] == "error"]
    assert refusal["code"] == "too_many_turns" and "3 turns" in refusal["message"]
    assert adapters.connections.get(CONNECTION).status == "open"
    handle_message(sample("voices"), adapters)  # other actions are not turns
    assert posted(adapters)[-1]["type"] == "voices"


def test_the_turn_window_starts_over_each_minute_and_holds_under_concurrency(adapters):  # noqa: F811
    connect_handler(sample("connect"), adapters)
    turns, minute = adapters.turns, 1_800_000_000 // 60 * 60
    admitted: list[bool] = []

    def admit() -> None:
        admitted.append(turns.admit(CONNECTION, 5, now=minute + 1))

    threads = [threading.Thread(target=admit) for _ in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert admitted.count(True) == 5  # conditional writes: no two took the last place
    assert not turns.admit(CONNECTION, 5, now=minute + 59)
    assert turns.admit(CONNECTION, 5, now=minute + 60)  # a new minute
    assert not turns.admit("no-such-connection", 5, now=minute)


# --- the local stack: --tokens, tickets, origins, and its logs -------------------------------


@pytest.fixture(scope="module")
def guarded_stack():
    options = StackOptions(
        port=0,
        speech_port=0,
        runtime_port=0,
        tokens=True,
        allowed_origins=frozenset({"https://app.example.com"}),
    )
    with LocalStack(options, lambda line: None) as local:
        yield local


async def test_the_local_stack_refuses_reused_tickets_and_foreign_origins(guarded_stack):
    local = guarded_stack
    ticket = await asyncio.to_thread(
        httpx.post,
        f"{local.base_url}/tickets",
        headers={"Authorization": f"Bearer {local.api_key}"},
        params={"principal": "carol"},
    )
    assert ticket.status_code == 200 and ticket.json()["expires_in"] <= MAX_TICKET_SECONDS
    url = f"{local.ws_url}?token={ticket.json()['token']}"
    result = await run_turn(url, {"action": "speak", "text": "Hi."})
    assert result.status == "complete"
    with pytest.raises(InvalidStatus) as replayed:
        async with connect(url):
            pass
    assert replayed.value.response.status_code == 403
    no_key = await asyncio.to_thread(httpx.post, f"{local.base_url}/tickets")
    assert no_key.status_code == 401 and "token" not in no_key.json()
    with pytest.raises(InvalidStatus) as foreign:
        async with connect(
            f"{local.ws_url}?token={local.token()}", origin="https://evil.example.net"
        ):
            pass
    assert foreign.value.response.status_code == 403
    async with connect(f"{local.ws_url}?token={local.token()}", origin="https://app.example.com"):
        pass


async def test_no_ticket_secret_or_prompt_reaches_the_logs_of_a_whole_turn(
    guarded_stack, capfd, caplog
):
    """Every log line of a turn (the functions' JSON logs, the stack's and the speech server's)
    is read: the ticket, the HMAC secret and the prompt are in none of them."""
    import logging

    # Every level the stack logs at in production (INFO), and voicewire's own DEBUG lines.
    # Not botocore's DEBUG: it logs every request body (prompts, history) by design, which is
    # why docs/security.md says never to turn it on in production.
    caplog.set_level(logging.INFO)
    for own in ("functions", "voicewire", "voicewire_tools", "speech_server"):
        caplog.set_level(logging.DEBUG, logger=own)
    local = guarded_stack
    ticket = local.token("dave")
    prompt = "Hello, purple zeppelin 7731"  # a short recorded answer: the whole turn, quickly
    result = await run_turn(
        f"{local.ws_url}?token={ticket}", {"action": "ask", "prompt": prompt, "mode": "bidi"}
    )
    assert result.status == "complete"
    with pytest.raises(InvalidStatus):  # a denial is logged too: with its reason only
        async with connect(f"{local.ws_url}?token={ticket}"):
            pass
    captured = capfd.readouterr()
    logs = captured.out + captured.err + caplog.text
    assert "connection denied" in logs  # the logs were captured: the denial is in them
    for secret in (ticket, ticket.split(".")[2], local.token_secret, prompt, "zeppelin 7731"):
        assert secret not in logs


# --- speech per turn -------------------------------------------------------------------------


async def test_a_turn_stops_at_its_speech_limit_with_the_audio_up_to_it_counted(aws, speech_server):
    import time as clock

    import boto3
    from turn_harness import CALLBACK_URL, RecordingConnection

    from functions.adapters.frame_sink import ApiGatewaySink
    from functions.adapters.relay import Relay
    from functions.turn import TurnRunner, TurnSpec
    from voicewire.client_protocol import decode_audio_frame
    from voicewire.speech_link import open_speech_session

    limit_seconds = 0.75
    connection = RecordingConnection(
        boto3.client("apigatewaymanagementapi", endpoint_url=CALLBACK_URL)
    )
    relay = Relay(ApiGatewaySink(connection, "conn-1"), turn=1)
    text = "This sentence is long enough to take well over a second to say, every time."
    async with open_speech_session(speech_server.ws_url) as speech:
        runner = TurnRunner(
            TurnSpec("t-limit", 1, "speak", clock.time()),
            relay,
            speech,
            asyncio.Event(),
            text=text,
            max_speech_seconds=limit_seconds,
        )
        outcome = await runner.run()
        await speech.send("Still here.")  # the session is still good for the next turn
    frames = [
        decode_audio_frame(data) if data[:1] == b"\xa1" else json.loads(data)
        for _, data in connection.posts
    ]
    audio = b"".join(frame[2] for frame in frames if isinstance(frame, tuple))
    controls = [frame for frame in frames if isinstance(frame, dict)]
    assert outcome.status == "failed"
    assert len(audio) == int(limit_seconds * 24_000) * 2  # exactly up to the limit
    error, end = controls[-2], controls[-1]
    assert error["code"] == "speech_limit_reached" and "0.75 s" in error["message"]
    assert end["type"] == "turn_end" and end["status"] == "failed"
    assert end["audio_bytes"] == len(audio)
