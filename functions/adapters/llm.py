"""The LLM's answer as it streams from Bedrock's ``converse_stream``: text deltas, and the tool
calls the model asks for.

``resp["stream"]`` yields one-key dicts: ``messageStart``, ``contentBlockStart`` (``start`` holds
``toolUse {toolUseId, name}`` when a tool call opens), ``contentBlockDelta`` (``delta`` is
``text``, ``toolUse {input: "<JSON fragment>"}``, ``reasoningContent`` or ``citation``),
``contentBlockStop``, ``messageStop`` (``stopReason``: ``tool_use`` when the model waits for
tool results), ``metadata``. Text deltas are spoken; a tool call is announced the moment its
block opens (``ToolUseOpened``: the turn speaks the preamble then, before the input is written)
and handed over whole at its block's stop (``ToolUseRequest``); ``LlmResult.content`` keeps the
assistant message's blocks for the next request and the history.

Errors can arrive inside the stream (``throttlingException``, ``modelStreamErrorException``,
...): botocore raises them as ``EventStreamError``; a recording may carry them as events. Errors
of the connection itself (timeouts, an unreachable endpoint, a connection cut mid-stream) and a
request botocore rejects come from botocore or urllib3. All of them become ``LlmError`` with a
stable code.

The same code drains real Bedrock and ``ReplayBedrockClient`` (a recording in ``events/llm``),
so the local stack exercises exactly what runs in Lambda.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import boto3
import urllib3.exceptions
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    EventStreamError,
    ParamValidationError,
    ReadTimeoutError,
)

from functions.conversation.history import closed
from voicewire.error_codes import ErrorCode

logger = logging.getLogger(__name__)

# The most tokens one answer may have. Without a limit, each request reserves the model's maximum
# output against the account's tokens-per-minute quota (so far fewer turns fit in it), answers are
# unbounded (a spoken answer should be short), a batch answer can exceed API Gateway's 128 KB
# WebSocket message limit, and the stored history grows toward DynamoDB's 400 KB item limit.
# 512 tokens is about 380 English words: some three minutes of speech.
DEFAULT_MAX_OUTPUT_TOKENS = 512

BEDROCK_CONFIG = Config(
    # A TCP + TLS handshake to the regional endpoint takes milliseconds from Lambda; 2 s means the
    # endpoint is unreachable, and failing fast leaves time for a retry within the turn (botocore's
    # default is 60 s, longer than a person waits for a voice to start).
    connect_timeout=2,
    # The longest gap allowed between bytes of the answer, including the wait for the first token
    # (the model reads the whole prompt first). Models stream their first token within a few
    # seconds and then many per second; 20 s of silence is a stuck stream, not a slow model.
    read_timeout=20,
    # Standard mode retries throttling and transient errors with backoff and a retry quota, so a
    # brown-out is not multiplied by retries; 3 attempts in all (the first and 2 retries) is its
    # default, written out to be explicit. ``total_max_attempts``, not ``max_attempts``: in a
    # client Config, botocore reads ``max_attempts`` as the number of *retries* (3 would make 4).
    # Retries happen only before the stream starts: an error mid-stream is final for the turn.
    retries={"mode": "standard", "total_max_attempts": 3},
    # A Lambda environment reuses its connection across invocations, with idle gaps between turns:
    # keepalive probes keep NAT and load balancers from dropping it silently.
    tcp_keepalive=True,
)

# How long closing the generator waits for the reading thread. Closing the stream ends a blocked
# read at once, but a thread still inside ``converse_stream`` (no response headers yet) ends only
# when they arrive or time out, so the wait is bounded and a thread left behind is logged.
_READER_JOIN_TIMEOUT_S = 3.0

_THROTTLING = frozenset({"ThrottlingException", "throttlingException", "TooManyRequestsException"})
_STREAM_EXCEPTIONS = (
    "throttlingException",
    "modelStreamErrorException",
    "internalServerException",
    "validationException",
    "serviceUnavailableException",
)

# Errors that are not the service's answer, with what they mean; the first match wins. botocore
# raises its own before the response arrives; while the stream is read, urllib3's come through
# unwrapped (botocore's EventStream does not wrap them).
_TRANSPORT_FAILURES: tuple[tuple[type[Exception] | tuple[type[Exception], ...], str], ...] = (
    (ParamValidationError, "the request to the model is invalid"),
    (ConnectTimeoutError, "could not connect to the model's endpoint in time"),
    (EndpointConnectionError, "could not reach the model's endpoint"),
    (
        (ReadTimeoutError, urllib3.exceptions.ReadTimeoutError),
        "the model sent nothing for longer than the read timeout",
    ),
    (
        (ConnectionClosedError, urllib3.exceptions.ProtocolError),
        "the model's endpoint closed the connection",
    ),
    ((BotoCoreError, urllib3.exceptions.HTTPError), "the call to the model failed"),
)


class ConverseStreamClient(Protocol):
    """The one method of boto3's ``bedrock-runtime`` client the pipeline uses."""

    def converse_stream(self, **kwargs: Any) -> dict[str, Any]: ...


class LlmError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


@dataclass
class LlmResult:
    """What the stream said about itself once it ended."""

    stop_reason: str | None = None
    usage: dict[str, int] = field(default_factory=dict)
    text: str = ""
    # The assistant message's content blocks by ``contentBlockIndex``: ``{"text": ...}`` or
    # ``{"toolUse": {"toolUseId", "name", "input"}}`` (the input once its block stopped).
    blocks: dict[int, dict[str, Any]] = field(default_factory=dict)

    @property
    def content(self) -> list[dict[str, Any]]:
        """The assistant message's content, in block order, as the next request must carry it
        (a tool call still being written is left out: it has no input yet)."""
        return [
            block
            for _, block in sorted(self.blocks.items())
            if "text" in block or "input" in block.get("toolUse", {})
        ]


@dataclass(frozen=True)
class ToolUseOpened:
    """A tool call's block has opened: its name is known, its input not yet."""

    tool_use_id: str
    name: str


@dataclass(frozen=True)
class ToolUseRequest:
    """A tool call the model has finished writing. ``problem``: why its input is unusable (not
    a JSON object); the call is still answered, with an error result."""

    tool_use_id: str
    name: str
    input: dict[str, Any]
    problem: str | None = None


ModelEvent = str | ToolUseOpened | ToolUseRequest


def bedrock_client(config: Config | None = None, **client_kwargs: Any) -> ConverseStreamClient:
    """A ``bedrock-runtime`` client with ``BEDROCK_CONFIG``; build one per Lambda environment.

    A client is slow to build (it loads the service model) and keeps its connection pool, so one
    per environment reuses the TLS connection across turns. ``config`` overrides single values of
    ``BEDROCK_CONFIG`` (tests shorten timeouts); ``client_kwargs`` go to ``boto3.client``
    (``region_name``, ``endpoint_url``, ...).
    """
    merged = BEDROCK_CONFIG if config is None else BEDROCK_CONFIG.merge(config)
    return boto3.client("bedrock-runtime", config=merged, **client_kwargs)


def converse_request(
    model_id: str,
    history: list[dict[str, Any]],
    prompt: str,
    system: str | None = None,
    max_tokens: int = DEFAULT_MAX_OUTPUT_TOKENS,
    tool_config: dict[str, Any] | None = None,
    *,
    cache_prompt: bool = False,
    latency: str = "standard",
) -> dict[str, Any]:
    """``converse_stream`` arguments for a prompt after a conversation history.

    ``tool_config``: the tools the model may call (``functions.tools``). ``cache_prompt`` ends
    the system prompt and the tool definitions with a ``cachePoint``, so a model that supports
    prompt caching reads them from its cache on every later turn (they are the same on every
    turn: the history changes after them). ``latency="optimized"``: ``performanceConfig``'s
    latency-optimized inference, on the models and regions that offer it.
    """
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be at least 1, not {max_tokens}")
    request: dict[str, Any] = {
        "modelId": model_id,
        "messages": with_prompt(history, prompt),
        "inferenceConfig": {"maxTokens": max_tokens},
    }
    cache_point = [{"cachePoint": {"type": "default"}}] if cache_prompt else []
    if system:
        request["system"] = [{"text": system}, *cache_point]
    if tool_config and tool_config.get("tools"):
        request["toolConfig"] = {**tool_config, "tools": [*tool_config["tools"], *cache_point]}
    if latency != "standard":
        request["performanceConfig"] = {"latency": latency}
    return request


def with_prompt(history: list[dict[str, Any]], prompt: str) -> list[dict[str, Any]]:
    """The messages of a request: the history (closed), then the prompt as the user's."""
    return [*closed(history), {"role": "user", "content": [{"text": prompt}]}]


def text_deltas(events: Iterator[dict[str, Any]], result: LlmResult) -> Iterator[str]:
    """The text of every ``contentBlockDelta.delta.text``, in order; fills ``result``."""
    for item in model_events(events, result):
        if isinstance(item, str):
            yield item


def model_events(events: Iterator[dict[str, Any]], result: LlmResult) -> Iterator[ModelEvent]:
    """Text deltas and tool calls, in stream order; fills ``result`` (its text, its blocks, the
    stop reason and usage)."""
    tool_inputs: dict[int, list[str]] = {}  # a tool block's input fragments, until it stops
    try:
        for event in events:
            if "contentBlockStart" in event:
                start = event["contentBlockStart"]
                tool = start.get("start", {}).get("toolUse")
                if tool:
                    index = int(start.get("contentBlockIndex", 0))
                    call = {"toolUseId": tool["toolUseId"], "name": tool["name"]}
                    result.blocks[index] = {"toolUse": call}
                    tool_inputs[index] = []
                    yield ToolUseOpened(call["toolUseId"], call["name"])
            elif "contentBlockDelta" in event:
                block = event["contentBlockDelta"]
                index = int(block.get("contentBlockIndex", 0))
                delta = block.get("delta", {})
                if text := delta.get("text"):
                    result.text += text
                    held = result.blocks.setdefault(index, {"text": ""})
                    if "text" in held:
                        held["text"] += text
                    yield text
                elif "toolUse" in delta and index in tool_inputs:
                    tool_inputs[index].append(delta["toolUse"].get("input", ""))
            elif "contentBlockStop" in event:
                index = int(event["contentBlockStop"].get("contentBlockIndex", 0))
                if index in tool_inputs:
                    yield _finished_call(result.blocks[index]["toolUse"], tool_inputs.pop(index))
            elif "messageStop" in event:
                result.stop_reason = event["messageStop"].get("stopReason")
            elif "metadata" in event:
                result.usage = dict(event["metadata"].get("usage", {}))
            else:
                for name in _STREAM_EXCEPTIONS:
                    if name in event:
                        raise _llm_error(name, event[name].get("message", name))
    except EventStreamError as error:
        details = error.response.get("Error", {})
        raise _llm_error(details.get("Code", ""), details.get("Message", str(error))) from error


def _finished_call(call: dict[str, Any], fragments: list[str]) -> ToolUseRequest:
    """The tool call whose input fragments are all in; ``call`` gets its input (an object, as
    the next request must carry it, ``{}`` when the model wrote none or no JSON object)."""
    written = "".join(fragments).strip()
    problem = None
    try:
        parsed = json.loads(written) if written else {}
    except ValueError:
        parsed, problem = {}, f"the tool input is not JSON: {written[:80]!r}"
    if not isinstance(parsed, dict):
        parsed, problem = {}, "the tool input is not a JSON object"
    call["input"] = parsed
    return ToolUseRequest(call["toolUseId"], call["name"], parsed, problem)


def _llm_error(code: str, message: str) -> LlmError:
    if code in _THROTTLING:
        return LlmError(ErrorCode.LLM_THROTTLED, f"the model is throttled: {message}")
    return LlmError(ErrorCode.LLM_FAILED, f"the model's stream failed ({code}): {message}")


def as_llm_error(error: BaseException) -> BaseException:
    """The ``LlmError`` for a failure of the service or the connection; anything else (a bug)
    unchanged."""
    if isinstance(error, ClientError):
        details = error.response.get("Error", {})
        return _llm_error(details.get("Code", ""), details.get("Message", str(error)))
    for kinds, meaning in _TRANSPORT_FAILURES:
        if isinstance(error, kinds):
            return LlmError(ErrorCode.LLM_FAILED, f"{meaning}: {error}")
    return error


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
