"""Shared fixtures: the real Kokoro-82M ONNX engine, loaded once; speech servers on real ports.

Two folders of tests share them: ``unit/`` (no servers, no model, no network: ``uv run pytest
tests/unit``, the loop to run while editing, under a minute) and ``integration/`` (real ports,
the real model, the stand-ins). A unit test that opens a network socket fails, saying where it
belongs (``unit_tests_reach_no_network``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest
import uvicorn

from speech_server.app import EngineFactory, create_app
from speech_server.engines import SpeechEngine
from speech_server.engines.onnx_engine import KokoroOnnxEngine
from speech_server.settings import EngineSettings
from speech_server.streamed_vocoder import StreamedVocoder, VocoderSpeed
from voicewire_tools.local_stack.sagemaker_runtime import (
    INITIAL_RESPONSES as SAGEMAKER_INITIAL_RESPONSES,
)

if TYPE_CHECKING:
    from voicewire.speech_link import SpeechStreamError


UNIT_TESTS = Path(__file__).resolve().parent / "unit"

# Every engine this run starts (in this process, its workers' and the servers they spawn) plans
# by the same engine-tuning record: a start whose warm-up disagrees with the record (another
# worker busy on the same cores) keeps it rather than measuring again and replacing it for the
# engines started after, whose windows, hence bytes, would then differ from the earlier ones'.
# The recheck itself is tested with it on (test_engine_tuning.py).
os.environ.setdefault("VOICEWIRE_ENGINE_RECHECK", "off")
_INTERNET = (socket.AF_INET, socket.AF_INET6)


@pytest.fixture(autouse=True)
def unit_tests_reach_no_network(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In ``tests/unit``, a network socket is an error: those tests belong in integration."""
    if UNIT_TESTS not in Path(request.node.path).parents:
        return
    for name in ("connect", "connect_ex", "bind"):
        real = getattr(socket.socket, name)

        def refuse(self: socket.socket, *args: object, _real=real, _name=name) -> object:
            if self.family in _INTERNET:
                raise RuntimeError(
                    f"a unit test called socket.{_name}{args}: tests that reach a server or the "
                    "network belong in tests/integration/"
                )
            return _real(self, *args)

        monkeypatch.setattr(socket.socket, name, refuse)


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """moto's in-memory AWS, with fake credentials so no real account can be reached."""
    from moto import mock_aws

    from voicewire_tools.local_stack.moto_dynamodb import make_moto_dynamodb_atomic

    make_moto_dynamodb_atomic()  # each request atomic, as DynamoDB's are
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    with mock_aws():
        yield


@pytest.fixture(scope="session")
def onnx_engine() -> KokoroOnnxEngine:
    """The real model, as the server loads it by default: assembled from the PyPI parts, with
    Kokoro's official voices from npm (af_heart)."""
    return KokoroOnnxEngine.from_settings(EngineSettings())


# The vocoder speed a test's own plan is made from (``planned_engine``).
PLANNED_SPEED = VocoderSpeed(0.002, 0.005)


@pytest.fixture(scope="session")
def planned_engine(onnx_engine: KokoroOnnxEngine) -> KokoroOnnxEngine:
    """The session's engine (its sessions shared) with a plan of its own: windows from
    ``PLANNED_SPEED``, and no measured real-time factor, so the chunk schedule takes it as
    keeping up (it streams a fast start's first chunk and decodes the others whole). What a test
    of the windows, the schedule or the word timings sees is then the same on every machine,
    whatever the machine's tuning record measured (issue 41: a record measured on a busy machine
    gave five words one window, and two tests failed by it)."""
    vocoder = onnx_engine.vocoder
    assert vocoder is not None, "the default engine runs the split graph"
    planned = StreamedVocoder(vocoder.text_side_session, vocoder.vocoder_session, PLANNED_SPEED)
    engine = dataclasses.replace(onnx_engine, vocoder=planned, tuning=None)
    assert engine.real_time_factor is None
    return engine


@dataclass
class RunningServer:
    base_url: str
    ws_url: str
    server: uvicorn.Server
    thread: threading.Thread

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(
    engine_factory: EngineFactory, wait_ready: bool = True, **app_options: object
) -> RunningServer:
    """The real app under uvicorn on a real loopback port, in a thread with its own loop;
    ``app_options`` go to ``create_app``."""
    port = free_port()
    config = uvicorn.Config(
        create_app(engine_factory, **app_options),  # type: ignore[arg-type]
        host="127.0.0.1",
        port=port,
        log_level="warning",
        ws="websockets-sansio",
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=lambda: asyncio.run(server.serve()), daemon=True)
    thread.start()
    running = RunningServer(
        f"http://127.0.0.1:{port}",
        f"ws://127.0.0.1:{port}/invocations-bidirectional-stream",
        server,
        thread,
    )
    deadline = time.monotonic() + 60
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("speech server did not start")
        time.sleep(0.01)
    if wait_ready:
        while httpx.get(f"{running.base_url}/ping").status_code != 200:
            if time.monotonic() > deadline:
                raise RuntimeError("speech server did not become ready")
            time.sleep(0.02)
    return running


@pytest.fixture(scope="session")
def shared_speech_server(planned_engine: KokoroOnnxEngine) -> Iterator[RunningServer]:
    """One speech server for the run, on ``planned_engine``: its chunks, windows and bytes are
    the same on every machine, and it refuses no one ``speech_busy`` (an engine of no measured
    speed is taken as keeping up). A test of how the server adapts to the machine (the chunk
    schedule, the engine's admission) starts a server of its own."""
    running = start_server(lambda: planned_engine)
    yield running
    running.stop()


# How long an earlier test's sessions may take to close before a test starts on the server.
SETTLE_SECONDS = 60.0


@pytest.fixture
def speech_server(shared_speech_server: RunningServer) -> RunningServer:
    """The shared speech server, once no earlier test's session is open on it: a session left
    speaking would share the engine with this test (issue 51: on a slower machine, one test's
    answer was still being synthesized when the next began)."""
    deadline = time.monotonic() + SETTLE_SECONDS
    while open_sessions := httpx.get(f"{shared_speech_server.base_url}/ping").json()[
        "open_sessions"
    ]:
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"{open_sessions} session(s) of earlier tests still open on the shared speech "
                f"server after {SETTLE_SECONDS:.0f} s: a test leaves its sessions open"
            )
        time.sleep(0.02)
    return shared_speech_server


@dataclass
class LocalRuntime:
    """The local SageMaker runtime in front of a speech server, and how to reach it."""

    running: object  # voicewire_tools.local_stack.sagemaker_runtime.RunningRuntime
    tls: object  # LocalTls
    # The access key the runtime issued (sigv4_verifier.AccessKey): it recomputes signatures,
    # so only this key's do.
    credentials: object

    @property
    def runtime(self):
        return self.running.runtime

    def transport(self, endpoint_name: str = "kokoro-82m", **options):
        """The production transport, pointed at this runtime (only endpoint and CA differ)."""
        import boto3

        from voicewire.speech_link.sagemaker_transport import SageMakerTransport

        options.setdefault(
            "boto3_session",
            boto3.Session(region_name="us-east-1", **self.credentials.boto3_kwargs()),
        )
        options.setdefault("region", "us-east-1")
        return SageMakerTransport(
            endpoint_name,
            endpoint_uri=self.running.endpoint_url,
            trusted_ca_file=self.tls.ca_file,
            **options,
        )

    def session(self, endpoint_name: str = "kokoro-82m"):
        from voicewire.speech_link import SpeechSession

        return SpeechSession(self.transport(endpoint_name))


def start_runtime_for(container_url: str, tmp_dir, **options) -> LocalRuntime:
    from speech_server.server import bind_socket
    from voicewire_tools.local_stack.local_tls import LocalTls
    from voicewire_tools.local_stack.sagemaker_runtime import start_runtime
    from voicewire_tools.local_stack.sigv4_verifier import AccessKey, SigV4Verifier

    tls = LocalTls.create(tmp_dir)
    key = AccessKey.issue()
    options.setdefault("verifier", SigV4Verifier.accepting([key], "us-east-1"))
    running = start_runtime(
        {"kokoro-82m": container_url}, bind_socket("127.0.0.1", 0), tls, **options
    )
    return LocalRuntime(running, tls, key)


# When the local front door answers a new stream (``sagemaker_runtime``'s module docstring):
# AWS does not say which SageMaker does, so the speech link is tested against both.
INITIAL_RESPONSES = SAGEMAKER_INITIAL_RESPONSES


# SageMaker's 250 ms for the container to accept the WebSocket is tested on its own
# (test_sagemaker_limits.py, the default limits). The shared runtimes sit in front of the session's
# speech server, in the test process beside another worker's model: on a loaded 2-core machine the
# accept then measured the machine, not the code (a fresh clone beside a busy loop: one ping
# refused 424 ModelError, 2026-12-05), so they allow longer.
SHARED_RUNTIME_ACCEPT_SECONDS = 2.0


class RuntimesByAnswer:
    """The local SageMaker runtime in front of the session's speech server, one per way of
    answering, each started when first asked for."""

    def __init__(self, container_url: str, tmp_path_factory: pytest.TempPathFactory) -> None:
        self.container_url, self.tmp_path_factory = container_url, tmp_path_factory
        self.started: dict[str, LocalRuntime] = {}

    def __getitem__(self, initial_response: str) -> LocalRuntime:
        from voicewire_tools.local_stack.sagemaker_limits import SageMakerLimits

        if initial_response not in self.started:
            self.started[initial_response] = start_runtime_for(
                self.container_url,
                self.tmp_path_factory.mktemp("tls"),
                initial_response=initial_response,
                limits=SageMakerLimits(container_accept_seconds=SHARED_RUNTIME_ACCEPT_SECONDS),
            )
        return self.started[initial_response]

    def stop(self) -> None:
        for local in self.started.values():
            local.running.stop()


@pytest.fixture(scope="session")
def sagemaker_runtimes(shared_speech_server, tmp_path_factory) -> Iterator[RuntimesByAnswer]:
    """For a fixture of its own parameters (``test_speech_link.session_for``): asking for
    ``sagemaker_runtime`` would run each of its tests, the websocket link's too, once per way."""
    container_url = shared_speech_server.base_url.replace("http://", "ws://")
    runtimes = RuntimesByAnswer(container_url, tmp_path_factory)
    yield runtimes
    runtimes.stop()


@pytest.fixture(scope="session", params=INITIAL_RESPONSES)
def sagemaker_runtime(request, sagemaker_runtimes) -> LocalRuntime:
    """SageMaker's front door and sidecar, locally, in front of the session's speech server:
    each test that uses it runs twice, against a front door answering each stream after its
    first request event and against one answering at once."""
    return sagemaker_runtimes[request.param]


def refused_event(local: LocalRuntime, response: httpx.Response, *, first: bool = True) -> str:
    """How ``local`` refused a request event, as "ErrorType: message": the first event, held
    before the answer (``after_first_event``), with an HTTP error (403 for its signature, 400
    if unreadable), as AWS refuses before a response; once the response has started (at once,
    or a later event), with the response stream's one ``InternalStreamFailure`` event."""
    import json

    from botocore.eventstream import EventStreamBuffer

    if first and local.runtime.initial_response == "after_first_event":
        assert response.status_code in (400, 403)
        body = response.json()
        return f"{response.headers['x-amzn-errortype']}: {body.get('message', body.get('Message'))}"
    assert response.status_code == 200
    buffer = EventStreamBuffer()
    buffer.add_data(response.content)
    failures = [event for event in buffer if event.headers[":message-type"] == "exception"]
    assert [failure.headers[":exception-type"] for failure in failures] == ["InternalStreamFailure"]
    return json.loads(failures[0].payload)["Message"]


async def refusal(session, within: float = 30) -> SpeechStreamError:
    """Open ``session``, send one text: the error its events end with, after which the session
    is closed. Over SageMaker a refusal of the stream surfaces there (``connect_failed``), not
    from ``open``: the transport sends before SageMaker answers."""
    from voicewire.speech_link import SpeechStreamError

    await session.open()
    try:
        request_id = await session.send("Hello.")
        with pytest.raises(SpeechStreamError) as raised:
            async with asyncio.timeout(within):
                async for _ in session.events(request_id):
                    pass
    finally:
        await session.close()
    return raised.value


@pytest.fixture(scope="module")
def stack():
    """``voicewire up``'s topology in-process on free ports, one per test module."""
    from voicewire_tools.local_stack.stack import LocalStack, StackOptions

    # As unkind as AWS (the defaults): concurrent messages, Lambda-style retries (sooner).
    options = StackOptions(port=0, speech_port=0, runtime_port=0, async_retry_delays=(0.2, 0.4))
    local = LocalStack(options, progress=lambda line: None)
    with pytest.MonkeyPatch.context() as patch:
        # Admission weighs this machine's engine speed: on a slow or busy one, the second of two
        # answers at once is refused (speech_busy), rightly, and a test of something else that
        # runs two would then assert the machine's speed. Admission has its own tests
        # (test_engine_busy.py, test_engine_share.py), at loads they set.
        patch.setenv("VOICEWIRE_MAX_ENGINE_LOAD", "1000")
        local.start()
    yield local
    local.stop()


@pytest.fixture
def server_factory() -> Iterator[Callable[..., RunningServer]]:
    started: list[RunningServer] = []

    def factory(
        engine_factory: Callable[[], SpeechEngine], wait_ready: bool = True
    ) -> RunningServer:
        running = start_server(engine_factory, wait_ready)
        started.append(running)
        return running

    yield factory
    for running in started:
        running.stop()


def pytest_report_header(config: pytest.Config) -> str:
    """The seed of the local SageMaker runtime's random PARTIAL cuts in this run
    (``voicewire_tools.local_stack.partial_parts``): set it again to replay a failure."""
    from voicewire_tools.local_stack.partial_parts import FRAGMENT_SEED_ENV, process_seed

    return f"SageMaker PARTIAL parts cut at random: {FRAGMENT_SEED_ENV}={process_seed()}"
