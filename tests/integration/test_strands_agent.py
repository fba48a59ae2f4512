"""A Strands agent as the brain: Strands' own event loop and Bedrock provider, run for real
against the replay recordings and against the Bedrock stand-in through the real boto3 client."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading

import pytest
from bedrock_standin import BedrockStandin, Script, answer, tool_call
from strands_factories import MADE
from test_agent_loop import client_for
from test_tool_stack import bedrock_accepts
from turn_harness import run_turn

from functions.adapters.llm_errors import LlmError
from functions.adapters.replay_llm import ReplayBedrockClient
from functions.agent.events import (
    AgentText,
    AnswerEnded,
    ToolCallEnded,
    ToolCallOpened,
    ToolCallStarted,
)
from functions.agent.strands_agent import StrandsAgentTurn, agent_factory
from functions.tools import sample_tools
from functions.tools.current_time import current_time_tool
from functions.tools.registry import ToolRegistry
from voicewire.error_codes import ErrorCode


def strands_turn(client, prompt, history=(), tools=None, factory=None):
    return StrandsAgentTurn(
        client,
        "replay",
        list(history),
        prompt,
        "Be brief.",
        tools or sample_tools(),
        512,
        4,
        factory,
        tool_result_status=True,  # the replay's id names no model: Strands cannot tell
    )


async def drain(turn) -> list:
    return [event async for event in turn.events()]


async def test_strands_runs_the_tool_recording_for_real():
    replay = ReplayBedrockClient(pace=0)
    turn = strands_turn(replay, "What time is it in Paris?")
    events = await drain(turn)
    kinds = [type(e) for e in events if not isinstance(e, AgentText)]
    assert kinds == [ToolCallOpened, ToolCallStarted, ToolCallEnded, AnswerEnded]
    ended = next(e for e in events if isinstance(e, ToolCallEnded))
    assert ended.status == "ok" and ended.reply["spoken"] in turn.text
    assert turn.text.startswith("Let me check the clock. In Paris, it is")
    assert "".join(e.text for e in events if isinstance(e, AgentText)) == turn.text
    # Strands asked twice, the second time with the tool's result, in Bedrock's shapes.
    assert len(replay.requests) == 2
    second = replay.requests[1]
    assert second["toolConfig"]["tools"][0]["toolSpec"]["name"] == "current_time"
    bedrock_accepts(second["messages"])
    assert [m["role"] for m in turn.messages] == ["assistant", "user", "assistant"]
    assert turn.stop_reason == "end_turn"


async def test_strands_through_the_real_boto3_client_and_its_errors_as_results():
    async def broken(given):
        raise RuntimeError("no clock")

    tools = sample_tools(["current_time"])
    tool = tools.tools["current_time"]
    tools.tools["current_time"] = dataclasses.replace(tool, run=broken)
    rounds = [tool_call("Checking.", "current_time", '{"time_zone": "UTC"}'), answer("Sorry.")]
    with BedrockStandin(Script(rounds=rounds)) as standin:
        turn = strands_turn(client_for(standin), "Time?", tools=tools)
        events = await drain(turn)
    assert next(e for e in events if isinstance(e, ToolCallEnded)).status == "error"
    result = standin.requests[1]["messages"][-1]["content"][0]["toolResult"]
    assert result["status"] == "error" and "no clock" in result["content"][0]["text"]
    assert turn.text == "Checking. Sorry."


async def test_a_throttled_model_is_llm_throttled():
    with pytest.raises(LlmError) as raised:
        await drain(strands_turn(ReplayBedrockClient(pace=0), "[throttle] now"))
    assert raised.value.code == ErrorCode.LLM_THROTTLED


async def test_a_cancel_during_a_tool_answers_the_call_cancelled():
    replay = ReplayBedrockClient(pace=0)
    turn = strands_turn(replay, "What time is it?", tools=sample_tools(latency_seconds=30))
    started = asyncio.Event()

    async def consume():
        async for event in turn.events():
            if isinstance(event, ToolCallStarted):
                started.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(started.wait(), 10)
    turn.stop()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert len(replay.requests) == 1
    messages = turn.messages
    assert [m["role"] for m in messages] == ["assistant", "user"]
    result = messages[1]["content"][0]["toolResult"]
    assert result["status"] == "error" and "cancelled" in json.dumps(result)
    bedrock_accepts([{"role": "user", "content": [{"text": "q"}]}, *messages])


async def test_a_history_ending_with_results_takes_the_prompt_in():
    cut = [
        {"role": "user", "content": [{"text": "What time is it?"}]},
        {
            "role": "assistant",
            "content": [{"toolUse": {"toolUseId": "t1", "name": "current_time", "input": {}}}],
        },
        {
            "role": "user",
            "content": [
                {
                    "toolResult": {
                        "toolUseId": "t1",
                        "status": "error",
                        "content": [{"text": "cancelled"}],
                    }
                }
            ],
        },
    ]
    replay = ReplayBedrockClient(pace=0)
    await drain(strands_turn(replay, "Hello there", history=cut))
    sent = replay.requests[0]["messages"]
    bedrock_accepts(sent)
    assert sent[-1]["content"][-1] == {"text": "Hello there"}


async def test_a_users_own_agent_plugs_in_by_its_factory():
    factory = agent_factory("strands:strands_factories:careful_agent")
    replay = ReplayBedrockClient(pace=0)
    await drain(strands_turn(replay, "Hello there", factory=factory))
    assert replay.requests[0]["system"][0]["text"] == "Be careful."
    assert MADE and MADE[-1].tool_names == ["current_time", "search_docs"]
    with pytest.raises(TypeError, match="not a Strands Agent"):
        strands_turn(replay, "Hi", factory=agent_factory("strands:strands_factories:not_an_agent"))
    assert agent_factory("strands") is None


def tool_held_until(event: threading.Event) -> ToolRegistry:
    """The sample clock tool, answering only once ``event`` is set (at most 60 s): a tool that
    runs for as long as the test needs, on any machine (issue 51: a 1.5 s tool ended before a
    slower CPU had spoken the preamble)."""
    clock = current_time_tool()

    async def held(given):
        await asyncio.to_thread(event.wait, 60)
        return await clock.run(given)

    return ToolRegistry([dataclasses.replace(clock, run=held)])


async def test_a_strands_turn_speaks_the_preamble_while_the_tool_runs(aws, speech_server):
    """The preamble is spoken while the tool runs, not after: the tool answers only once audio
    has been posted, so a turn that held the preamble's audio back until the tool ended would
    post it after ``tool_end`` (60 s later)."""
    posted_audio = threading.Event()

    def agent():
        return strands_turn(
            ReplayBedrockClient(pace=0.3),
            "What time is it in Paris?",
            tools=tool_held_until(posted_audio),
        )

    def watch(data: bytes) -> None:
        if data[:1] == b"\xa1":  # an audio frame (voicewire.client_protocol)
            posted_audio.set()

    outcome, connection, _ = await run_turn(speech_server, "bidi", agent=agent, watch=watch)
    frames = connection.frames()
    order = ["audio" if isinstance(f, tuple) else f["type"] for f in frames]
    start, end = order.index("tool_start"), order.index("tool_end")
    assert order.index("sentence") < start and "audio" in order[start:end]
    assert outcome.status == "complete"
    bedrock_accepts([{"role": "user", "content": [{"text": "q"}]}, *outcome.messages])
