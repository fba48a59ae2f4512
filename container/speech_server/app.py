"""The speech server's ASGI app: the SageMaker container contract on port 8080.

- ``GET /ping``: 200 once the model is loaded (with the instance's load: open sessions, engine
  busy time), 503 while it loads, 500 if loading failed.
- ``POST /invocations``: one text, its audio streamed back (``speech_server.invocations``).
- ``WS /invocations-bidirectional-stream``: the persistent speech session
  (``speech_server.bidi_session``).

The model loads once, on a background thread started with the app, never per connection:
SageMaker wants a WebSocket accepted within 250 ms, and health checks poll ``/ping`` meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Literal

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket

from speech_server.bidi_session import IDLE_SESSION_SECONDS, BidiSession
from speech_server.engines import SpeechEngine
from speech_server.invocations import error_response, invocations
from speech_server.load_metrics import (
    NAMESPACE,
    LoadGauge,
    LoadReporter,
    MetricsTarget,
    cloudwatch_publisher,
)
from speech_server.process_exit import MODEL_LOAD_THREAD
from speech_server.synthesis import Synthesizer
from voicewire.speech_protocol import ErrorCode, ProtocolError
from voicewire.voice_catalog import describe_voices

logger = logging.getLogger(__name__)

EngineFactory = Callable[[], SpeechEngine]


@dataclass
class ModelSlot:
    """Where the loaded model lives, and how loading went."""

    status: Literal["loading", "ready", "failed"] = "loading"
    synthesizer: Synthesizer | None = None
    failure: str | None = None
    loaded: asyncio.Event | None = None


def create_app(
    engine_factory: EngineFactory,
    metrics: MetricsTarget | None = None,
    session_idle_seconds: float = IDLE_SESSION_SECONDS,
) -> Starlette:
    """``metrics``: where to publish the instance's load (``speech_server.load_metrics``); by
    default none (a laptop), and the endpoint stack's environment names one.
    ``session_idle_seconds``: a bidirectional session with no message for this long is closed."""
    slot = ModelSlot()
    gauge = LoadGauge()

    def load() -> None:
        try:
            slot.synthesizer = Synthesizer(engine_factory())
            gauge.busy_seconds = lambda: slot.synthesizer.busy_seconds  # type: ignore[union-attr]
            gauge.take_first_audio_ms = slot.synthesizer.take_first_audio_ms
            slot.status = "ready"
        except Exception as error:  # reported by /ping and every request, and logged
            logger.exception("loading the speech model failed")
            slot.status, slot.failure = "failed", str(error)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        loop = asyncio.get_running_loop()
        slot.loaded = asyncio.Event()

        def load_then_signal() -> None:
            load()
            loop.call_soon_threadsafe(slot.loaded.set)  # type: ignore[union-attr]

        threading.Thread(target=load_then_signal, name=MODEL_LOAD_THREAD, daemon=True).start()
        reporting = None
        if metrics is not None:
            reporter = LoadReporter(gauge, metrics, cloudwatch_publisher(metrics))
            reporting = asyncio.create_task(reporter.run())
            logger.info(
                "publishing load metrics to CloudWatch (%s, %s/%s)",
                NAMESPACE,
                metrics.endpoint_name,
                metrics.variant_name,
            )
        yield
        if reporting is not None:
            reporting.cancel()
        if slot.synthesizer is not None:
            slot.synthesizer.close()

    def not_ready_response() -> Response:
        return error_response(not_ready(), 503 if slot.status == "loading" else 500)

    def not_ready() -> ProtocolError:
        if slot.status == "failed":
            return ProtocolError(
                ErrorCode.MODEL_LOAD_FAILED, f"the speech model failed to load: {slot.failure}"
            )
        return ProtocolError(ErrorCode.MODEL_LOADING, "the speech model is still loading")

    async def ping(request: Request) -> Response:
        if slot.status == "ready":
            engine = slot.synthesizer.engine  # type: ignore[union-attr]
            return JSONResponse(
                {
                    "status": "ready",
                    "engine": engine.name,
                    "default_voice": engine.default_voice,
                    "voices": sorted(engine.voices),
                    "sample_rate": engine.sample_rate,
                    "open_sessions": gauge.open_sessions,
                    "engine_busy_seconds": round(gauge.busy_seconds(), 3),
                }
            )
        return not_ready_response()

    async def voices(request: Request) -> Response:
        """Every voice with its language and gender (``voicewire.voice_catalog``), English
        first: what a client shows a person choosing one."""
        if slot.status != "ready":
            return not_ready_response()
        engine = slot.synthesizer.engine  # type: ignore[union-attr]
        return JSONResponse(
            {
                "default_voice": engine.default_voice,
                "voices": [voice.as_json() for voice in describe_voices(engine.voices)],
            }
        )

    async def invoke(request: Request) -> Response:
        if slot.synthesizer is None:
            return not_ready_response()
        return await invocations(request, slot.synthesizer)

    async def bidi(websocket: WebSocket) -> None:
        if slot.synthesizer is None:
            await websocket.send_denial_response(not_ready_response())
            return
        with gauge.session():
            await BidiSession(websocket, slot.synthesizer, session_idle_seconds).run()

    app = Starlette(
        routes=[
            Route("/ping", ping, methods=["GET"]),
            Route("/voices", voices, methods=["GET"]),
            Route("/invocations", invoke, methods=["POST"]),
            WebSocketRoute("/invocations-bidirectional-stream", bidi),
        ],
        lifespan=lifespan,
    )
    app.state.model = slot
    app.state.load = gauge
    return app
