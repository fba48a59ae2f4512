"""Run the speech server with uvicorn: `voicewire serve-speech` and the container entry point."""

from __future__ import annotations

import errno
import logging
import socket
import sys

import uvicorn

from speech_server.app import create_app
from speech_server.engines import load_engine
from speech_server.settings import EngineSettings

logger = logging.getLogger("speech_server")


class PortInUseError(RuntimeError):
    pass


def bind_socket(host: str, port: int) -> socket.socket:
    """Bind before the model loads, so a busy port is a one-line error, not a late traceback."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as error:
        sock.close()
        if error.errno == errno.EADDRINUSE:
            raise PortInUseError(f"port {port} on {host} is already in use") from None
        raise
    sock.set_inheritable(True)
    return sock


def serve(host: str, port: int, settings: EngineSettings, log_level: str = "info") -> None:
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    sock = bind_socket(host, port)
    app = create_app(lambda: load_engine(settings))
    config = uvicorn.Config(
        app,
        log_level=log_level,
        ws="websockets-sansio",
        ws_ping_interval=20.0,
        ws_ping_timeout=20.0,
        timeout_graceful_shutdown=5,
        access_log=False,  # SageMaker pings /ping every few seconds: one line each is noise
    )
    logger.info(
        "speech server on http://%s:%d (engine %s; model loading in the background, "
        "GET /ping says when it is ready)",
        host,
        port,
        settings.engine,
    )
    uvicorn.Server(config).run(sockets=[sock])


def main() -> None:
    """Container entry point: everything from the environment. It listens on loopback unless
    ``VOICEWIRE_HOST`` says otherwise; the image sets 0.0.0.0, which SageMaker needs."""
    import os

    try:
        serve(
            os.environ.get("VOICEWIRE_HOST", "127.0.0.1"),
            int(os.environ.get("VOICEWIRE_PORT", "8080")),
            EngineSettings.from_env(),
            os.environ.get("VOICEWIRE_LOG_LEVEL", "info"),
        )
    except (PortInUseError, ValueError) as error:
        sys.exit(f"speech server: {error}")
