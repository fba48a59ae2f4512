"""The LLM's answer as a stream of text deltas, from Bedrock's ``converse_stream``.

``resp["stream"]`` yields one-key dicts: ``messageStart``, ``contentBlockStart``,
``contentBlockDelta`` (``delta`` is ``text``, ``toolUse``, ``reasoningContent`` or
``citation``), ``contentBlockStop``, ``messageStop`` (``stopReason``), ``metadata``. Only text
deltas are spoken. Errors can arrive inside the stream (``throttlingException``,
``modelStreamErrorException``, ...): botocore raises them as ``EventStreamError``; a recording may
carry them as events. Both become ``LlmError`` with a stable code.

The same code drains real Bedrock and ``ReplayBedrockClient`` (a recording in ``events/llm``),
so the local stack exercises exactly what runs in Lambda.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from botocore.exceptions import ClientError, EventStreamError

from voicewire.error_codes import ErrorCode

logger = logging.getLogger(__name__)

_THROTTLING = frozenset({"ThrottlingException", "throttlingException", "TooManyRequestsException"})
_STREAM_EXCEPTIONS = (
    "throttlingException",
    "modelStreamErrorException",
    "internalServerException",
    "validationException",
    "serviceUnavailableException",
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


def converse_request(
    model_id: str, history: list[dict[str, Any]], prompt: str, system: str | None = None
) -> dict[str, Any]:
    """``converse_stream`` arguments for a prompt after a conversation history."""
    messages = [*history, {"role": "user", "content": [{"text": prompt}]}]
    request: dict[str, Any] = {"modelId": model_id, "messages": messages}
    if system:
        request["system"] = [{"text": system}]
    return request


def text_deltas(events: Iterator[dict[str, Any]], result: LlmResult) -> Iterator[str]:
    """The text of every ``contentBlockDelta.delta.text``, in order; fills ``result``."""
    try:
        for event in events:
            if "contentBlockDelta" in event:
                text = event["contentBlockDelta"].get("delta", {}).get("text")
                if text:
                    result.text += text
                    yield text
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


def _llm_error(code: str, message: str) -> LlmError:
    if code in _THROTTLING:
        return LlmError(ErrorCode.LLM_THROTTLED, f"the model is throttled: {message}")
    return LlmError(ErrorCode.LLM_FAILED, f"the model's stream failed ({code}): {message}")


async def stream_text(
    client: ConverseStreamClient,
    request: dict[str, Any],
    result: LlmResult,
    stop: threading.Event | None = None,
) -> AsyncIterator[str]:
    """Text deltas as they arrive, without blocking the event loop.

    boto3's event stream is a blocking iterator, so a thread drains it into an asyncio queue;
    setting ``stop`` (or closing this generator) ends the thread at the next event and closes
    the HTTP stream, so a cancelled turn stops paying for tokens.
    """
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[str | BaseException | None] = asyncio.Queue()
    stop = stop or threading.Event()

    def post(item: str | BaseException | None) -> None:
        # The consumer may be gone (turn cancelled, loop closed): then nobody needs the item.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(queue.put_nowait, item)

    def drain() -> None:
        stream = None
        try:
            response = client.converse_stream(**request)
            stream = response["stream"]
            for text in text_deltas(iter(stream), result):
                if stop.is_set():
                    break
                post(text)
        except ClientError as error:
            details = error.response.get("Error", {})
            failure = _llm_error(details.get("Code", ""), details.get("Message", str(error)))
            post(failure)
        except BaseException as error:  # handed to the consumer
            post(error)
        finally:
            close = getattr(stream, "close", None)
            if close is not None:
                close()
            post(None)

    thread = threading.Thread(target=drain, name="llm-stream", daemon=True)
    thread.start()
    try:
        while (item := await queue.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
