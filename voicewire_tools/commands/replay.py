"""``voicewire replay EVENT.json [...]``: invoke the handler an event's route names, like
``sam local invoke -e``, and print its response and the frames it posted.

Events are replayed in order against one in-memory state (moto's DynamoDB and SSM), so
``connect.json ask_bidi.json cancel.json`` plays a short session. Posts to ``@connections`` and
the worker's asynchronous invocation are recorded and printed, not delivered: no client is
connected and no speech server is needed. Authorizer events are checked against the sample secret
``events/apigw`` was signed with, unless ``--token-secret`` says otherwise, and at the samples'
request time, when their two-minute tickets were valid, unless ``--at`` gives another (``--at 0``:
now).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

SAMPLE_SECRET = "voicewire-sample-secret-do-not-deploy"
SAMPLE_TIME = 1795939230.0  # the sample events' request time (events/apigw/make_events.py)


class RecordingPoster:
    """Stands in for the @connections API: remembers each post (there is no client to reach)."""

    def __init__(self) -> None:
        self.posts: list[tuple[str, bytes]] = []

    def post_to_connection(self, ConnectionId: str, Data: bytes) -> dict[str, Any]:
        self.posts.append((ConnectionId, Data))
        return {}


class RecordingInvoker:
    def __init__(self) -> None:
        self.invocations: list[dict[str, Any]] = []

    def invoke(self, **kwargs: Any) -> dict[str, Any]:
        self.invocations.append(kwargs)
        return {"StatusCode": 202 if kwargs.get("InvocationType") == "Event" else 200}


def handler_for(event: dict[str, Any]) -> str:
    if event.get("type") == "REQUEST" and "methodArn" in event:
        return "authorizer"
    route = event.get("requestContext", {}).get("routeKey")
    return {"$connect": "connect", "$disconnect": "disconnect"}.get(route, "messages")


def describe(data: bytes) -> str:
    if data[:1] == b"\xa1":
        from voicewire.client_protocol import decode_audio_frame

        turn, seq, payload = decode_audio_frame(data)
        return f"binary audio frame: turn {turn}, seq {seq}, {len(payload)} bytes"
    return data.decode("utf-8", "replace")


def run(args: argparse.Namespace) -> None:
    for name, value in {
        "AWS_ACCESS_KEY_ID": "replay",
        "AWS_SECRET_ACCESS_KEY": "replay",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        os.environ[name] = value  # moto only: never a real account
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")
    os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
    events = []
    for path in args.events:
        try:
            events.append((path, json.loads(Path(path).read_text())))
        except (OSError, json.JSONDecodeError) as error:
            sys.exit(f"voicewire replay: {path}: {error}")

    import boto3
    from moto import mock_aws

    from functions.adapters.session_table import create_table
    from functions.settings import Settings
    from functions.wiring import Adapters, use_adapters
    from voicewire_tools.local_stack.lambdas import LocalFunctions

    with mock_aws():
        create_table(boto3.client("dynamodb"), "voicewire-sessions")
        poster, invoker = RecordingPoster(), RecordingInvoker()
        settings = Settings(
            table_name="voicewire-sessions",
            worker_function="voicewire-worker",
            speech_target="ws://127.0.0.1:8080/invocations-bidirectional-stream",
            llm="replay",
            bedrock_model_id="replay",
            token_secret_parameter=None,
            callback_url=None,
            voices=None,
            system_prompt="",
            region="us-east-1",
        )
        adapters = Adapters.from_env(settings)
        adapters.management_client_for = lambda url: poster
        adapters.lambda_client = invoker
        adapters.token_secret = lambda: args.token_secret
        if args.at:
            adapters.clock = lambda: float(args.at)
        previous = use_adapters(adapters)
        functions = LocalFunctions()
        try:
            for path, event in events:
                handler = handler_for(event)
                before_posts, before_calls = len(poster.posts), len(invoker.invocations)
                response = functions.call(handler, event)
                print(f"== {path}: {handler} handler")
                print(f"response: {json.dumps(response, default=str)}")
                for connection_id, data in poster.posts[before_posts:]:
                    print(f"posted to {connection_id}: {describe(data)}")
                for call in invoker.invocations[before_calls:]:
                    payload = json.loads(call["Payload"])
                    print(
                        f"invoked {call['FunctionName']} ({call['InvocationType']}): "
                        f"turn {payload['turn']} {payload['mode']} {payload['turn_id']}"
                    )
        finally:
            use_adapters(previous)
