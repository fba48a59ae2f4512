"""Run the speech server with uvicorn: `voicewire serve-speech` and the container entry point.

The first SIGTERM or SIGINT drains the server (``speech_server.drain``) instead of shutting it
down: open sessions finish, new ones are refused, and the process exits once none is open (or
at the drain's deadline). A second signal exits at once.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import socket
import sys
from collections.abc import Iterator
from types import FrameType

import uvicorn

from speech_server.app import create_app
from speech_server.drain import DRAIN_SECONDS, Drain, DrainGate
from speech_server.engines import check_device, load_engine
from speech_server.gpu_check import GpuUnavailable
from speech_server.load_metrics import MetricsTarget
from speech_server.process_exit import end_by_signal_after_serving, finish, stop_with_parent
from speech_server.settings import EngineSettings

logger = logging.getLogger("speech_server")

DRAIN_SECONDS_ENV = "VOICEWIRE_DRAIN_SECONDS"
# uvicorn's shutdown after the drain: what is left then (a POST /invocations in flight, a close
# handshake) gets this long. The drain's 25 s, its 1 s cut grace and these 3 s stay under the
# 30 s after which SageMaker sends SIGKILL.
SHUTDOWN_SECONDS = 3


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


class DrainingServer(uvicorn.Server):
    """uvicorn's server, except that the first SIGTERM/SIGINT starts a drain.

    The subclass exists because uvicorn's own first signal sets ``should_exit``, and its
    ``shutdown()`` then at once closes every open WebSocket (code 1012) and cancels what is left
    after ``timeout_graceful_shutdown``: a turn in progress would lose its audio. Here the signal
    handler only notes the request (it runs between bytecodes, so it touches nothing else); the
    main loop's 0.1 s tick starts the drain in the event loop and, once the drain says it is
    finished, lets uvicorn's ordinary shutdown run. A second signal is uvicorn's forced exit.
    """

    def __init__(self, config: uvicorn.Config, drain: Drain) -> None:
        super().__init__(config)
        self.drain = drain
        self.drain_requested = False
        self.took_signals = False

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # Whether a signal came before uvicorn's handlers were in place: see
        # process_exit.end_by_signal_after_serving.
        with super().capture_signals():
            self.took_signals = True
            yield

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if not self.drain_requested:
            # Not recorded as uvicorn records signals (to raise them again after shutdown):
            # a finished drain is a clean exit, status 0.
            self.drain_requested = True
            return
        super().handle_exit(sig, frame)
        self.force_exit = True

    async def on_tick(self, counter: int) -> bool:
        if await super().on_tick(counter):
            return True
        if self.drain_requested and not self.drain.draining:
            self.drain.start()
        return self.drain.finished()


def drain_seconds_from_env() -> float:
    value = os.environ.get(DRAIN_SECONDS_ENV)
    if not value:
        return DRAIN_SECONDS
    problem = ValueError(
        f"{DRAIN_SECONDS_ENV} must be a number of seconds above 0 and at most "
        f"{DRAIN_SECONDS:g}, not {value!r}"
    )
    try:
        seconds = float(value)
    except ValueError:
        raise problem from None
    if not 0 < seconds <= DRAIN_SECONDS:  # NaN fails this too
        raise problem
    return seconds


def serve(host: str, port: int, settings: EngineSettings, log_level: str = "info") -> None:
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    drain = Drain(drain_seconds_from_env())
    metrics = MetricsTarget.from_env()
    # Before listening: a GPU image without a usable GPU stops here, and /ping never says 200.
    if (device := check_device(settings)) is not None:
        logger.info("CUDA device: %s", device)
    sock = bind_socket(host, port)
    app = create_app(lambda: load_engine(settings), metrics=metrics)
    app.state.drain = drain  # what each session consults (Drain.of)
    config = uvicorn.Config(
        DrainGate(app, drain),
        log_level=log_level,
        ws="websockets-sansio",
        ws_ping_interval=20.0,
        ws_ping_timeout=20.0,
        timeout_graceful_shutdown=SHUTDOWN_SECONDS,
        access_log=False,  # SageMaker pings /ping every few seconds: one line each is noise
    )
    logger.info(
        "speech server on http://%s:%d (engine %s; model loading in the background, "
        "GET /ping says when it is ready)",
        host,
        port,
        settings.engine,
    )
    stop_with_parent()
    server = DrainingServer(config, drain)
    # uvicorn saves these handlers and puts them back when it stops.
    end_by_signal_after_serving(lambda: server.took_signals)
    server.run(sockets=[sock])


def main() -> None:
    """Container entry point: everything from the environment. It listens on loopback unless
    ``VOICEWIRE_HOST`` says otherwise; the image sets 0.0.0.0, which SageMaker needs.
    ``VOICEWIRE_DRAIN_SECONDS`` shortens the drain after SIGTERM (25 s at most, the default)."""
    try:
        serve(
            os.environ.get("VOICEWIRE_HOST", "127.0.0.1"),
            int(os.environ.get("VOICEWIRE_PORT", "8080")),
            EngineSettings.from_env(),
            os.environ.get("VOICEWIRE_LOG_LEVEL", "info"),
        )
    except (PortInUseError, GpuUnavailable, ValueError) as error:
        finish(1)
        sys.exit(f"speech server: {error}")
    except KeyboardInterrupt:  # a second SIGINT: uvicorn raises it again once it has stopped
        finish(130)
        sys.exit(130)
    finish()
