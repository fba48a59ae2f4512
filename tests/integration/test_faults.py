"""Faults, one by one: what the client receives and what state is left (the turn record, the
connection record) when the speech server dies or stalls, Bedrock fails mid-answer, the client
leaves, the worker is killed, or DynamoDB throttles.

The message route and the worker run unchanged, with the production clients (their retries and
timeouts), against real servers on loopback ports (``turn_harness.worker_world``): moto's
DynamoDB server behind a stand-in that can throttle, an ``@connections`` endpoint, the real
speech server app over a tone engine (``speech_standin``: the engine is not the point here) and
Bedrock's wire protocol (``bedrock_standin``) or the replay LLM.

Other tests cover parts of these faults at other levels: the turn runner's Bedrock throttling
and client gone (``test_turn``), the LLM adapter's stream errors (``test_llm_adapter``), the
worker failing at each stage, its time limit and Lambda's retry (``test_worker_failures``,
``test_local_stack``).
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Iterator

import pytest
from bedrock_standin import BedrockStandin, Script, answer, delta, event, exception
from conftest import free_port, start_server
from connections_server import Answer, Request
from speech_standin import SpeechProcess, ToneEngine
from turn_harness import LOCAL_AWS, WorkerWorld, apigw_event, worker_world

from functions.adapters.bedrock_request import bedrock_client
from functions.adapters.replay_llm import ReplayBedrockClient
from functions.adapters.session_table import SESSION_SECONDS
from functions.handlers.disconnect import disconnect

# Six sentences: the server cuts them into several chunks, so there is audio still to come
# whenever a fault strikes after the first.
LONG_TEXT = (
    "The first sentence is short. The second one follows it closely. Then a third one comes, "
    "a little longer than the others. A fourth sentence keeps the speech going. The fifth is "
    "nearly the last. And this is the end."
)


@pytest.fixture(scope="module")
def dynamodb_url() -> Iterator[str]:
    """moto's DynamoDB as a real HTTP server (each test makes its own table)."""
    from moto.server import ThreadedMotoServer

    from voicewire_tools.local_stack.moto_dynamodb import make_moto_dynamodb_atomic

    make_moto_dynamodb_atomic()  # each request atomic, as DynamoDB's are
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def tone_speech() -> Iterator:
    """The real speech server app over a tone engine, in a thread: ``(server, engine)``."""
    engines: list[ToneEngine] = []
    servers = []

    def start(engine: ToneEngine | None = None):
        engine = engine or ToneEngine()
        engines.append(engine)
        servers.append(start_server(lambda: engine))
        return servers[-1], engine

    yield start
    for engine in engines:
        engine.release.set()  # a stalled chunk ends, so the server can stop
    for server in servers:
        server.stop()


@pytest.fixture
def make_world(dynamodb_url, monkeypatch) -> Iterator:
    # No real account can be reached, whatever a client falls back to.
    for name, value in {"AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local"}.items():
        monkeypatch.setenv(name, value)
    worlds: list[WorkerWorld] = []

    def make(speech_url: str, llm=None, **settings) -> WorkerWorld:
        worlds.append(worker_world(dynamodb_url, speech_url, llm, **settings))
        return worlds[-1]

    yield make
    for world in worlds:
        world.close()


def kinds(frames: list) -> list[str]:
    return ["audio" if isinstance(frame, tuple) else frame["type"] for frame in frames]


def audio_of(frames: list) -> list[bytes]:
    return [frame[2] for frame in frames if isinstance(frame, tuple)]


def is_audio(request: Request) -> bool:
    return request.body[:1] == b"\xa1"


def on_first_audio(world: WorkerWorld) -> threading.Event:
    """Set once the first audio frame reaches the @connections endpoint (answered 200)."""
    seen = threading.Event()

    def script(index: int, request: Request) -> Answer:
        if is_audio(request):
            seen.set()
        return Answer()

    world.connections.script = script
    return seen


def assert_failed_with(world: WorkerWorld, turn_id: str, code: str) -> tuple[dict, dict, list]:
    """The client got ``error`` (code) then ``turn_end`` failed, last, with the audio it got
    counted; the record says failed with the code and the same counts; the connection is open
    with no active turn. Returns the error, the turn_end and every frame received."""
    frames = world.received()
    error, end = frames[-2], frames[-1]
    assert kinds(frames).count("turn_start") == 1 and frames[0]["type"] == "turn_start"
    assert (error["type"], error["code"], error["turn_id"]) == ("error", code, turn_id)
    assert (end["type"], end["status"]) == ("turn_end", "failed")
    audio = audio_of(frames)
    assert end["audio_frames"] == len(audio) and end["audio_bytes"] == sum(map(len, audio))
    turn = world.turn(turn_id)
    assert (turn.status, turn.error_code) == ("failed", code)
    assert turn.audio_bytes == end["audio_bytes"]  # a turn ended unspoken has none
    connection = world.connection()
    assert (connection.status, connection.active_turn_id) == ("open", None)
    return error, end, frames


def turn_end_posted_at(world: WorkerWorld) -> float:
    """When (time.monotonic) the last turn_end reached the @connections endpoint."""
    return max(
        r.started
        for r in world.connections.delivered()
        if not is_audio(r) and json.loads(r.body)["type"] == "turn_end"
    )


# --- 1. the speech server dies or closes mid-turn --------------------------------------------


@pytest.mark.parametrize(
    "how", [signal.SIGKILL, signal.SIGTERM], ids=["process-killed", "server-shut-down"]
)
def test_a_speech_server_lost_mid_turn_fails_the_turn_and_the_next_turn_works(make_world, how):
    """SIGKILL: the server's process dies, its connection is cut without a close frame. SIGTERM:
    uvicorn shuts down, closing the session with 1012. Either way, while audio flows."""
    speech = SpeechProcess(free_port(), seconds_per_chunk=0.3).start()
    try:
        world = make_world(speech.ws_url)
        world.connect()
        job = world.message("speak", text=LONG_TEXT, turn_id="lost")
        first_audio = on_first_audio(world)
        stopped_at: list[float] = []

        def stop_the_server() -> None:
            if first_audio.wait(30):
                stopped_at.append(time.monotonic())
                speech.stop(how)

        stopper = threading.Thread(target=stop_the_server)
        stopper.start()
        assert world.run_worker(job) == {"status": "failed"}
        stopper.join(30)
        assert stopped_at, "no audio reached the client"
        error, _, frames = assert_failed_with(world, "lost", "speech_failed")
        assert "connection_closed" in error["message"]
        assert audio_of(frames)  # spoken before the server went, and counted
        assert turn_end_posted_at(world) - stopped_at[0] < 5.0

        # The server comes back on its port: the next turn opens a new session and completes.
        speech.start()
        again = world.message("speak", text="Back again.", turn_id="again")
        assert world.run_worker(again, "request-2") == {"status": "complete"}
        frames = world.received()
        assert frames[-1]["type"] == "turn_end" and frames[-1]["status"] == "complete"
        assert frames[-1]["audio_bytes"] > 0 and world.turn("again").status == "complete"
    finally:
        speech.stop()


# --- 2. the speech server is slow: the per-chunk deadline ------------------------------------


@pytest.mark.parametrize(
    ("action", "stall_at"),
    [("speak", 0), ("speak", 1), ("ask_bidi", 1)],
    ids=["speak-before-first-audio", "speak-mid-text", "ask-mid-answer"],
)
def test_a_stalled_speech_server_fails_the_turn_at_the_chunk_deadline(
    make_world, tone_speech, action, stall_at
):
    """The server takes the text and its engine gets stuck: the session stays open and nothing
    more comes. The turn fails once ``speech_chunk_timeout_seconds`` pass without a speech event,
    not at the worker's time limit, and the client's turn_end is not held up by the session's
    close (it would wait for answers that never come)."""
    server, engine = tone_speech(ToneEngine(stall_at=stall_at))
    world = make_world(server.ws_url, speech_chunk_timeout_seconds=0.5)
    world.connect()
    body = {"text": LONG_TEXT} if action == "speak" else {"prompt": "Tell me a story"}
    job = world.message(action, turn_id="stalled", **body)
    assert world.run_worker(job) == {"status": "failed"}
    error, _, frames = assert_failed_with(world, "stalled", "speech_failed")
    assert "response_timeout" in error["message"]
    assert bool(audio_of(frames)) == (stall_at > 0)  # what was spoken before the stall counts
    assert engine.stalled_at is not None
    # The deadline counts from the session's last event: synthesis_start, sent just before the
    # engine is asked for the first chunk, or the audio of the chunk before, sent after.
    waited = turn_end_posted_at(world) - engine.stalled_at
    assert 0.4 <= waited < 3.0, f"turn_end {waited:.1f} s after the stall"


def test_a_frozen_speech_server_fails_the_turn_at_the_chunk_deadline(make_world):
    """The server's process stops mid-answer (a hung host): its socket stays open, and it
    answers nothing, not even the turn's cancel. The turn still ends at the deadline, and the
    session is dropped without waiting for answers (its graceful close would wait 30 s)."""
    speech = SpeechProcess(free_port(), seconds_per_chunk=0.3).start()
    try:
        world = make_world(speech.ws_url, speech_chunk_timeout_seconds=0.5)
        world.connect()
        job = world.message("speak", text=LONG_TEXT, turn_id="frozen")
        first_audio = on_first_audio(world)
        frozen_at: list[float] = []

        def freeze() -> None:
            if first_audio.wait(30):
                speech.freeze()
                frozen_at.append(time.monotonic())

        threading.Thread(target=freeze, daemon=True).start()
        assert world.run_worker(job) == {"status": "failed"}
        error, _, frames = assert_failed_with(world, "frozen", "speech_failed")
        assert "response_timeout" in error["message"] and audio_of(frames)
        waited = turn_end_posted_at(world) - frozen_at[0]
        assert waited < 3.0, f"turn_end {waited:.1f} s after the server froze"
    finally:
        speech.stop()


def test_the_chunk_deadline_is_a_setting_with_a_default(monkeypatch):
    from functions.settings import Settings

    monkeypatch.setenv("VOICEWIRE_LLM", "replay")  # bedrock would need a model id
    monkeypatch.delenv("VOICEWIRE_SPEECH_CHUNK_TIMEOUT_SECONDS", raising=False)
    assert Settings.from_env().speech_chunk_timeout_seconds == 30.0
    monkeypatch.setenv("VOICEWIRE_SPEECH_CHUNK_TIMEOUT_SECONDS", "12.5")
    assert Settings.from_env().speech_chunk_timeout_seconds == 12.5


# --- 3. Bedrock throttles or fails mid-answer --------------------------------------------------


class AfterAudio:
    """A Bedrock answer whose last messages wait until the client has received audio."""

    def __init__(self, before: list[bytes], gate: threading.Event, after: list[bytes]) -> None:
        self.before, self.gate, self.after = before, gate, after

    def __iter__(self) -> Iterator[bytes]:
        yield from self.before
        self.gate.wait(30)
        yield from self.after


@pytest.mark.parametrize(
    ("bedrock_error", "code"),
    [("throttlingException", "llm_throttled"), ("modelStreamErrorException", "llm_failed")],
)
def test_bedrock_failing_mid_answer_fails_the_turn_and_counts_the_audio_spoken(
    make_world, tone_speech, bedrock_error, code
):
    """Bedrock's error event comes inside the stream, after a sentence was spoken (Bedrock's
    wire protocol, botocore's event-stream parser). Existing coverage: the LLM adapter
    (``test_llm_adapter``) and the turn runner with the replay's throttling
    (``test_turn``); here the worker, its records and the next ask."""
    server, _ = tone_speech()
    spoken = threading.Event()
    messages = AfterAudio(
        [
            event("messageStart", {"role": "assistant"}),
            delta("Hello there. "),
            delta("This is the first"),
            delta(" sentence. "),
            delta("And then"),
        ],
        spoken,
        [exception(bedrock_error, "stand-in failure"), delta(" never spoken.")],
    )
    with BedrockStandin(Script(messages=messages)) as bedrock:
        world = make_world(server.ws_url, llm=bedrock_client(endpoint_url=bedrock.url, **LOCAL_AWS))
        world.connect()
        spoken_flag = on_first_audio(world)
        threading.Thread(target=lambda: spoken_flag.wait(30) and spoken.set(), daemon=True).start()
        job = world.message("ask_bidi", prompt="Say hello", turn_id="broken")
        assert world.run_worker(job) == {"status": "failed"}
        error, end, frames = assert_failed_with(world, "broken", code)
        assert "stand-in failure" in error["message"]
        assert audio_of(frames) and end["audio_bytes"] > 0  # spoken, then counted
        sentences = [
            f["text"] for f in frames if not isinstance(f, tuple) and f["type"] == "sentence"
        ]
        assert "never spoken." not in " ".join(sentences)
        assert len(bedrock.requests) == 1  # an error inside the stream is not retried
        assert world.connection().history == []  # a failed answer is not kept

        # Bedrock recovers: the next ask is answered, without the failed exchange as context.
        bedrock.script = Script(messages=answer("Fine", " again."))
        again = world.message("ask_bidi", prompt="Are you back?", turn_id="again")
        assert world.run_worker(again, "request-2") == {"status": "complete"}
        assert world.received()[-1]["status"] == "complete"
        assert [m["role"] for m in bedrock.requests[-1]["messages"]] == ["user"]


# --- 4. the client leaves mid-turn -------------------------------------------------------------


def test_a_client_that_leaves_mid_turn_is_posted_nothing_more_and_the_turn_is_recorded(
    make_world, tone_speech
):
    """The client closes its WebSocket after its second audio frame: from then on every post
    answers 410 GoneException, and API Gateway runs ``$disconnect`` (which marks the connection
    gone and cancels its turn). The worker stops at the first 410 it gets, whichever lane got
    it: at most the other lane's post already in flight follows it."""
    server, _ = tone_speech(ToneEngine(seconds_per_chunk=0.1))
    world = make_world(server.ws_url, llm=ReplayBedrockClient(pace=1.0))  # ~4 s of answer
    world.connect()
    job = world.message("ask_bidi", prompt="Tell me a story", turn_id="left")
    left = threading.Event()
    audio_frames = [0]

    def script(index: int, request: Request) -> Answer:
        if left.is_set():
            return Answer.error(410, "GoneException")
        if is_audio(request):
            audio_frames[0] += 1
            if audio_frames[0] == 2:  # delivered; then the client leaves
                left.set()
                threading.Thread(
                    target=disconnect, args=(apigw_event("disconnect"), world.adapters)
                ).start()
        return Answer()

    world.connections.script = script
    started = time.monotonic()
    assert world.run_worker(job) == {"status": "cancelled"}
    took = time.monotonic() - started
    requests = sorted(world.connections.requests, key=lambda r: r.started)
    gone = [i for i, r in enumerate(requests) if r.status == 410]
    assert gone, "the worker never posted after the client left"
    # After the first 410, at most one post: the other lane's, already under way.
    assert len(requests) - gone[0] - 1 <= 1, [r.status for r in requests[gone[0] :]]
    received = world.received()
    assert kinds(received)[0] == "turn_start" and kinds(received).count("audio") == 2
    assert "turn_end" not in kinds(received)  # nobody is there to get it
    turn = world.turn("left")
    assert turn.status == "cancelled" and turn.audio_frames == 2
    connection = world.connection()
    assert (connection.status, connection.active_turn_id) == ("gone", None)
    assert took < ReplayBedrockClient().default.events[-1][0]  # the LLM was not waited for


# --- 5. the worker is killed --------------------------------------------------------------------


def start_and_kill_a_worker(world: WorkerWorld, job: dict, request_id: str) -> None:
    """Run the worker in a process of its own and kill it (SIGKILL) once the client has audio:
    no ``finally`` of it runs, no last write, no turn_end."""
    first_audio = on_first_audio(world)
    process = world.worker_process(job, request_id)
    try:
        assert first_audio.wait(60), "the worker process spoke nothing"
    finally:
        process.kill()
        process.wait(10)
    assert process.returncode == -signal.SIGKILL


def test_a_killed_workers_turn_is_ended_by_lambdas_retry(make_world, tone_speech):
    """What keeps the turn from staying ``running``: Lambda retries an invocation that died
    (same request id); the retry finds its own claim on a running turn and ends it, unspoken."""
    server, _ = tone_speech(ToneEngine(seconds_per_chunk=0.1))
    world = make_world(server.ws_url)
    world.connect()
    job = world.message("speak", text=LONG_TEXT, turn_id="killed")
    start_and_kill_a_worker(world, job, "invocation-1")
    turn = world.turn("killed")
    assert (turn.status, turn.claimed_by) == ("running", "invocation-1")
    assert world.connection().active_turn_id == "killed"
    # The last resort, were no retry to come: DynamoDB's TTL removes the record with the
    # connection's (API Gateway closes a connection after 2 hours).
    assert time.time() < turn.expires_at <= time.time() + SESSION_SECONDS
    before = len(world.received())

    assert world.run_worker(job, "invocation-1") == {"status": "failed"}  # Lambda's retry
    told = world.received()[before:]
    assert kinds(told) == ["error", "turn_end"]  # no second turn_start, nothing spoken again
    assert told[0]["code"] == "internal_error" and told[1]["status"] == "failed"
    turn = world.turn("killed")
    assert (turn.status, turn.error_code) == ("failed", "internal_error")
    assert world.connection().active_turn_id is None
    again = world.message("speak", text="Still here.", turn_id="again")
    assert world.run_worker(again, "invocation-2") == {"status": "complete"}


def test_a_killed_workers_turn_never_blocks_the_next_ask(make_world, tone_speech):
    """The client does not wait for Lambda's retry (a minute later): its next ask supersedes the
    dead turn (cancelled, as a barge-in) and runs at once. The retry, when it comes, finds the
    turn ended by someone who could not tell the client, and tells it: the dead turn's
    turn_end."""
    server, _ = tone_speech(ToneEngine(seconds_per_chunk=0.1))
    world = make_world(server.ws_url)
    world.connect()
    job = world.message("speak", text=LONG_TEXT, turn_id="killed")
    start_and_kill_a_worker(world, job, "invocation-1")

    again = world.message("ask_bidi", prompt="Hello, who are you?", turn_id="again")
    assert world.turn("killed").status == "cancelled"  # superseded by the new turn
    assert world.run_worker(again, "invocation-2") == {"status": "complete"}
    assert world.received()[-1]["turn_id"] == "again"
    assert world.received()[-1]["status"] == "complete"
    before = len(world.received())

    assert world.run_worker(job, "invocation-1") == {"status": "cancelled"}  # Lambda's retry
    told = world.received()[before:]
    assert kinds(told) == ["turn_end"]
    assert (told[0]["turn_id"], told[0]["status"]) == ("killed", "cancelled")
    assert world.turn("killed").status == "cancelled"
    assert world.turn("again").status == "complete"
    # A second retry (the first one's own failure) tells nothing twice.
    assert world.run_worker(job, "invocation-1") == {"status": "dropped"}
    assert len(world.received()) == before + 1


# --- 6. DynamoDB throttles a write -----------------------------------------------------------


def claim(operation: str, body: dict) -> bool:
    """The worker's claim of its turn (a conditional UpdateItem)."""
    return operation == "UpdateItem" and "claimed_by = :me," in body.get("UpdateExpression", "")


def renewal(operation: str, body: dict) -> bool:
    """The worker's heartbeat: the renewal of its claim's lease (an UpdateItem)."""
    return operation == "UpdateItem" and body.get("UpdateExpression") == "SET lease_until = :until"


def new_turn(operation: str, body: dict) -> bool:
    """The message route's first write of a new turn (a conditional PutItem)."""
    return operation == "PutItem" and body.get("Item", {}).get("sk", {}).get("S", "") == (
        "turn#fresh"
    )


def test_a_throttled_write_is_retried_by_botocore_and_the_turn_runs(make_world, tone_speech):
    """The claim is throttled twice: botocore's standard retries (the client's own config) try
    again with backoff, the third attempt passes, and nobody notices."""
    server, _ = tone_speech()
    world = make_world(server.ws_url)
    world.connect()
    job = world.message("speak", text="Throttled, then fine.", turn_id="throttled")
    world.dynamodb.throttle_first(2, claim)
    assert world.run_worker(job) == {"status": "complete"}
    assert [call.throttled for call in world.dynamodb.attempts(claim)] == [True, True, False]
    assert world.received()[-1]["status"] == "complete"
    assert world.turn("throttled").status == "complete"


def test_a_running_turn_whose_writes_stay_throttled_ends_with_state_unavailable(
    make_world, tone_speech
):
    """The heartbeat's write is throttled for good (reads pass): the worker cannot keep its
    claim, and ends the turn (``state_unavailable``) rather than speak on unwatched. Each
    renewal is 3 attempts in all (the client's config), then the watcher backs off and tries
    again, until ``poll_failure_limit_seconds``."""
    from functions.environment_loop import run_in_environment
    from functions.worker.guards import Invocation
    from functions.worker.job import WorkerJob
    from functions.worker.policy import WorkerPolicy
    from functions.worker.run import run_job

    server, _ = tone_speech()
    world = make_world(server.ws_url, llm=ReplayBedrockClient(pace=3.0))  # ~14 s of answer
    world.connect()
    job = world.message("ask_bidi", prompt="Tell me a story", turn_id="unwatched")
    world.dynamodb.throttle_first(-1, renewal)
    policy = WorkerPolicy(heartbeat_seconds=0.2, poll_failure_limit_seconds=1.0)
    invocation = Invocation("request-1", time.monotonic() + 120)
    status = run_in_environment(
        run_job(WorkerJob.model_validate(job), world.adapters, invocation, policy)
    )
    assert status == "failed"
    assert_failed_with(world, "unwatched", "state_unavailable")
    renewals = world.dynamodb.attempts(renewal)
    assert renewals and all(call.throttled for call in renewals)
    assert len(renewals) % 3 == 0  # whole calls of 3 attempts: none cut short, none unbounded


def test_a_claim_throttled_for_good_is_retried_by_lambda_and_told(make_world, tone_speech):
    """The claim cannot be written: nothing of the turn ran, so the invocation fails and Lambda
    retries it (about a minute later); the retry finds the turn too old to speak and tells the
    client so. The record says failed: nothing is left running."""
    from botocore.exceptions import ClientError

    server, _ = tone_speech()
    world = make_world(server.ws_url)
    world.connect()
    job = world.message("speak", text="Never spoken.", turn_id="unclaimed")
    world.dynamodb.throttle_first(-1, claim)
    with pytest.raises(ClientError) as raised:
        world.run_worker(job)
    assert raised.value.response["Error"]["Code"] == "ProvisionedThroughputExceededException"
    assert len(world.dynamodb.attempts(claim)) == 3  # the first and 2 retries, as configured
    assert world.received() == []  # nothing started, nothing told yet
    assert world.turn("unclaimed").status == "running"

    world.dynamodb.throttle = lambda operation, body: False  # DynamoDB recovers
    job["accepted_at"] -= 60  # Lambda's first retry comes about a minute later
    assert world.run_worker(job) == {"status": "failed"}
    assert kinds(world.received()) == ["turn_start", "error", "turn_end"]
    assert_failed_with(world, "unclaimed", "turn_expired")


def test_a_turn_the_route_cannot_record_is_refused_with_state_unavailable(make_world, tone_speech):
    """The message route's write of a new turn is throttled for good: no worker is started, the
    client hears why (``state_unavailable``, with its turn_id), and the connection stays
    usable once DynamoDB recovers."""
    server, _ = tone_speech()
    world = make_world(server.ws_url)
    world.connect()
    world.dynamodb.throttle_first(-1, new_turn)
    assert world.message("speak", text="Not now.", turn_id="fresh") is None  # no worker
    assert len(world.dynamodb.attempts(new_turn)) == 3
    (error,) = world.received()
    assert (error["type"], error["code"], error["turn_id"]) == (
        "error",
        "state_unavailable",
        "fresh",
    )
    connection = world.connection()
    assert (connection.status, connection.active_turn_id) == ("open", None)

    world.dynamodb.throttle = lambda operation, body: False
    job = world.message("speak", text="Now.", turn_id="later")
    assert world.run_worker(job) == {"status": "complete"}
