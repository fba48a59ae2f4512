"""Writes the sample API Gateway WebSocket events in this folder (run once; output committed).

    uv run python events/apigw/make_events.py

Shapes follow API Gateway's WebSocket Lambda proxy events (``requestContext.routeKey``,
``eventType``, ``connectionId``, ``domainName``, ``stage``, ``requestTimeEpoch``, ``body``,
``isBase64Encoded``). Authorizer samples carry connect tickets signed with the sample secret
``SAMPLE_SECRET`` below - a development value, never a deployed one. A ticket lives two minutes,
so the valid one is valid at the samples' request time, ``SAMPLE_NOW`` (tests pass it as now).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from functions.access.tickets import mint_token  # noqa: E402

SAMPLE_SECRET = "voicewire-sample-secret-do-not-deploy"
CONNECTION_ID = "Vw1SampleConnId="
DOMAIN = "abc123defg.execute-api.us-east-1.amazonaws.com"
EPOCH_MS = 1795939200000  # 2026-11-29T08:00:00Z
SAMPLE_NOW = EPOCH_MS / 1000 + 30  # when the authorizer samples are checked
METHOD_ARN = "arn:aws:execute-api:us-east-1:123456789012:abc123defg/prod/$connect"


def context(route: str, event_type: str, **extra: object) -> dict:
    return {
        "routeKey": route,
        "eventType": event_type,
        "extendedRequestId": "Xs4mPleExtId=",
        "requestTime": "29/Nov/2026:08:00:00 +0000",
        "messageDirection": "IN",
        "stage": "prod",
        "connectedAt": EPOCH_MS,
        "requestTimeEpoch": EPOCH_MS + 500,
        "identity": {"sourceIp": "203.0.113.10", "userAgent": "wscat/6.0"},
        "requestId": "Xs4mPleReqId=",
        "domainName": DOMAIN,
        "connectionId": CONNECTION_ID,
        "apiId": "abc123defg",
        **extra,
    }


def headers() -> tuple[dict, dict]:
    single = {"Host": DOMAIN, "Sec-WebSocket-Version": "13", "User-Agent": "wscat/6.0"}
    return single, {key: [value] for key, value in single.items()}


def connect(query: dict | None) -> dict:
    single, multi = headers()
    authorizer = {
        "principalId": "sample-user",
        "principal": "sample-user",
        "integrationLatency": 12,
    }
    return {
        "headers": single,
        "multiValueHeaders": multi,
        "queryStringParameters": query,
        "requestContext": context("$connect", "CONNECT", authorizer=authorizer),
        "isBase64Encoded": False,
    }


def disconnect() -> dict:
    single, multi = headers()
    return {
        "headers": single,
        "multiValueHeaders": multi,
        "requestContext": context(
            "$disconnect",
            "DISCONNECT",
            disconnectStatusCode=1001,
            disconnectReason="Client-side close frame status code '1001' (GOING_AWAY)",
        ),
        "isBase64Encoded": False,
    }


def message(route: str, body: object) -> dict:
    text = body if isinstance(body, str) else json.dumps(body)
    return {
        "requestContext": context(route, "MESSAGE", messageId="Xs4mPleMsgId="),
        "body": text,
        "isBase64Encoded": False,
    }


def authorizer(token: str | None, origin: str | None = None) -> dict:
    query = {"token": token} if token is not None else None
    single, _ = headers()
    if origin is not None:
        single["Origin"] = origin
    return {
        "type": "REQUEST",
        "methodArn": METHOD_ARN,
        "headers": single,
        "queryStringParameters": query,
    }


def main() -> None:
    issued = EPOCH_MS / 1000
    valid = mint_token(SAMPLE_SECRET, "sample-user", ttl_seconds=120, now=issued)
    events = {
        "authorizer_valid": authorizer(valid),
        "authorizer_browser": authorizer(
            mint_token(SAMPLE_SECRET, "sample-user", 120, now=issued),
            origin="https://app.example.com",
        ),
        "authorizer_expired": authorizer(
            mint_token(SAMPLE_SECRET, "sample-user", 60, now=issued - 3600)
        ),
        "authorizer_wrong_signature": authorizer(
            mint_token("a-different-secret-of-the-same-length", "sample-user", 120, now=issued)
        ),
        "authorizer_malformed": authorizer("not.a.jwt"),
        "authorizer_missing": authorizer(None),
        "connect": connect(None),
        "connect_base64": connect({"audio": "base64"}),
        "connect_bad_audio": connect({"audio": "mp3"}),
        "disconnect": disconnect(),
        "ask_bidi": message(
            "ask", {"action": "ask", "prompt": "What is voicewire?", "mode": "bidi"}
        ),
        "ask_tool": message(
            "ask", {"action": "ask", "prompt": "What time is it in Paris?", "mode": "bidi"}
        ),
        "ask_batch": message(
            "ask", {"action": "ask", "prompt": "Hello, who are you?", "mode": "batch"}
        ),
        "speak": message("speak", {"action": "speak", "text": "Hello there, this is voicewire."}),
        "cancel": message("cancel", {"action": "cancel"}),
        "voices": message("voices", {"action": "voices"}),
        "ask_missing_prompt": message("ask", {"action": "ask", "mode": "bidi"}),
        "ask_bad_mode": message("ask", {"action": "ask", "prompt": "Hi", "mode": "fast"}),
        "speak_speed_out_of_range": message(
            "speak", {"action": "speak", "text": "Hi.", "speed": 5}
        ),
        "speak_text_too_long": message("speak", {"action": "speak", "text": "x" * 4001}),
        "default_unknown_action": message("$default", {"action": "dance"}),
        "default_not_json": message("$default", "hello there"),
    }
    for name, event in events.items():
        (HERE / f"{name}.json").write_text(json.dumps(event, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {name}.json")


if __name__ == "__main__":
    main()
