"""Tool turns through ``voicewire up``'s topology: real ports, real WebSocket clients, the worker
and the replay LLM's tool recordings; and the history the next turn sends, checked against
Bedrock's rules for a conversation with tools."""

from __future__ import annotations

import asyncio
import itertools
import json

from websockets.asyncio.client import connect

from voicewire.turn_client import run_turn
from voicewire_tools.commands.ask import timeline_line


def bedrock_accepts(messages: list[dict]) -> None:
    """Bedrock's rules for a conversation with tools: it opens with the user, roles alternate,
    and every assistant message's toolUse ids are answered by the next message's toolResults."""
    assert messages[0]["role"] == "user"
    for before, after in itertools.pairwise(messages):
        assert before["role"] != after["role"], (before, after)
    for index, message in enumerate(messages):
        uses = [b["toolUse"]["toolUseId"] for b in message["content"] if "toolUse" in b]
        if message["role"] == "assistant" and uses:
            answered = [
                b["toolResult"]["toolUseId"]
                for b in messages[index + 1]["content"]
                if "toolResult" in b
            ]
            assert answered == uses


async def test_an_ask_that_needs_a_tool_is_answered_with_speech(stack):
    lines = []
    result = await run_turn(
        stack.ws_url,
        {"action": "ask", "prompt": "What time is it in Paris?", "mode": "bidi"},
        on_event=lambda event: lines.append(timeline_line(event)),
    )
    kinds = [event.kind for event in result.events]
    assert result.status == "complete" and len(result.audio) > 48_000
    start, end = kinds.index("tool_start"), kinds.index("tool_end")
    assert kinds.index("sentence") < start < end < len(kinds) - 1
    assert result.events[end].data["status"] == "ok"
    assert any("working: current_time" in line for line in lines)
    assert any("current_time ok after" in line for line in lines)
    sentences = [e.data["text"] for e in result.events if e.kind == "sentence"]
    assert sentences[0] == "Let me check the clock." and "In Paris, it is" in sentences[1]


async def test_a_barge_in_during_a_tool_stops_it_and_the_next_turns_work(stack):
    previous = stack.adapters.settings
    stack.adapters.settings = previous.changed(tool_latency_ms=6000)
    asked = len(stack.llm_requests)
    try:
        async with connect(stack.ws_url, max_size=None) as ws:
            await ws.send(json.dumps({"action": "ask", "prompt": "What time is it?"}))
            ends: list[dict] = []
            cut = False
            async with asyncio.timeout(60):
                while len(ends) < 2:
                    frame = await ws.recv()
                    if isinstance(frame, bytes):
                        continue
                    data = json.loads(frame)
                    if data["type"] == "tool_start" and not cut:
                        cut = True  # the listener speaks: a new ask barges in
                        await ws.send(json.dumps({"action": "ask", "prompt": "Hello there!"}))
                    if data["type"] == "turn_end":
                        ends.append(data)
            assert [end["status"] for end in ends] == ["cancelled", "complete"]
            # A third turn on the same connection: its history holds the cut tool call.
            await ws.send(json.dumps({"action": "ask", "prompt": "Who are you?"}))
            async with asyncio.timeout(60):
                while (data := json.loads(await _text(ws)))["type"] != "turn_end":
                    pass
            assert data["status"] == "complete"
    finally:
        stack.adapters.settings = previous
    requests = stack.llm_requests[asked:]
    assert len(requests) == 3  # the cut turn asked once: nothing after its tool
    for request in requests[1:]:
        bedrock_accepts(request["messages"])
    # The third turn's history holds the cut call, answered "cancelled". (The second turn may
    # have read the history before the cut turn wrote it: it started at once.)
    blocks = [block for message in requests[2]["messages"] for block in message["content"]]
    use = next(b["toolUse"] for b in blocks if "toolUse" in b)
    result = next(b["toolResult"] for b in blocks if "toolResult" in b)
    assert result["toolUseId"] == use["toolUseId"] and result["status"] == "error"
    assert "cancelled" in result["content"][0]["text"]
    texts = [b["text"] for b in blocks if "text" in b]
    assert "Hello there!" in texts and texts[-1] == "Who are you?"


async def _text(ws) -> str:
    while isinstance(frame := await ws.recv(), bytes):
        pass
    return frame


async def test_a_strands_agent_answers_through_the_stack(stack):
    previous = stack.adapters.settings
    stack.adapters.settings = previous.changed(agent="strands")
    asked = len(stack.llm_requests)
    try:
        result = await run_turn(
            stack.ws_url, {"action": "ask", "prompt": "What time is it in Paris?", "mode": "batch"}
        )
    finally:
        stack.adapters.settings = previous
    kinds = [event.kind for event in result.events]
    assert result.status == "complete" and len(result.audio) > 48_000
    assert kinds.index("sentence") < kinds.index("tool_start") < kinds.index("tool_end")
    sentences = [e.data["text"] for e in result.events if e.kind == "sentence"]
    assert sentences[0] == "Let me check the clock." and sentences[1].startswith("In Paris, it is")
    requests = stack.llm_requests[asked:]
    assert len(requests) == 2  # Strands' own loop asked again with the tool's result
    bedrock_accepts(requests[1]["messages"])


def test_up_refuses_an_agent_it_does_not_know():
    import argparse

    import pytest

    from voicewire_tools.commands.up import agent_choice

    assert agent_choice("strands:my_agents.voice:make") == "strands:my_agents.voice:make"
    with pytest.raises(argparse.ArgumentTypeError, match="give builtin, strands"):
        agent_choice("langchain")
