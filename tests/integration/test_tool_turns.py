"""Turns that call tools, over real parts: the speech server on a real port, moto's @connections
API, and the replay LLM's tool recordings (or the Bedrock stand-in through the real client)."""

from __future__ import annotations

import json
import time

from bedrock_standin import BedrockStandin, Script, answer, tool_call
from test_agent_loop import client_for
from turn_harness import run_turn

from functions.tools import sample_tools
from functions.turn.filler_phrases import filler_for


def kinds(frames):
    return ["audio" if isinstance(frame, tuple) else frame["type"] for frame in frames]


def control(frames, kind):
    return [f for f in frames if isinstance(f, dict) and f["type"] == kind]


async def test_bidi_speaks_the_preamble_while_the_tool_runs(aws, speech_server):
    # A tool slow enough that the preamble's first audio comes while it runs even on a loaded
    # 2-core machine (CI saw 1.5 s pass before it under the suite's load; 1.2 s is typical).
    # The filler is off: after a preamble played out it would fill the rest of so long a call
    # (its own test is below).
    tools = sample_tools(latency_seconds=4.0)
    outcome, connection, _ = await run_turn(
        speech_server,
        "bidi",
        "What time is it in Paris?",
        tools=tools,
        pace=0.3,
        tool_filler_seconds=None,
    )
    frames = connection.frames()
    order = kinds(frames)
    assert outcome.status == "complete" and order[-1] == "turn_end"
    start, end = order.index("tool_start"), order.index("tool_end")
    sentences = control(frames, "sentence")
    assert sentences[0]["text"] == "Let me check the clock."
    assert order.index("sentence") < start  # the preamble was sent to speech first
    assert "audio" in order[start:end]  # and heard while the tool ran
    tool_start, tool_end = frames[start], frames[end]
    assert tool_start == {
        "type": "tool_start",
        "turn_id": "turn-3",
        "tool_use_id": tool_start["tool_use_id"],
        "name": "current_time",
    }
    assert tool_end["status"] == "ok" and tool_end["ms"] >= 4000
    assert "input" not in tool_start and "result" not in tool_end  # private by default
    spoken = outcome.messages[1]["content"][0]["toolResult"]["content"][0]["json"]["spoken"]
    assert spoken in " ".join(s["text"] for s in sentences[1:])
    # The answer after the tool starts with a short first chunk, like a turn's first.
    assert sentences[1]["text"] == "In Paris, it is " + spoken.split(" on ")[0]  # 6 words


async def test_a_slow_tool_with_no_preamble_gets_a_filler_once(aws, speech_server):
    rounds = [tool_call("", "current_time", '{"time_zone": "UTC"}'), answer("It is noon.")]
    with BedrockStandin(Script(rounds=rounds)) as standin:
        outcome, connection, _ = await run_turn(
            speech_server,
            "bidi",
            "Time?",
            llm=client_for(standin),
            # Long enough that the filler's audio arrives while the tool runs, busy or not.
            tools=sample_tools(latency_seconds=3.0),
            tool_filler_seconds=0.4,
        )
    frames = connection.frames()
    order = kinds(frames)
    start, end = order.index("tool_start"), order.index("tool_end")
    sentences = control(frames, "sentence")
    assert [s["text"] for s in sentences] == ["One moment.", "It is noon."]
    assert order.index("sentence") in range(start, end)
    assert "audio" in order[start:end]
    assert outcome.status == "complete"
    assert outcome.messages[-1] == {"role": "assistant", "content": [{"text": "It is noon."}]}


async def test_no_filler_when_the_tool_is_quick(aws, speech_server):
    rounds = [tool_call("", "current_time", '{"time_zone": "UTC"}'), answer("It is noon.")]
    with BedrockStandin(Script(rounds=rounds)) as standin:
        _, connection, _ = await run_turn(
            speech_server,
            "bidi",
            "Time?",
            llm=client_for(standin),
            tools=sample_tools(),
            tool_filler_seconds=0.4,
        )
    assert [s["text"] for s in control(connection.frames(), "sentence")] == ["It is noon."]


async def test_batch_speaks_the_preamble_then_the_answer(aws, speech_server):
    outcome, connection, _ = await run_turn(
        speech_server,
        "batch",
        "What do the voicewire docs say?",
        pace=0.3,
        tools=sample_tools(latency_seconds=2.5),  # outlasts the preamble's synthesis, busy or not
        show_tool_data=True,
    )
    frames = connection.frames()
    order = kinds(frames)
    # A filler may come between them: on a busy machine the tool can outlast the preamble's
    # playout (functions/turn/fillers.py's rule), and that is right.
    sentences = [s for s in control(frames, "sentence") if s["text"] != filler_for("en")]
    assert sentences[0]["text"] == "I'll look that up in the docs."
    assert sentences[1]["text"].startswith("The docs cover that under Deploy")
    start, end = order.index("tool_start"), order.index("tool_end")
    assert order.index("sentence") < start and "audio" in order[start:end]
    assert frames[start]["input"] == {"query": "deploy"}
    assert frames[end]["result"]["matches"][0]["heading"] == "Deploy"
    assert outcome.status == "complete"


async def test_a_cancel_during_a_tool_stops_it_and_leaves_a_valid_history(aws, speech_server):
    tools = sample_tools(latency_seconds=8)
    started = time.monotonic()
    outcome, connection, replay = await run_turn(
        speech_server,
        "bidi",
        "What time is it?",
        tools=tools,
        pace=0.3,
        cancel_when=lambda data: data.startswith(b"{") and json.loads(data)["type"] == "tool_start",
    )
    assert time.monotonic() - started < 6  # the 8 s tool was not waited for
    frames = connection.frames()
    assert outcome.status == "cancelled" and frames[-1]["status"] == "cancelled"
    assert "tool_end" not in kinds(frames)  # nothing of the turn after the cancel but its end
    assert len(replay.requests) == 1
    roles = [m["role"] for m in outcome.messages]
    assert roles == ["assistant", "user"]
    use = outcome.messages[0]["content"][-1]["toolUse"]
    result = outcome.messages[1]["content"][0]["toolResult"]
    assert result["toolUseId"] == use["toolUseId"] and result["status"] == "error"
    assert "cancelled" in result["content"][0]["text"]


async def test_a_slow_tool_after_a_short_preamble_gets_the_filler_once_it_has_played(
    aws, speech_server
):
    outcome, connection, _ = await run_turn(
        speech_server,
        "bidi",
        "What time is it in Paris?",
        tools=sample_tools(latency_seconds=4),
        pace=0.3,
    )
    frames = connection.frames()
    order = kinds(frames)
    start, end = order.index("tool_start"), order.index("tool_end")
    texts = [f["text"] for f in frames if isinstance(f, dict) and f["type"] == "sentence"]
    assert texts[:2] == ["Let me check the clock.", "One moment."]
    said = [f.get("text") if isinstance(f, dict) else None for f in frames]
    filler = said.index("One moment.")
    assert start < filler < end  # while the tool ran, after the preamble
    assert outcome.status == "complete"
    assert "One moment." not in json.dumps(outcome.messages)  # the model never said it
