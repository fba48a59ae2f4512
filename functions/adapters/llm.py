"""The LLM's answer as it streams, without blocking the event loop: ``stream_model`` reads a
``converse_stream`` response (``functions.adapters.converse_events``) on a thread of its own and
hands each text delta and tool call to the turn as it arrives; stopping closes the HTTP stream at
once, so a cancelled turn stops paying for tokens. Every failure comes out as an ``LlmError``
(``functions.adapters.llm_errors``); the request and the client are
``functions.adapters.bedrock_request``'s.

The same code drains real Bedrock and ``ReplayBedrockClient`` (a recording in ``events/llm``),
so the local stack exercises exactly what runs in Lambda.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import AsyncIterator
from typing import Any

from functions.adapters.bedrock_request import ConverseStreamClient
from functions.adapters.converse_events import LlmResult, ModelEvent, model_events
from functions.adapters.llm_errors import as_llm_error

logger = logging.getLogger(__name__)

# How long closing the generator waits for the reading thread. Closing the stream ends a blocked
# read at once, but a thread still inside ``converse_stream`` (no response headers yet) ends only
# when they arrive or time out, so the wait is bounded and a thread left behind is logged.
_READER_JOIN_TIMEOUT_S = 3.0


class _HeldStream:
    """The response stream the reading thread reads, closable from any thread.

    The reading thread hands the stream over (``hold``) as soon as ``converse_stream`` returns;
    ``close`` may come first (a stop before the response headers), from the consumer, the stop
    watcher and the reading thread's own ``finally``, in any order: the lock makes the stream
    closed exactly once, and every later ``close`` a no-op.
    """

    def __init__(self, stop: threading.Event) -> None:
        self._lock = threading.Lock()
        self._stop = stop
        self._stream: Any = None

    def hold(self, stream: Any) -> None:
        with self._lock:
            self._stream = stream
        if self._stop.is_set():  # stopped while the call waited for headers: close at once
            self.close()

    def close(self) -> None:
        with self._lock:
            stream, self._stream = self._stream, None
            if stream is not None and not _close_stream(stream):
                self._stream = stream  # busy: the reading thread closes it when it ends


def _close_stream(stream: Any) -> bool:
    """Close ``stream`` from any thread, ending a read blocked in it; False if it is busy.

    ``EventStream.close()`` alone does not end a read blocked in another thread: it closes the
    socket's file, but on Linux a ``recv`` in progress holds the socket open, so the read waits
    for the next byte or the read timeout, and Bedrock sees no disconnect and keeps generating.
    Shutting the socket down first (urllib3's ``HTTPResponse.shutdown``) wakes the read at once and
    sends the FIN. ``_raw_stream`` is where botocore's ``EventStream`` keeps the urllib3 response.
    """
    shutdown = getattr(getattr(stream, "_raw_stream", None), "shutdown", None)
    if shutdown is not None:
        # Already released or closed: nothing left to wake.
        with contextlib.suppress(ValueError, RuntimeError, OSError):
            shutdown()
    close = getattr(stream, "close", None)
    if close is None:
        return True
    try:
        close()
    except ValueError:  # a generator (a replay) running in the reading thread: "already executing"
        return False
    return True


async def stream_text(
    client: ConverseStreamClient,
    request: dict[str, Any],
    result: LlmResult,
    stop: threading.Event | None = None,
) -> AsyncIterator[str]:
    """Text deltas as they arrive (``stream_model``'s text alone)."""
    async for item in stream_model(client, request, result, stop):
        if isinstance(item, str):
            yield item


async def stream_model(
    client: ConverseStreamClient,
    request: dict[str, Any],
    result: LlmResult,
    stop: threading.Event | None = None,
) -> AsyncIterator[ModelEvent]:
    """Text deltas and tool calls as they arrive, without blocking the event loop.

    boto3's event stream is a blocking iterator, so a thread ("llm-stream") drains it into an
    asyncio queue. Stopping closes the HTTP stream at once, even before the first token, so a
    cancelled turn stops paying for tokens: setting ``stop``, closing this generator or cancelling
    the task iterating it. ``stop`` is set once the stream is over, whichever way it ended.

    Why a watcher thread: the turn sets ``stop`` when it is cancelled, and the task that iterated
    this generator may be cancelled while it waits on something else, leaving the generator
    suspended at a ``yield`` and its ``finally`` to garbage collection. The reading thread cannot
    notice ``stop`` while blocked in a read, and nothing runs in the event loop for an abandoned
    generator, so a small daemon thread ("llm-stream-stop") waits on ``stop`` and closes the
    stream; the reading thread sets ``stop`` when it ends, which ends the watcher too.
    """
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[ModelEvent | BaseException | None] = asyncio.Queue()
    stop = stop or threading.Event()
    held = _HeldStream(stop)

    def post(item: ModelEvent | BaseException | None) -> None:
        # The consumer may be gone (turn cancelled, loop closed): then nobody needs the item.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(queue.put_nowait, item)

    def drain() -> None:
        try:
            if stop.is_set():
                return
            response = client.converse_stream(**request)
            held.hold(response["stream"])
            for item in model_events(iter(response["stream"]), result):
                if stop.is_set():
                    break
                post(item)
        except BaseException as error:  # handed to the consumer
            if stop.is_set():  # the stream was closed under the read: that is the stop, not news
                logger.debug("the LLM stream ended after a stop: %r", error)
            else:
                post(as_llm_error(error))
        finally:
            held.close()
            stop.set()  # ends the watcher
            post(None)

    def watch_stop() -> None:
        stop.wait()
        held.close()

    reader = threading.Thread(target=drain, name="llm-stream", daemon=True)
    watcher = threading.Thread(target=watch_stop, name="llm-stream-stop", daemon=True)
    watcher.start()
    reader.start()
    try:
        while (item := await queue.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        held.close()  # here too, so the close does not wait for the watcher to be scheduled
        if reader.is_alive() or watcher.is_alive():
            # Off the event loop: other turns keep running while this one's thread ends.
            with contextlib.suppress(RuntimeError):  # the default executor is already shut down
                await asyncio.to_thread(_join, (reader, watcher), _READER_JOIN_TIMEOUT_S)
        if reader.is_alive():
            logger.warning(
                "the LLM stream's reading thread did not end within %.0f s of the stop; it ends "
                "when the response headers arrive or time out",
                _READER_JOIN_TIMEOUT_S,
            )


def _join(threads: tuple[threading.Thread, ...], timeout: float) -> None:
    for thread in threads:
        thread.join(timeout)
