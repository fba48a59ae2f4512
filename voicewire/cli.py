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
        "--voice",
        default=None,
        help="default voice (onnx default: jm_kumo, the most intelligible English "
        "of the voices shipped on PyPI)",
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
        help="torch engine: directory with config.json, *.pth, voices/*.pt (default /opt/ml/model)",
    )
    speech.add_argument(
        "--log-level", default="info", choices=["debug", "info", "warning", "error"]
    )
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.command == "serve-speech":
        serve_speech(args)


def serve_speech(args: argparse.Namespace) -> None:
    from speech_server.server import PortInUseError, serve
    from speech_server.settings import EngineSettings

    try:
        settings = EngineSettings.from_env(
            engine=args.engine,
            voice=args.voice,
            model_path=args.model_path,
            voices_path=args.voices_path,
            model_dir=args.model_dir,
        )
        serve(args.host, args.port, settings, args.log_level)
    except (PortInUseError, ValueError) as error:
        sys.exit(f"voicewire serve-speech: {error}")
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
