"""A Strands agent as the brain: ``Agent.stream_async``'s events mapped onto the turn's stream.

Strands runs its own loop (model call, tools, model call); this module only translates what it
yields (strands-agents/sdk-python, ``types/_events.py`` and ``agent/agent.py``'s ``stream_async``):

- ``{"event": chunk}``, each raw Bedrock chunk: a ``contentBlockStart`` with ``toolUse`` is the
  earliest sign of a call (``ToolCallOpened``: the turn speaks the preamble then);
- ``{"data": text}``: text as it streams (``AgentText``);
- ``{"type": "tool_stream", ...}``: what a tool yields while it runs. voicewire's tools run inside
  Strands as ``VoicewireTool``, which yields a start and an end of its own around the registry's
  ``run``: the same validation, timeout and error results as in the built-in loop, and the
  client's ``tool_start``/``tool_end`` at the moment each happens;
- ``{"result": AgentResult}``: the end (``AnswerEnded``).

The model is Strands' own Bedrock provider over a client we hand it (``ClientBedrockModel``):
on AWS the worker's Bedrock client (its timeouts and retries), offline the replay of
``events/llm``, so the tests run Strands' real event loop, request formatting and stream
handling, not a mock of them.

Cancellation: the turn's stop calls ``Agent.cancel`` and closing the iteration cancels the running
tool's task. Strands drops an unfinished assistant message; a call cut short is answered here
(``cancelled``) if Strands left it unanswered, so the history stays one Bedrock accepts.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from strands import Agent
from strands.models.bedrock import BedrockModel
from strands.types.exceptions import ModelThrottledException
from strands.types.tools import AgentTool

from functions.adapters.bedrock_request import ConverseStreamClient, with_prompt
from functions.adapters.llm_errors import LlmError, as_llm_error
from functions.agent.events import (
    AgentEvent,
    AgentText,
    AnswerEnded,
    ToolCallEnded,
    ToolCallOpened,
    ToolCallStarted,
    opening_a_round,
)
from functions.tools.registry import Tool, ToolOutcome, ToolRegistry, cancelled_outcome
from voicewire.error_codes import ErrorCode

_MARK = "voicewire_tool"  # the key of the start and end events VoicewireTool yields


class ClientBedrockModel(BedrockModel):
    """Strands' Bedrock model provider, over the ``converse_stream`` client given (the worker's
    configured one, or the replay). Strands keeps its client in ``client``; its constructor
    makes one, which is replaced here before any call."""

    def __init__(self, client: ConverseStreamClient, **config: Any) -> None:
        super().__init__(region_name="us-east-1", **config)
        self.client = client


class VoicewireTool(AgentTool):
    """One of voicewire's tools, run by Strands through voicewire's registry."""

    def __init__(self, registry: ToolRegistry, tool: Tool) -> None:
        super().__init__()
        self.registry = registry
        self.tool = tool

    @property
    def tool_name(self) -> str:
        return self.tool.name

    @property
    def tool_spec(self) -> Any:
        return self.tool.spec()["toolSpec"]

    @property
    def tool_type(self) -> str:
        return "python"

    async def stream(
        self, tool_use: Any, invocation_state: dict[str, Any], **kwargs: Any
    ) -> AsyncIterator[Any]:
        tool_use_id, given = tool_use["toolUseId"], tool_use.get("input") or {}
        yield {_MARK: "started", "input": given}
        outcome = await self.registry.run(tool_use_id, self.tool.name, given)
        yield {_MARK: "ended", "outcome": outcome}
        yield outcome.result["toolResult"]  # the last value a tool yields is its result


AgentFactory = Callable[..., Agent]


def agent_factory(spec: str) -> AgentFactory | None:
    """``strands:package.module:function`` -> the user's function; ``strands`` -> None (ours)."""
    _, _, target = spec.partition(":")
    if not target:
        return None
    module, _, name = target.partition(":")
    factory = getattr(importlib.import_module(module), name)
    if not callable(factory):
        raise TypeError(f"{target} is not a function returning a Strands Agent")
    return factory


class StrandsAgentTurn:
    """One turn of a Strands agent: the ``AgentTurn`` the turn runner consumes."""

    def __init__(
        self,
        client: ConverseStreamClient,
        model_id: str,
        history: list[dict[str, Any]],
        prompt: str,
        system_prompt: str | None,
        tools: ToolRegistry,
        max_tokens: int,
        max_rounds: int,
        factory: AgentFactory | None = None,
        tool_result_status: bool | str = "auto",
    ) -> None:
        """``tool_result_status``: whether results carry their ``status`` (Strands' ``auto``
        decides by the model id; the replay, whose id names no model, needs it said)."""
        messages = with_prompt(history, prompt)
        # The prompt's message is what this turn asks; what comes after it is the turn's.
        self._earlier, self._question = messages[:-1], messages[-1]
        model = ClientBedrockModel(
            client,
            model_id=model_id,
            max_tokens=max_tokens,
            include_tool_result_status=tool_result_status,
        )
        strands_tools = [VoicewireTool(tools, tool) for tool in tools.tools.values()]
        options = {"model": model, "tools": strands_tools, "system_prompt": system_prompt}
        made = (factory or _default_agent)(**options)
        if not isinstance(made, Agent):
            kind = type(made).__name__
            raise TypeError(f"the agent factory returned a {kind}, not a Strands Agent")
        self.agent = made
        self.agent.messages = [*self._earlier]
        self.max_rounds = max_rounds
        self._text = ""
        self._stop_reason: str | None = None
        self._started: dict[str, tuple[str, float]] = {}  # tool_use_id -> (name, started at)
        self._ended: dict[str, ToolOutcome] = {}

    @property
    def text(self) -> str:
        return self._text

    @property
    def stop_reason(self) -> str | None:
        return self._stop_reason

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The turn's messages after its question, every call answered."""
        kept = list(self.agent.messages[len(self._earlier) + 1 :])
        answered = {
            block["toolResult"]["toolUseId"]
            for message in kept
            for block in message["content"]
            if "toolResult" in block
        }
        if kept and kept[-1]["role"] == "assistant":
            calls = [b["toolUse"] for b in kept[-1]["content"] if "toolUse" in b]
            unanswered = [call for call in calls if call["toolUseId"] not in answered]
            if unanswered:  # cut while its tools ran: answer them, as the built-in loop does
                kept.append({"role": "user", "content": [self._result_of(c) for c in calls]})
        return kept

    def _result_of(self, call: dict[str, Any]) -> dict[str, Any]:
        if call["toolUseId"] in self._ended:
            return self._ended[call["toolUseId"]].result
        name, started = self._started.get(call["toolUseId"], (call["name"], time.perf_counter()))
        ms = round((time.perf_counter() - started) * 1000, 1)
        return cancelled_outcome(call["toolUseId"], name, ms).result

    def stop(self) -> None:
        self.agent.cancel()

    async def events(self) -> AsyncIterator[AgentEvent]:
        opening = True  # no text yet since the last tool call: a space may be needed
        try:
            stream = self.agent.stream_async(
                self._question["content"], limits={"turns": self.max_rounds + 1}
            )
            async for event in stream:
                mapped = self._mapped(event)
                if mapped is None:
                    continue
                if isinstance(mapped, AgentText):
                    if opening:
                        mapped = AgentText(opening_a_round(self._text, mapped.text))
                    opening = False
                    self._text += mapped.text
                elif isinstance(mapped, ToolCallOpened):
                    opening = True
                yield mapped
        except ModelThrottledException as error:
            raise LlmError(ErrorCode.LLM_THROTTLED, f"the model is throttled: {error}") from error
        except LlmError:
            raise
        except Exception as error:
            failure = as_llm_error(error)
            if failure is error:
                raise
            raise failure from error

    def _mapped(self, event: dict[str, Any]) -> AgentEvent | None:
        if "data" in event and isinstance(event["data"], str):
            return AgentText(event["data"]) if event["data"] else None
        if "event" in event:
            start = event["event"].get("contentBlockStart", {}).get("start", {})
            if "toolUse" in start:
                return ToolCallOpened(start["toolUse"]["toolUseId"], start["toolUse"]["name"])
            return None
        if event.get("type") == "tool_stream":
            streamed = event["tool_stream_event"]
            data, tool_use = streamed.get("data"), streamed.get("tool_use") or {}
            if not isinstance(data, dict) or _MARK not in data:
                return None
            tool_use_id, name = tool_use["toolUseId"], tool_use["name"]
            if data[_MARK] == "started":
                self._started[tool_use_id] = (name, time.perf_counter())
                return ToolCallStarted(tool_use_id, name, dict(data["input"]))
            outcome: ToolOutcome = data["outcome"]
            self._ended[tool_use_id] = outcome
            return ToolCallEnded(tool_use_id, name, outcome.status, outcome.ms, outcome.reply)
        if "result" in event:
            self._stop_reason = str(getattr(event["result"], "stop_reason", None) or "") or None
            return AnswerEnded(self._stop_reason)
        return None


def _default_agent(**options: Any) -> Agent:
    # callback_handler=None: the events are read from stream_async, not printed.
    # retry_strategy=None: no retries of Strands' own. Its default retries a throttled model 6
    # times from 4 s up to 240 s apart: minutes of silence for a listener. The worker's Bedrock
    # client already retries before the stream starts (botocore's standard mode, 3 attempts).
    return Agent(callback_handler=None, retry_strategy=None, **options)
