"""The built-in agent loop through the real boto3 bedrock-runtime client, against a local server
speaking ConverseStream's wire protocol (``BedrockStandin``): each round's request is what botocore
really serialized (after its parameter validation against the service model), each answer goes
through botocore's event-stream parser."""

from __future__ import annotations

import asyncio
import json

import pytest
from bedrock_standin import BedrockStandin, Script, answer, tool_call
from pydantic import BaseModel

from functions.adapters.bedrock_request import bedrock_client, converse_request
from functions.agent.events import (
    AgentText,
    AnswerEnded,
    ToolCallEnded,
    ToolCallOpened,
    ToolCallStarted,
    ToolsStillRunning,
    with_still_running,
)
from functions.agent.loop import BedrockAgent
from functions.conversation.history import INTERRUPTED
from functions.tools import Tool, ToolRegistry, sample_tools


class Echo(BaseModel):
    word: str


def registry(run, timeout: float = 10.0) -> ToolRegistry:
    return ToolRegistry([Tool("echo", "Repeats a word.", Echo, run, timeout_seconds=timeout)])


async def echo(given: Echo) -> dict:
    return {"said": given.word}


def client_for(standin: BedrockStandin):
    return bedrock_client(
        region_name="us-east-1",
        endpoint_url=standin.url,
        aws_access_key_id="x",
        aws_secret_access_key="y",
    )


def agent_on(standin: BedrockStandin, tools: ToolRegistry, **request_options) -> BedrockAgent:
    request = converse_request(
        "model", [], "Say hi", "Be brief.", tool_config=tools.tool_config(), **request_options
    )
    return BedrockAgent(client_for(standin), request, tools)


async def drain(agent: BedrockAgent) -> list:
    return [event async for event in agent.events()]


async def test_a_tool_round_runs_the_tool_and_sends_its_result_back():
    rounds = [tool_call("Let me check.", "echo", '{"word": "hi"}'), answer("It said", " hi.")]
    with BedrockStandin(Script(rounds=rounds)) as standin:
        agent = agent_on(standin, registry(echo))
        events = await drain(agent)
    kinds = [type(event) for event in events]
    assert kinds == [
        AgentText,
        ToolCallOpened,
        ToolCallStarted,
        ToolCallEnded,
        AgentText,
        AgentText,
        AnswerEnded,
    ]
    started = events[2]
    assert (started.name, started.input) == ("echo", {"word": "hi"})
    assert events[3].status == "ok" and events[3].reply == {"said": "hi"}
    assert agent.text == "Let me check. It said hi."  # a space where the rounds join
    # The second request carries the call and its result, as botocore serialized them.
    second = standin.requests[1]["messages"]
    assert second[1] == {
        "role": "assistant",
        "content": [
            {"text": "Let me check."},
            {"toolUse": {"toolUseId": "tooluse_1", "name": "echo", "input": {"word": "hi"}}},
        ],
    }
    assert second[2] == {
        "role": "user",
        "content": [
            {
                "toolResult": {
                    "toolUseId": "tooluse_1",
                    "content": [{"json": {"said": "hi"}}],
                    "status": "success",
                }
            }
        ],
    }
    assert standin.requests[1]["toolConfig"]["tools"][0]["toolSpec"]["name"] == "echo"
    assert agent.messages == [
        second[1],
        second[2],
        {"role": "assistant", "content": [{"text": "It said hi."}]},
    ]


async def test_the_tool_config_cache_points_and_latency_setting_pass_botocore_validation():
    with BedrockStandin(Script(messages=answer("Hi."))) as standin:
        await drain(agent_on(standin, sample_tools(), cache_prompt=True, latency="optimized"))
    sent = standin.requests[0]
    specs = sent["toolConfig"]["tools"]
    assert [s["toolSpec"]["name"] for s in specs[:-1]] == ["current_time", "search_docs"]
    assert specs[-1] == {"cachePoint": {"type": "default"}}
    assert sent["system"] == [{"text": "Be brief."}, {"cachePoint": {"type": "default"}}]
    assert sent["performanceConfig"] == {"latency": "optimized"}
    schema = specs[0]["toolSpec"]["inputSchema"]["json"]
    assert schema["properties"]["time_zone"]["type"] == "string"


async def test_a_failing_tool_is_an_error_result_and_the_model_still_answers():
    async def broken(given: Echo) -> str:
        raise RuntimeError("the disk is on fire")

    rounds = [tool_call("Checking.", "echo", '{"word": "x"}'), answer("Sorry, it failed.")]
    with BedrockStandin(Script(rounds=rounds)) as standin:
        agent = agent_on(standin, registry(broken))
        events = await drain(agent)
    ended = next(e for e in events if isinstance(e, ToolCallEnded))
    assert ended.status == "error"
    result = standin.requests[1]["messages"][2]["content"][0]["toolResult"]
    assert result["status"] == "error"
    assert "the disk is on fire" in result["content"][0]["text"]
    assert agent.text.endswith("Sorry, it failed.")


async def test_bad_input_from_the_model_names_the_field_and_the_tool_never_runs():
    ran = []

    async def counting(given: Echo) -> str:
        ran.append(given)
        return "ran"

    rounds = [tool_call("One sec.", "echo", '{"wrd": "x"}'), answer("Retrying is up to me.")]
    with BedrockStandin(Script(rounds=rounds)) as standin:
        await drain(agent_on(standin, registry(counting)))
    result = standin.requests[1]["messages"][2]["content"][0]["toolResult"]
    assert result["status"] == "error" and "word" in result["content"][0]["text"]
    assert ran == []


async def test_input_that_is_not_json_is_answered_with_an_error():
    rounds = [tool_call("One sec.", "echo", '{"word": '), answer("Ok.")]
    with BedrockStandin(Script(rounds=rounds)) as standin:
        agent = agent_on(standin, registry(echo))
        await drain(agent)
    call = standin.requests[1]["messages"][1]["content"][1]["toolUse"]
    assert call["input"] == {}  # the history must hold an object
    result = standin.requests[1]["messages"][2]["content"][0]["toolResult"]
    assert result["status"] == "error" and "not JSON" in result["content"][0]["text"]


async def test_a_slow_tool_times_out_even_if_it_ignores_cancellation():
    async def stubborn(given: Echo) -> str:
        await asyncio.to_thread(__import__("time").sleep, 1.5)  # a thread cannot be cancelled
        return "too late"

    rounds = [tool_call("Checking.", "echo", '{"word": "x"}'), answer("It timed out.")]
    with BedrockStandin(Script(rounds=rounds)) as standin:
        agent = agent_on(standin, registry(stubborn, timeout=0.3))
        events = await drain(agent)
    ended = next(e for e in events if isinstance(e, ToolCallEnded))
    assert ended.status == "timeout" and ended.ms < 1000
    result = standin.requests[1]["messages"][2]["content"][0]["toolResult"]
    assert result["status"] == "error" and "0.3 s" in result["content"][0]["text"]


async def test_rounds_are_bounded_and_the_history_answers_every_call():
    calls = [tool_call(f"Again {n}.", "echo", '{"word": "x"}', f"tooluse_{n}") for n in range(9)]
    with BedrockStandin(Script(rounds=calls)) as standin:
        agent = BedrockAgent(
            client_for(standin),
            converse_request("model", [], "Loop", tool_config=registry(echo).tool_config()),
            registry(echo),
            max_rounds=2,
        )
        events = await drain(agent)
    # 2 rounds run, a third refused with a request for an answer, then the end.
    assert len(standin.requests) == 4
    statuses = [e.status for e in events if isinstance(e, ToolCallEnded)]
    assert statuses == ["ok", "ok", "error"]
    assert isinstance(events[-1], AnswerEnded) and events[-1].stop_reason == "tool_use"
    uses = [
        b["toolUse"]["toolUseId"] for m in agent.messages for b in m["content"] if "toolUse" in b
    ]
    results = [
        b["toolResult"]["toolUseId"]
        for m in agent.messages
        for b in m["content"]
        if "toolResult" in b
    ]
    assert uses == results and len(uses) == 4
    assert agent.messages[-1]["role"] == "user"


async def test_a_cancel_during_a_tool_cancels_it_and_answers_the_call_cancelled():
    began, cancelled = asyncio.Event(), asyncio.Event()

    async def waits(given: Echo) -> str:
        began.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "never"

    rounds = [tool_call("Let me look.", "echo", '{"word": "x"}'), answer("Never asked.")]
    with BedrockStandin(Script(rounds=rounds)) as standin:
        agent = agent_on(standin, registry(waits))
        task = asyncio.create_task(drain(agent))
        await asyncio.wait_for(began.wait(), 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.wait_for(cancelled.wait(), 2)
    assert len(standin.requests) == 1  # the model was not asked again
    assert [m["role"] for m in agent.messages] == ["assistant", "user"]
    result = agent.messages[1]["content"][0]["toolResult"]
    assert result["status"] == "error" and "cancelled" in result["content"][0]["text"]
    # Before the next turn's prompt, the assistant's "interrupted": roles still alternate, and
    # no message holds tool results and text at once (some models refuse that).
    after = converse_request("model", [*agent.messages], "And now?")["messages"]
    assert [m["role"] for m in after] == ["assistant", "user", "assistant", "user"]
    assert after[2] == INTERRUPTED and after[3]["content"] == [{"text": "And now?"}]


async def test_still_running_is_told_once_per_round_of_a_slow_tool():
    async def slow(given: Echo) -> str:
        await asyncio.sleep(0.5)
        return "done"

    async def quick(given: Echo) -> str:
        return "done"

    for run, expected in ((slow, 1), (quick, 0)):
        rounds = [tool_call("", "echo", '{"word": "x"}'), answer("Done.")]
        with BedrockStandin(Script(rounds=rounds)) as standin:
            agent = agent_on(standin, registry(run))
            events = [e async for e in with_still_running(agent.events(), 0.2)]
        told = [i for i, e in enumerate(events) if isinstance(e, ToolsStillRunning)]
        assert len(told) == expected
        if told:  # between the start and the end of the call
            kinds = [type(e) for e in events]
            assert kinds.index(ToolCallStarted) < told[0] < kinds.index(ToolCallEnded)


async def test_a_stop_between_rounds_asks_the_model_nothing_more():
    ended = asyncio.Event()

    async def marks(given: Echo) -> str:
        ended.set()
        return "ok"

    rounds = [tool_call("Hm.", "echo", '{"word": "x"}'), answer("Second.")]
    with BedrockStandin(Script(rounds=rounds)) as standin:
        agent = agent_on(standin, registry(marks))
        events = []
        async for event in agent.events():
            events.append(event)
            if isinstance(event, ToolCallEnded):
                agent.stop()
        assert len(standin.requests) == 1
    assert json.dumps(agent.messages).count("toolResult") == 1
