"""Running one turn against real parts: the speech server on a real port, moto's @connections
API behind a recording spy, and the replay LLM; and the worker's whole world over real HTTP
(``worker_world``), for the fault tests."""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from urllib.parse import urlsplit

import boto3
from botocore.exceptions import ClientError
from connections_server import ConnectionsServer
from loopback_http import LoopbackServer

from functions.adapters.bedrock_request import converse_request
from functions.adapters.frame_sink import ApiGatewaySink, management_client
from functions.adapters.relay import Relay
from functions.adapters.replay_llm import ReplayBedrockClient
from functions.adapters.session_table import create_table
from functions.adapters.table_items import dynamodb_client
from functions.adapters.turn_ledger import TurnRecord
from functions.agent.loop import BedrockAgent
from functions.handlers.connect import connect
from functions.handlers.messages import handle_message
from functions.settings import Settings
from functions.turn import TurnOutcome, TurnRunner, TurnSpec
from functions.wiring import Adapters, use_adapters
from voicewire.client_protocol import decode_audio_frame
from voicewire.speech_link import open_speech_session

CALLBACK_URL = "https://abc123.execute-api.us-east-1.amazonaws.com/prod"


@dataclass
class RecordingConnection:
    """Wraps the real boto3 client; remembers every frame and when it was posted."""

    client: object
    posts: list[tuple[float, bytes]] = field(default_factory=list)
    gone_after: int | None = None
    on_post: object = None
    latency: float = 0.0  # each post takes this long, as a signed HTTPS round trip on AWS
    answered: list[tuple[float, bytes]] = field(default_factory=list)  # when each post returned

    def post_to_connection(self, **kwargs):
        if self.gone_after is not None and len(self.posts) >= self.gone_after:
            raise ClientError(
                {
                    "Error": {"Code": "GoneException", "Message": "gone"},
                    "ResponseMetadata": {"HTTPStatusCode": 410},
                },
                "PostToConnection",
            )
        self.posts.append((time.monotonic(), kwargs["Data"]))
        if self.on_post is not None:
            self.on_post(kwargs["Data"])
        time.sleep(self.latency)
        response = self.client.post_to_connection(**kwargs)
        self.answered.append((time.monotonic(), kwargs["Data"]))
        return response

    def frames(self) -> list[dict | tuple[int, int, bytes]]:
        """Control frames as dicts, audio frames as (turn, seq, payload)."""
        out = []
        for _, data in self.posts:
            out.append(decode_audio_frame(data) if data[:1] == b"\xa1" else json.loads(data))
        return out


async def run_turn(
    speech_server,
    mode: str,
    prompt: str = "",
    text: str | None = None,
    cancel_when=None,
    gone_after: int | None = None,
    voice: str | None = None,
    pace: float = 1.0,
    speech_opening=None,
    post_latency: float = 0.0,
    text_flush: str = "interval",
    watch=None,
    llm=None,
    tools=None,
    word_timings: bool = True,
    delivery: str = "binary",
    **runner_options,
) -> tuple[TurnOutcome, RecordingConnection, ReplayBedrockClient]:
    """``speech_opening``: an async function that returns the open session, run as a task as
    the worker does (default: a session opened before the turn starts). ``watch``: called with
    each frame's bytes as it is posted (on the posting thread). ``llm``: a ConverseStream client
    instead of the replay LLM (which is returned either way, as the third item). ``tools``: a
    ``ToolRegistry`` the built-in agent may call. ``word_timings``: the turn's words frames;
    ``delivery``: how its audio is posted (binary or base64 frames). ``runner_options``: more
    ``TurnRunner`` fields (``tool_filler_seconds``, ...)."""
    client = boto3.client("apigatewaymanagementapi", endpoint_url=CALLBACK_URL)
    connection = RecordingConnection(client, gone_after=gone_after, latency=post_latency)
    cancelled = asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_post(data: bytes) -> None:
        if cancel_when is not None and cancel_when(data):
            loop.call_soon_threadsafe(cancelled.set)
        if watch is not None:
            watch(data)

    connection.on_post = on_post
    sink = ApiGatewaySink(connection, "conn-1")
    relay = Relay(sink, turn=3, delivery=delivery, text_flush=text_flush)
    replay = ReplayBedrockClient(pace=pace)
    llm = llm or replay

    given_agent = runner_options.pop("agent", None)

    def runner_for(speech) -> TurnRunner:
        agent = given_agent() if callable(given_agent) else given_agent
        if agent is None and llm is not None and mode != "speak":
            # The built-in loop, as functions.turn.assembly builds it (with the tools, if any).
            config = tools.tool_config() if tools is not None else None
            request = converse_request("replay", [], prompt, tool_config=config)
            agent = BedrockAgent(llm, request, tools)
        return TurnRunner(
            TurnSpec("turn-3", 3, mode, time.time(), voice=voice, word_timings=word_timings),
            relay,
            speech,
            cancelled,
            text=text,
            agent=agent,
            **runner_options,
        )

    if speech_opening is None:
        async with open_speech_session(speech_server.ws_url) as speech:
            outcome = await runner_for(speech).run()
        return outcome, connection, replay
    opening = asyncio.create_task(speech_opening())
    try:
        outcome = await runner_for(opening).run()
    finally:
        if not opening.cancelled() and opening.done() and opening.exception() is None:
            await opening.result().close()
    return outcome, connection, replay


# --- the worker's world over real HTTP, for fault tests -----------------------------------------
#
# The message route and the worker, unchanged, with every boundary a real server: DynamoDB (moto's
# server, behind a stand-in that can throttle), @connections (``connections_server``), the speech
# server (``speech_standin`` or the real one) and Bedrock (``bedrock_standin`` or the replay).
# The clients are the production ones (retries, timeouts), so botocore's own handlers run.

LOCAL_AWS = {
    "region_name": "us-east-1",
    "aws_access_key_id": "local",
    "aws_secret_access_key": "local",
}
APIGW_EVENTS = Path(__file__).resolve().parent.parent / "events" / "apigw"
CONNECTION_ID = "Vw1SampleConnId="  # the sample events' connection
THROTTLED = "ProvisionedThroughputExceededException"


def apigw_event(name: str, **body_changes) -> dict:
    """A sample API Gateway event from ``events/apigw``, its JSON body changed as given."""
    event = json.loads((APIGW_EVENTS / f"{name}.json").read_text())
    if body_changes:
        event["body"] = json.dumps({**json.loads(event["body"]), **body_changes})
    return event


@dataclass
class DynamoCall:
    operation: str  # GetItem, UpdateItem, ...
    body: dict
    throttled: bool


class DynamoDBStandin:
    """A real HTTP endpoint in front of a DynamoDB (moto's server): it forwards each request,
    except those ``throttle(operation, body)`` picks, which it answers as DynamoDB answers a
    throttled request (HTTP 400, ``{"__type": "...#ProvisionedThroughputExceededException"}``).
    Every request is logged, so a test counts what botocore really sent."""

    def __init__(self, upstream: str) -> None:
        self.upstream = urlsplit(upstream)
        self.throttle = lambda operation, body: False
        self.calls: list[DynamoCall] = []
        self._lock = threading.Lock()
        self._server = LoopbackServer(self._handler(), name="dynamodbstandin")

    @property
    def url(self) -> str:
        return self._server.url

    def stop(self) -> None:
        self._server.stop()

    def throttle_first(self, count: int, picks) -> None:
        """Throttle the first ``count`` requests ``picks(operation, body)`` chooses (-1: all)."""
        left = [count]

        def throttle(operation: str, body: dict) -> bool:
            if not picks(operation, body) or left[0] == 0:
                return False
            left[0] -= 1
            return True

        self.throttle = throttle

    def attempts(self, picks) -> list[DynamoCall]:
        with self._lock:
            return [call for call in self.calls if picks(call.operation, call.body)]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        standin = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as DynamoDB: botocore reuses sockets

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                operation = self.headers.get("X-Amz-Target", "").rpartition(".")[2]
                body = json.loads(raw or b"{}")
                throttled = bool(standin.throttle(operation, body))
                with standin._lock:
                    standin.calls.append(DynamoCall(operation, body, throttled))
                if throttled:
                    error = {
                        "__type": f"com.amazonaws.dynamodb.v20120810#{THROTTLED}",
                        "message": "The level of configured provisioned throughput for the "
                        "table was exceeded. (stand-in)",
                    }
                    self._answer(
                        400,
                        {"Content-Type": "application/x-amz-json-1.0"},
                        json.dumps(error).encode(),
                    )
                    return
                upstream = http.client.HTTPConnection(
                    standin.upstream.hostname, standin.upstream.port, timeout=10
                )
                try:
                    headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                    upstream.request("POST", self.path, raw, headers)
                    response = upstream.getresponse()
                    payload = response.read()
                    skip = {"content-length", "transfer-encoding", "connection", "date", "server"}
                    kept = {k: v for k, v in response.getheaders() if k.lower() not in skip}
                    self._answer(response.status, kept, payload)
                finally:
                    upstream.close()

            def _answer(self, status: int, headers: dict, payload: bytes) -> None:
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
                self.wfile.flush()

            def log_message(self, format: str, *args: object) -> None:
                pass  # quiet tests

        return Handler


class LambdaRecorder:
    """The message route's Lambda client: it keeps each worker job instead of running it."""

    def __init__(self) -> None:
        self.calls: list[dict] = []

    def invoke(self, **kwargs) -> dict:
        self.calls.append(kwargs)
        return {"StatusCode": 202}


class FakeContext:
    function_name = "voicewire-worker"
    memory_limit_in_mb = 1024
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:voicewire-worker"

    def __init__(self, request_id: str, remaining_ms: int) -> None:
        self.aws_request_id = request_id
        self._deadline = time.monotonic() + remaining_ms / 1000

    def get_remaining_time_in_millis(self) -> int:
        return int((self._deadline - time.monotonic()) * 1000)


# The worker in a process of its own, configured as Lambda configures it (environment only), so
# that it can be killed: nothing of it runs on, no ``finally``, no last write.
WORKER_PROCESS = """
import json, sys
from functions.handlers import worker

class Context:
    function_name = "voicewire-worker"
    memory_limit_in_mb = 1024
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:voicewire-worker"
    aws_request_id = sys.argv[1]
    def get_remaining_time_in_millis(self):
        return 120_000

worker.handler(json.loads(sys.stdin.read()), Context())
"""


@dataclass
class WorkerWorld:
    adapters: Adapters
    connections: ConnectionsServer
    dynamodb: DynamoDBStandin
    lambda_client: LambdaRecorder

    def connect(self) -> None:
        assert connect(apigw_event("connect"), self.adapters) == {"statusCode": 200}

    def message(self, name: str, **body) -> dict | None:
        """Send a message through the route; the worker job it handed to Lambda, if any."""
        calls = len(self.lambda_client.calls)
        assert handle_message(apigw_event(name, **body), self.adapters) == {"statusCode": 200}
        if len(self.lambda_client.calls) == calls:
            return None
        return json.loads(self.lambda_client.calls[-1]["Payload"])

    def run_worker(self, job: dict, request_id: str = "request-1", remaining_ms: int = 120_000):
        """The worker's handler, in this process, as Lambda runs one invocation."""
        from functions.handlers import worker

        previous = use_adapters(self.adapters)
        try:
            return worker.handler(job, FakeContext(request_id, remaining_ms))
        finally:
            use_adapters(previous)

    def worker_process(self, job: dict, request_id: str) -> subprocess.Popen[str]:
        """The worker's handler in a process of its own, configured from the environment."""
        settings = self.adapters.settings
        env = {
            **os.environ,
            "AWS_ACCESS_KEY_ID": "local",
            "AWS_SECRET_ACCESS_KEY": "local",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_REGION": "us-east-1",
            "AWS_ENDPOINT_URL_DYNAMODB": self.dynamodb.url,
            "VOICEWIRE_TABLE": settings.table_name,
            "VOICEWIRE_SPEECH_TARGET": settings.speech_target,
            "VOICEWIRE_LLM": "replay",
            "VOICEWIRE_BEDROCK_MODEL_ID": "replay",
            "VOICEWIRE_CALLBACK_URL": settings.callback_url or "",
        }
        process = subprocess.Popen(
            [sys.executable, "-c", WORKER_PROCESS, request_id],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
            cwd=Path(__file__).resolve().parent.parent,
        )
        assert process.stdin is not None
        process.stdin.write(json.dumps(job))
        process.stdin.close()
        return process

    def received(self) -> list[dict | tuple[int, int, bytes]]:
        """What the client received, in order: control frames as dicts, audio as
        (turn, seq, payload)."""
        return [
            decode_audio_frame(r.body) if r.body[:1] == b"\xa1" else json.loads(r.body)
            for r in self.connections.delivered()
        ]

    def turn(self, turn_id: str) -> TurnRecord:
        record = self.adapters.turns.get(CONNECTION_ID, turn_id)
        assert record is not None, f"no record of turn {turn_id!r}"
        return record

    def connection(self):
        return self.adapters.connections.get(CONNECTION_ID)

    def close(self) -> None:
        from functions.environment_loop import run_in_environment

        run_in_environment(self.adapters.speech_sessions.close())  # a session kept warm
        self.connections.stop()
        self.dynamodb.stop()


def worker_world(dynamodb_url: str, speech_url: str, llm=None, **settings) -> WorkerWorld:
    """A fresh table, @connections endpoint and DynamoDB stand-in, with the production clients.
    ``llm``: the Bedrock client (default: the replay at a fifth of its recorded pace);
    ``settings``: changes to the functions' settings."""
    table = f"sessions-{uuid.uuid4().hex[:8]}"
    create_table(boto3.client("dynamodb", endpoint_url=dynamodb_url, **LOCAL_AWS), table)
    dynamodb = DynamoDBStandin(dynamodb_url)
    connections = ConnectionsServer()
    config = Settings(
        table_name=table,
        worker_function="voicewire-worker",
        speech_target=speech_url,
        llm="replay",
        bedrock_model_id="replay",
        token_secret_parameter=None,
        callback_url=connections.url,
        voices=None,
        system_prompt="Be brief.",
        region="us-east-1",
    )
    llm = llm or ReplayBedrockClient(pace=0.2)
    lambda_client = LambdaRecorder()
    adapters = Adapters(
        settings=config.changed(**settings),
        dynamodb=dynamodb_client(endpoint_url=dynamodb.url, **LOCAL_AWS),
        lambda_client=lambda_client,
        management_client_for=lambda url: management_client(url, **LOCAL_AWS),
        llm_client=lambda: llm,
        speech_session=lambda: open_speech_session(speech_url),
        token_secret=lambda: "unused",
    )
    return WorkerWorld(adapters, connections, dynamodb, lambda_client)
