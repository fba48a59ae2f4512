"""The built-in agent: Bedrock's ``converse_stream`` with tools, run round after round.

A round streams one model message. Its text is handed on as it arrives; a tool call is announced
when its block opens and run once the model has written its input, all of a message's calls at
once, each with its timeout (``functions.tools``). Their results go back as the next request's
user message, and the model answers, or calls again: up to ``max_rounds`` rounds of calls per
turn. Past that, the calls are answered with an error that asks for an answer, and the model gets
one last request. A failed, timed-out or refused call is an error result the model can talk
about, never a dead turn.

A stop (``stop``, or cancelling the task iterating ``events``) closes the model's stream at once
and cancels the running tools without waiting for them; the calls of that round are answered
``cancelled`` in ``messages``, so the history stays one Bedrock accepts.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

from functions.adapters.bedrock_request import ConverseStreamClient
from functions.adapters.converse_events import LlmResult, ToolUseOpened, ToolUseRequest
from functions.adapters.llm import stream_model
from functions.agent.events import (
    AgentEvent,
    AgentText,
    AnswerEnded,
    ToolCallEnded,
    ToolCallOpened,
    ToolCallStarted,
    opening_a_round,
)
from functions.tools.registry import (
    ToolOutcome,
    ToolRegistry,
    cancelled_outcome,
    tool_result,
)

DEFAULT_MAX_TOOL_ROUNDS = 4


class BedrockAgent:
    """One turn of the built-in loop over ``request`` (``converse_request``'s arguments, with the
    registry's ``toolConfig`` when it has tools)."""

    def __init__(
        self,
        client: ConverseStreamClient,
        request: dict[str, Any],
        tools: ToolRegistry | None = None,
        max_rounds: int = DEFAULT_MAX_TOOL_ROUNDS,
    ) -> None:
        self.client = client
        self.request = request
        self.tools = tools or ToolRegistry()
        self.max_rounds = max_rounds
        self.messages: list[dict[str, Any]] = []
        self.results: list[LlmResult] = []  # one per model message, in order
        self._stopped = False
        self._round_stop = threading.Event()

    @property
    def text(self) -> str:
        """Every round's text, a space between rounds where the model wrote none."""
        written = ""
        for result in self.results:
            written += opening_a_round(written, result.text)
        return written

    @property
    def stop_reason(self) -> str | None:
        return self.results[-1].stop_reason if self.results else None

    def stop(self) -> None:
        self._stopped = True
        self._round_stop.set()

    async def events(self) -> AsyncIterator[AgentEvent]:
        request = self.request
        rounds = 0  # rounds of calls run
        refused = False  # a round of calls was answered "no more calls": the last request
        while not self._stopped:
            result = LlmResult()
            self.results.append(result)
            self._round_stop = threading.Event()  # the stream sets its own when it ends
            calls: list[ToolUseRequest] = []
            opening = True  # this round has written no text yet
            async for item in stream_model(self.client, request, result, self._round_stop):
                if isinstance(item, str):
                    # The first text after a tool call continues the preamble: a space between.
                    before = "".join(r.text for r in self.results[:-1]) if opening else ""
                    yield AgentText(opening_a_round(before, item) if opening else item)
                    opening = False
                elif isinstance(item, ToolUseOpened):
                    yield ToolCallOpened(item.tool_use_id, item.name)
                else:
                    calls.append(item)
            if self._stopped:
                return  # an unfinished message is not kept: the model never said it whole
            if result.stop_reason != "tool_use" or not calls or refused:
                if calls:  # even the last request asked for tools: answered, never run
                    self.messages.append({"role": "assistant", "content": result.content})
                    self.messages.append(
                        {
                            "role": "user",
                            "content": [
                                _refused(call, "no more tool calls in this turn") for call in calls
                            ],
                        }
                    )
                elif result.content:
                    self.messages.append({"role": "assistant", "content": result.content})
                yield AnswerEnded(result.stop_reason, result.usage)
                return
            over_limit = rounds >= self.max_rounds
            self.messages.append({"role": "assistant", "content": result.content})
            # Closed with this generator: a stop mid-call still answers every call.
            async with contextlib.aclosing(self._run_calls(calls, over_limit)) as running:
                async for event in running:
                    yield event
            refused, rounds = over_limit, rounds + (not over_limit)
            request = {**request, "messages": [*request["messages"], *self.messages[-2:]]}

    async def _run_calls(
        self, calls: list[ToolUseRequest], over_limit: bool
    ) -> AsyncIterator[AgentEvent]:
        """Run one message's calls at once; end events as each ends; then the user message of
        their results (in the calls' order) joins ``messages``, whatever way this ends."""
        started = time.perf_counter()
        outcomes: dict[str, ToolOutcome] = {}
        tasks: dict[asyncio.Task[ToolOutcome], ToolUseRequest] = {}
        try:
            for call in calls:
                if over_limit or call.problem is not None:
                    reason = (
                        f"this turn has used its {self.max_rounds} rounds of tool calls: answer "
                        "with what you have"
                        if over_limit
                        else call.problem
                    )
                    outcome = _refused_outcome(call, reason or "")
                    outcomes[call.tool_use_id] = outcome
                    yield ToolCallStarted(call.tool_use_id, call.name, call.input)
                    yield _ended(outcome)
                    continue
                yield ToolCallStarted(call.tool_use_id, call.name, call.input)
                task = asyncio.create_task(
                    self.tools.run(call.tool_use_id, call.name, call.input),
                    name=f"tool-{call.name}",
                )
                tasks[task] = call
            pending = set(tasks)
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    outcome = task.result()
                    outcomes[outcome.tool_use_id] = outcome
                    yield _ended(outcome)
        finally:
            ms = round((time.perf_counter() - started) * 1000, 1)
            for task, call in tasks.items():
                if call.tool_use_id in outcomes:
                    continue
                if task.done() and not task.cancelled():
                    outcomes[call.tool_use_id] = task.result()  # ended as the stop came
                else:
                    task.cancel()
                    outcomes[call.tool_use_id] = cancelled_outcome(call.tool_use_id, call.name, ms)
            self.messages.append(
                {
                    "role": "user",
                    "content": [outcomes[call.tool_use_id].result for call in calls],
                }
            )


def _ended(outcome: ToolOutcome) -> ToolCallEnded:
    return ToolCallEnded(
        outcome.tool_use_id, outcome.name, outcome.status, outcome.ms, outcome.reply
    )


def _refused_outcome(call: ToolUseRequest, reason: str) -> ToolOutcome:
    return ToolOutcome(call.tool_use_id, call.name, "error", 0.0, _refused(call, reason))


def _refused(call: ToolUseRequest, reason: str) -> dict[str, Any]:
    return tool_result(call.tool_use_id, reason, "error")
