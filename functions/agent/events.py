"""The one stream of events a turn consumes, whatever agent produces it.

Two producers: the built-in loop over Bedrock's ``converse_stream`` with tools
(``functions.agent.loop``) and a Strands agent. The turn (``functions.turn``) speaks the text,
flushes its chunker at ``ToolCallOpened`` (the preamble is spoken while the tool runs), tells the
client of ``ToolCallStarted``/``ToolCallEnded`` and may speak a filler at ``ToolsStillRunning``.

An ``AgentTurn`` also keeps the messages of the turn after the user's prompt (``messages``):
the assistant's with its ``toolUse`` blocks, the user's ``toolResult`` blocks (one per call,
``status: error`` for a call cut short), the final answer. They are what the history keeps, and
a history Bedrock accepts: every ``toolUse`` is answered by a ``toolResult``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from functions.tools.registry import ToolStatus


@dataclass(frozen=True)
class AgentText:
    text: str


@dataclass(frozen=True)
class ToolCallOpened:
    """The earliest sign of a tool call (its name is known, its input not yet): the moment to
    speak what the agent has said so far."""

    tool_use_id: str
    name: str


@dataclass(frozen=True)
class ToolCallStarted:
    tool_use_id: str
    name: str
    input: dict[str, Any]


@dataclass(frozen=True)
class ToolCallEnded:
    tool_use_id: str
    name: str
    status: ToolStatus
    ms: float
    reply: Any = None  # the tool's text or JSON (shown to the client only when asked)


@dataclass(frozen=True)
class ToolsStillRunning:
    """A tool of this round is still running ``delay`` seconds after it started."""

    delay: float


@dataclass(frozen=True)
class AnswerEnded:
    stop_reason: str | None = None
    usage: dict[str, int] = field(default_factory=dict)


AgentEvent = (
    AgentText | ToolCallOpened | ToolCallStarted | ToolCallEnded | ToolsStillRunning | AnswerEnded
)


def opening_a_round(written: str, text: str) -> str:
    """``text``, the first of a round after tool calls, as it continues ``written`` (what the
    agent said before): a space between them where the model wrote none."""
    if written and text and not written[-1].isspace() and not text[0].isspace():
        return " " + text
    return text


class AgentTurn(Protocol):
    """One turn of an agent."""

    messages: list[dict[str, Any]]  # the turn's messages after the prompt (see the module)

    def events(self) -> AsyncIterator[AgentEvent]: ...

    def stop(self) -> None:
        """Stop generating at once (the model's stream closed); safe from any moment."""

    @property
    def text(self) -> str:
        """Everything the agent has written this turn, every round."""

    @property
    def stop_reason(self) -> str | None: ...


async def with_still_running(
    events: AsyncIterator[AgentEvent], delay: float
) -> AsyncIterator[AgentEvent]:
    """``events``, with a ``ToolsStillRunning`` after a tool has run ``delay`` seconds with no
    other event: once per round of calls (a round ends when all its calls have ended).

    The source is pumped by a task of its own, so waiting with a timeout never cancels it
    halfway; closing this generator cancels that task, which is how the source sees a stop.
    """
    queue: asyncio.Queue[AgentEvent | BaseException | None] = asyncio.Queue()

    async def pump() -> None:
        try:
            async for event in events:
                queue.put_nowait(event)
        except BaseException as error:  # handed to the consumer (a cancel ends the pump)
            if not isinstance(error, asyncio.CancelledError):
                queue.put_nowait(error)
            raise
        finally:
            queue.put_nowait(None)

    pumping = asyncio.create_task(pump(), name="agent-events")
    running: set[str] = set()
    told = False  # this round's ToolsStillRunning was given
    try:
        while True:
            if running and not told:
                try:
                    item = await asyncio.wait_for(queue.get(), delay)
                except TimeoutError:
                    told = True
                    yield ToolsStillRunning(delay)
                    continue
            else:
                item = await queue.get()
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            if isinstance(item, ToolCallStarted):
                running.add(item.tool_use_id)
            elif isinstance(item, ToolCallEnded):
                running.discard(item.tool_use_id)
                told = told and bool(running)
            yield item
    finally:
        pumping.cancel()
        await asyncio.gather(pumping, return_exceptions=True)
