"""The Lambda handlers, fed the sample events from events/apigw, over moto's DynamoDB, SSM,
Lambda and @connections APIs."""

from __future__ import annotations

import asyncio
import io
import json
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from functions.adapters.replay_llm import ReplayBedrockClient
from functions.adapters.session_table import create_table
from functions.environment_loop import run_in_environment
from functions.handlers.authorizer import authorize
from functions.handlers.connect import connect
from functions.handlers.disconnect import disconnect
from functions.handlers.messages import handle_message
from functions.settings import Settings
from functions.wiring import Adapters
from voicewire.client_protocol import (
    MAX_FRAME_BYTES,
    MAX_MESSAGE_BYTES,
    MAX_PROMPT_CHARS,
    decode_audio_frame,
)
from voicewire.speech_link import open_speech_session

EVENTS = Path(__file__).resolve().parents[2] / "events" / "apigw"
SAMPLE_SECRET = "voicewire-sample-secret-do-not-deploy"
CONNECTION = "Vw1SampleConnId="
SAMPLE_NOW = 1795939200 + 30  # the sample events' request time (events/apigw/make_events.py)


def sample(name: str, **body_changes) -> dict:
    event = json.loads((EVENTS / f"{name}.json").read_text())
    if body_changes:
        body = json.loads(event["body"])
        body.update(body_changes)
        event["body"] = json.dumps(body)
    return event


class Recorder:
    """Wraps a real boto3 client and remembers the calls the handlers made through it."""

    def __init__(self, client, method: str):
        self._client, self._method, self.calls = client, method, []

    def __getattr__(self, name):
        target = getattr(self._client, name)
        if name != self._method:
            return target

        def record(**kwargs):
            response = target(**kwargs)
            self.calls.append({**kwargs, "response": response})
            return response

        return record


@pytest.fixture
def adapters(aws, speech_server) -> Iterator[Adapters]:
    create_table(boto3.client("dynamodb"), "sessions")
    boto3.client("ssm").put_parameter(
        Name="/voicewire/token-secret", Value=SAMPLE_SECRET, Type="SecureString"
    )
    settings = Settings(
        table_name="sessions",
        worker_function="voicewire-worker",
        speech_target=speech_server.ws_url,
        llm="replay",
        bedrock_model_id="replay",
        token_secret_parameter="/voicewire/token-secret",
        callback_url=None,
        voices=frozenset({"jm_kumo", "jf_alpha"}),
        system_prompt="Be brief.",
        region="us-east-1",
    )
    create_worker_function("voicewire-worker")
    built = Adapters.from_env(settings)
    posts = Recorder(
        boto3.client(
            "apigatewaymanagementapi",
            endpoint_url="https://abc123defg.execute-api.us-east-1.amazonaws.com/prod",
        ),
        "post_to_connection",
    )
    built.management_client_for = lambda url: posts
    built.lambda_client = Recorder(boto3.client("lambda"), "invoke")
    replay = ReplayBedrockClient(pace=0.2)
    built.llm_client = lambda: replay
    built.replay = replay  # type: ignore[attr-defined]
    built.speech_session = lambda: open_speech_session(speech_server.ws_url)
    built.posts = posts  # type: ignore[attr-defined]
    yield built
    # The worker keeps its speech session warm for the next turn, as a Lambda environment does:
    # left open, it held the next test's ``speech_server`` until the server closed it idle, 60 s
    # later (15 tests set up in 60 s each, 2026-12-07).
    if "speech_sessions" in built.__dict__:  # opened (a cached_property)
        run_in_environment(built.speech_sessions.close())


def create_worker_function(name: str) -> None:
    """The worker as moto knows it: invoking it with InvocationType=Event answers 202."""
    role = boto3.client("iam").create_role(
        RoleName="voicewire-worker",
        AssumeRolePolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": []}),
    )["Role"]["Arn"]
    package = io.BytesIO()
    with zipfile.ZipFile(package, "w") as archive:
        archive.writestr("worker.py", "def handler(event, context):\n    return event\n")
    boto3.client("lambda").create_function(
        FunctionName=name,
        Runtime="python3.12",
        Role=role,
        Handler="worker.handler",
        Code={"ZipFile": package.getvalue()},
    )


def posted(adapters) -> list[dict]:
    return [json.loads(call["Data"]) for call in adapters.posts.calls if call["Data"][:1] == b"{"]


# --- authorizer --------------------------------------------------------------------------------


def test_a_valid_token_is_allowed_with_its_principal(adapters):
    result = authorize(sample("authorizer_valid"), adapters, now=SAMPLE_NOW)
    assert result["principalId"] == "sample-user"
    statement = result["policyDocument"]["Statement"][0]
    assert statement["Effect"] == "Allow" and statement["Resource"].endswith("/$connect")


@pytest.mark.parametrize(
    "name",
    [
        "authorizer_expired",
        "authorizer_wrong_signature",
        "authorizer_malformed",
        "authorizer_missing",
    ],
)
def test_bad_tokens_are_denied(adapters, name):
    result = authorize(sample(name), adapters, now=SAMPLE_NOW)
    assert result["policyDocument"]["Statement"][0]["Effect"] == "Deny"


# --- connect / disconnect ----------------------------------------------------------------------


def test_connect_records_principal_and_audio_delivery(adapters):
    assert connect(sample("connect_base64"), adapters) == {"statusCode": 200}
    record = adapters.connections.get(CONNECTION)
    assert (record.principal, record.audio, record.status) == ("sample-user", "base64", "open")
    connect(sample("connect"), adapters)
    assert adapters.connections.get(CONNECTION).audio == "binary"


def test_connect_refuses_an_unknown_audio_delivery(adapters):
    assert connect(sample("connect_bad_audio"), adapters)["statusCode"] == 400
    assert adapters.connections.get(CONNECTION) is None


def test_disconnect_marks_gone_and_cancels_the_active_turn(adapters):
    connect(sample("connect"), adapters)
    handle_message(sample("ask_bidi"), adapters)
    turn_id = adapters.connections.get(CONNECTION).active_turn_id
    disconnect(sample("disconnect"), adapters)
    assert adapters.connections.get(CONNECTION).status == "gone"
    assert adapters.turns.status(CONNECTION, turn_id) == "cancelled"


# --- message routes ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["ask_bidi", "ask_batch", "speak"])
def test_a_turn_is_recorded_and_the_worker_invoked_asynchronously(adapters, name):
    connect(sample("connect"), adapters)
    assert handle_message(sample(name), adapters) == {"statusCode": 200}
    (call,) = adapters.lambda_client.calls
    assert call["InvocationType"] == "Event" and call["FunctionName"] == "voicewire-worker"
    assert call["response"]["StatusCode"] == 202  # accepted, not waited for
    job = json.loads(call["Payload"])
    assert job["connection_id"] == CONNECTION and job["turn"] == 1
    assert job["callback_url"] == "https://abc123defg.execute-api.us-east-1.amazonaws.com/prod"
    assert adapters.turns.status(CONNECTION, job["turn_id"]) == "running"
    assert job["mode"] == json.loads(sample(name)["body"]).get("mode", "speak")


@pytest.mark.parametrize(
    ("name", "code"),
    [
        ("ask_missing_prompt", "missing_prompt"),
        ("ask_bad_mode", "invalid_mode"),
        ("speak_speed_out_of_range", "speed_out_of_range"),
        ("speak_text_too_long", "text_too_long"),
        ("default_unknown_action", "unknown_action"),
        ("default_not_json", "invalid_json"),
    ],
)
def test_invalid_messages_get_an_error_frame_and_the_connection_stays(adapters, name, code):
    connect(sample("connect"), adapters)
    assert handle_message(sample(name), adapters) == {"statusCode": 200}
    (frame,) = posted(adapters)
    assert frame["type"] == "error" and frame["code"] == code and frame["message"]
    assert adapters.lambda_client.calls == []
    assert adapters.connections.get(CONNECTION).status == "open"
    handle_message(sample("speak"), adapters)  # still usable
    assert len(adapters.lambda_client.calls) == 1


class FailingPosts:
    """API Gateway's @connections answering the first ``failures`` posts with ``code``."""

    def __init__(self, posts, failures: int, code: str, status: int) -> None:
        self.posts, self.failures, self.code, self.status, self.attempts = (
            posts,
            failures,
            code,
            status,
            0,
        )

    def post_to_connection(self, **kwargs):
        from botocore.exceptions import ClientError

        self.attempts += 1
        if self.attempts <= self.failures:
            raise ClientError(
                {
                    "Error": {"Code": self.code, "Message": self.code},
                    "ResponseMetadata": {"HTTPStatusCode": self.status},
                },
                "PostToConnection",
            )
        return self.posts.post_to_connection(**kwargs)


def test_the_message_routes_frames_are_retried_when_api_gateway_throttles(adapters):
    """The routes' own frames (an error, the voice list) go through the worker's sink: a
    throttled post is retried, not lost (issue 51: they bypassed it, one attempt each)."""
    connect(sample("connect"), adapters)
    throttled = FailingPosts(adapters.posts, 2, "LimitExceededException", 429)
    adapters.management_client_for = lambda url: throttled
    adapters._management_clients.clear()
    handle_message(sample("default_unknown_action"), adapters)
    (frame,) = posted(adapters)
    assert frame["code"] == "unknown_action" and throttled.attempts == 3
    # A client that left is told nothing more, and the route still answers 200.
    gone = FailingPosts(adapters.posts, 10, "GoneException", 410)
    adapters.management_client_for = lambda url: gone
    adapters._management_clients.clear()
    assert handle_message(sample("default_unknown_action"), adapters) == {"statusCode": 200}
    assert gone.attempts == 1 and len(posted(adapters)) == 1


@pytest.mark.parametrize(
    ("name", "changes", "code"),
    [
        ("ask_bidi", {"prompt": "x" * (MAX_PROMPT_CHARS + 1)}, "prompt_too_long"),
        ("speak", {"pad": "x" * MAX_MESSAGE_BYTES}, "message_too_large"),
        ("ask_bidi", {"turn_id": "has space"}, "invalid_field"),
        ("speak", {"turn_id": "t" * 65}, "invalid_field"),
        ("cancel", {"turn_id": "semi;colon"}, "invalid_field"),
        ("speak", {"speed": "1.0"}, "invalid_field"),
    ],
    ids=[
        "prompt_too_long",
        "message_too_large",
        "ask_turn_id",
        "speak_turn_id",
        "cancel_turn_id",
        "speed_type",
    ],
)
def test_limits_and_malformed_fields_are_refused_by_the_message_route(
    adapters, name, changes, code
):
    """What API Gateway would pass on (its 32 KB frame limit aside: a message can come in
    several frames) is refused by the route itself, before any turn or worker."""
    connect(sample("connect"), adapters)
    event = sample(name, **changes)
    assert handle_message(event, adapters) == {"statusCode": 200}
    (frame,) = posted(adapters)
    assert frame["type"] == "error" and frame["code"] == code and frame["message"]
    assert "turn_id" not in frame  # nothing valid to name: the turn was never accepted
    assert adapters.lambda_client.calls == [] and adapters.turns.of_connection(CONNECTION) == []
    assert adapters.connections.get(CONNECTION).status == "open"
    handle_message(sample("speak"), adapters)  # still usable
    assert len(adapters.lambda_client.calls) == 1


def test_unknown_voice_is_refused_before_any_work(adapters):
    connect(sample("connect"), adapters)
    handle_message(sample("speak", voice="nobody"), adapters)
    assert posted(adapters)[0]["code"] == "unknown_voice"


def test_a_new_turn_cancels_the_active_one(adapters):
    connect(sample("connect"), adapters)
    handle_message(sample("ask_bidi", turn_id="first"), adapters)
    handle_message(sample("ask_bidi", turn_id="second"), adapters)
    assert adapters.turns.status(CONNECTION, "first") == "cancelled"
    assert adapters.turns.status(CONNECTION, "second") == "running"
    assert [json.loads(c["Payload"])["turn"] for c in adapters.lambda_client.calls] == [1, 2]


def test_cancel_cancels_the_active_turn_or_says_there_is_none(adapters):
    connect(sample("connect"), adapters)
    handle_message(sample("cancel"), adapters)
    assert posted(adapters)[-1]["code"] == "unknown_turn"
    handle_message(sample("ask_bidi", turn_id="t1"), adapters)
    handle_message(sample("cancel"), adapters)
    assert adapters.turns.status(CONNECTION, "t1") == "cancelled"


def test_a_reused_turn_id_is_an_error(adapters):
    connect(sample("connect"), adapters)
    handle_message(sample("speak", turn_id="same"), adapters)
    handle_message(sample("speak", turn_id="same"), adapters)
    assert posted(adapters)[-1]["code"] == "invalid_field"
    assert len(adapters.lambda_client.calls) == 1


# --- worker ------------------------------------------------------------------------------------


class FakeLambdaContext:
    function_name = "voicewire-worker"
    memory_limit_in_mb = 1024
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:voicewire-worker"
    aws_request_id = "00000000-0000-0000-0000-000000000000"

    def get_remaining_time_in_millis(self) -> int:
        return 120_000


def run_worker(adapters, job: dict) -> dict:
    from functions.handlers import worker
    from functions.wiring import use_adapters

    previous = use_adapters(adapters)
    try:
        return worker.handler(job, FakeLambdaContext())
    finally:
        use_adapters(previous)


def accepted_job(adapters, name: str, **changes) -> dict:
    handle_message(sample(name, **changes), adapters)
    return json.loads(adapters.lambda_client.calls[-1]["Payload"])


def test_worker_runs_the_turn_records_it_and_keeps_history(adapters):
    connect(sample("connect"), adapters)
    job = accepted_job(adapters, "ask_batch")
    assert run_worker(adapters, job) == {"status": "complete"}
    frames = posted(adapters)
    assert frames[0]["type"] == "turn_start" and frames[0]["turn"] == job["turn"]
    assert frames[-1]["type"] == "turn_end" and frames[-1]["status"] == "complete"
    turn = adapters.turns.get(CONNECTION, job["turn_id"])
    assert turn.status == "complete"
    audio_posts = [call for call in adapters.posts.calls if call["Data"][:1] == b"\xa1"]
    assert turn.audio_frames == frames[-1]["audio_frames"] == len(audio_posts) > 0
    assert turn.frames == len(adapters.posts.calls) - 1  # all but the turn_end that follows
    history = adapters.connections.get(CONNECTION).history
    assert [message["role"] for message in history] == ["user", "assistant"]
    assert history[0]["content"][0]["text"] == "Hello, who are you?"

    # A follow-up question carries the conversation to the model.
    follow_up = accepted_job(adapters, "ask_batch", prompt="Hello again?")
    run_worker(adapters, follow_up)
    request = adapters.replay.requests[-1]
    assert [m["role"] for m in request["messages"]] == ["user", "assistant", "user"]
    assert request["system"] == [{"text": "Be brief."}]


def test_the_history_is_kept_before_the_client_hears_the_turn_end(adapters):
    """A client may ask again the moment it reads turn_end: that turn must find this one in
    the history it reads."""
    connect(sample("connect"), adapters)
    job = accepted_job(adapters, "ask_batch")
    history_at_turn_end: list[list[dict]] = []
    record = adapters.posts.post_to_connection

    def post(**kwargs):
        data = kwargs["Data"]
        if data[:1] == b"{" and json.loads(data)["type"] == "turn_end":
            history_at_turn_end.append(adapters.connections.get(CONNECTION).history)
        return record(**kwargs)

    adapters.posts.post_to_connection = post
    assert run_worker(adapters, job) == {"status": "complete"}
    (history,) = history_at_turn_end
    assert [message["role"] for message in history] == ["user", "assistant"]


def test_worker_reports_an_unreachable_speech_service(adapters):
    from conftest import free_port

    connect(sample("connect"), adapters)
    job = accepted_job(adapters, "speak")
    adapters.speech_session = lambda: open_speech_session(f"ws://127.0.0.1:{free_port()}/x")
    assert run_worker(adapters, job) == {"status": "failed"}
    frames = posted(adapters)
    kinds = [frame["type"] for frame in frames]
    # The sentence may or may not have gone out before the session's failure was known.
    assert kinds in (
        ["turn_start", "error", "turn_end"],
        ["turn_start", "sentence", "error", "turn_end"],
    )
    assert frames[-2]["code"] == "speech_failed" and frames[-1]["status"] == "failed"
    assert len(posted(adapters)) == len(adapters.posts.calls)  # no audio frame
    assert adapters.turns.status(CONNECTION, job["turn_id"]) == "failed"


def test_worker_stops_when_the_turn_is_cancelled_in_dynamodb(adapters):
    connect(sample("connect"), adapters)
    job = accepted_job(adapters, "ask_bidi")
    adapters.turns.cancel(CONNECTION, job["turn_id"])  # as the cancel route would
    assert run_worker(adapters, job) == {"status": "cancelled"}
    frames = posted(adapters)
    assert frames[-1]["type"] == "turn_end" and frames[-1]["status"] == "cancelled"
    assert adapters.turns.status(CONNECTION, job["turn_id"]) == "cancelled"


def test_a_turn_cancelled_before_it_spoke_leaves_its_session_for_the_next(adapters):
    """The session was being opened when the turn was cancelled: the worker waits for it and,
    as nothing was sent on it, keeps it for the next turn of this environment."""
    from functions.environment_loop import run_in_environment

    connect(sample("connect"), adapters)
    job = accepted_job(adapters, "ask_bidi")
    turns = adapters.turns
    claim = turns.claim

    def claim_then_cancel(*args, **kwargs):  # the client cancels as the worker starts
        verdict = claim(*args, **kwargs)
        turns.cancel(CONNECTION, job["turn_id"])
        return verdict

    turns.claim = claim_then_cancel
    # A slow LLM: the worker sees the cancel long before the first sentence could be sent.
    adapters.llm_client = lambda: ReplayBedrockClient(pace=5.0)
    # A slow open: the turn is over (~50 ms) while its session is still being opened.
    opened = []
    real_session = adapters.speech_session

    def slow_session():
        session = real_session()
        open_now = session.open

        async def open_later():
            await asyncio.sleep(0.5)
            await open_now()
            opened.append(session)

        session.open = open_later
        return session

    adapters.speech_session = slow_session
    assert run_worker(adapters, job) == {"status": "cancelled"}
    assert len(opened) == 1  # the opening was waited for, not called off
    ready = run_in_environment(adapters.speech_sessions.acquire())
    try:
        assert ready.origin == "reused"
    finally:
        run_in_environment(adapters.speech_sessions.release(ready.session, reusable=False))


def test_barge_in_ends_the_old_turn_before_its_audio_stops(adapters):
    """A new ask while a turn is speaking: the old worker sees its turn cancelled, posts its
    turn_end, and no frame of the old turn follows that turn_end."""
    connect(sample("connect"), adapters)
    job = accepted_job(adapters, "ask_bidi", prompt="Tell me a long story")
    first_audio = threading.Event()
    original = adapters.posts._client.post_to_connection

    def watch(**kwargs):
        if kwargs["Data"][:1] == b"\xa1":
            first_audio.set()
        return original(**kwargs)

    adapters.posts._client.post_to_connection = watch
    result: dict = {}
    old_worker = threading.Thread(target=lambda: result.update(run_worker(adapters, job)))
    old_worker.start()
    assert first_audio.wait(60)
    accepted_job(adapters, "ask_bidi", prompt="Actually, stop.")  # barge-in
    old_worker.join(60)
    assert result == {"status": "cancelled"}
    frames = [call["Data"] for call in adapters.posts.calls]
    end = next(
        i
        for i, data in enumerate(frames)
        if data[:1] == b"{" and json.loads(data).get("type") == "turn_end"
    )
    assert json.loads(frames[end])["status"] == "cancelled"
    old_audio_after_end = [
        data
        for data in frames[end + 1 :]
        if data[:1] == b"\xa1" and decode_audio_frame(data)[0] == job["turn"]
    ]
    assert old_audio_after_end == []
    assert all(len(data) <= MAX_FRAME_BYTES for data in frames)


def test_worker_publishes_time_to_first_audio_as_emf(adapters, capsys):
    connect(sample("connect"), adapters)
    job = accepted_job(adapters, "speak")
    run_worker(adapters, job)
    emf = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"_aws"' in line]
    assert emf, "no EMF document was printed"
    names = {
        m["Name"] for doc in emf for d in doc["_aws"]["CloudWatchMetrics"] for m in d["Metrics"]
    }
    assert {"TimeToFirstAudio", "TurnTotal", "Turns_complete"} <= names

    def metric(name: str) -> float:
        value = emf[-1][name]
        return value[0] if isinstance(value, list) else value

    # The figures the client was told in its turn_end, not some other measurement.
    timings = posted(adapters)[-1]["timings"]
    assert metric("TimeToFirstAudio") == timings["first_audio_ms"]
    assert metric("TurnTotal") == timings["total_ms"] > timings["first_audio_ms"]
    assert emf[-1]["mode"] == "speak"


def test_voices_lists_the_configured_voices_english_first(adapters):
    connect(sample("connect"), adapters)
    assert handle_message(sample("voices"), adapters) == {"statusCode": 200}
    (frame,) = posted(adapters)
    assert frame["type"] == "voices"
    names = [voice["name"] for voice in frame["voices"]]
    assert sorted(names) == sorted(adapters.settings.voices)
    assert frame["default_voice"] == min(adapters.settings.voices)  # no af_heart among them
    assert adapters.lambda_client.calls == []  # no turn, no worker


def test_voices_without_a_configured_list_are_kokoros_official_ones(adapters):

    from voicewire.voice_catalog import OFFICIAL_VOICES

    adapters.settings = adapters.settings.changed(voices=None)
    connect(sample("connect"), adapters)
    handle_message(sample("voices"), adapters)
    (frame,) = posted(adapters)
    assert len(frame["voices"]) == len(OFFICIAL_VOICES) == 54
    assert frame["default_voice"] == "af_heart"
    heart = next(v for v in frame["voices"] if v["name"] == "af_heart")
    assert heart == {
        "name": "af_heart",
        "language": "en-US",
        "label": "American English",
        "gender": "female",
    }
    assert frame["voices"][0]["language"].startswith("en")
