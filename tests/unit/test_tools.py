"""The tool registry, the sample tools and the replay's tool recordings."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import UTC, datetime

import pytest

from functions.adapters.bedrock_request import converse_request
from functions.adapters.replay_llm import ReplayBedrockClient, prompt_and_results
from functions.agent.events import AgentText, ToolCallEnded, ToolCallStarted
from functions.agent.loop import BedrockAgent
from functions.tools import sample_tools
from functions.tools.current_time import current_time_tool, spoken_time
from functions.tools.registry import tool_result
from functions.tools.search_docs import DocsIndex, excerpt, search_docs_tool
from functions.turn.filler_phrases import filler_for


class FixedClock(datetime):
    @classmethod
    def now(cls, tz=None):
        return datetime(2026, 12, 3, 14, 7, 9, tzinfo=UTC).astimezone(tz)


async def test_current_time_answers_in_the_zone_asked():
    registry = sample_tools(["current_time"])
    registry.tools["current_time"] = current_time_tool(now=FixedClock)
    outcome = await registry.run("t1", "current_time", {"time_zone": "Asia/Tokyo"})
    assert outcome.status == "ok"
    assert outcome.reply == {
        "time_zone": "Asia/Tokyo",
        "local_time": "2026-12-03T23:07:09+09:00",
        "spoken": "11:07 PM on Thursday, December 3",
    }
    assert outcome.result["toolResult"]["status"] == "success"


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({"time_zone": "Mars/Olympus"}, "not a known IANA time zone"),
        ({"time_zone": 7}, "time_zone: Input should be a valid string"),
        ({"time_zone": ""}, "time_zone: String should have at least 1 character"),
    ],
)
async def test_a_bad_zone_is_an_error_the_model_can_say(given, expected):
    outcome = await sample_tools(["current_time"]).run("t1", "current_time", given)
    assert outcome.status == "error"
    assert expected in outcome.reply
    assert outcome.result["toolResult"]["status"] == "error"


def test_spoken_time_has_no_leading_zero():
    assert spoken_time(datetime(2026, 1, 5, 9, 3)) == "9:03 AM on Monday, January 5"


async def test_an_unknown_tool_is_an_error_naming_the_tools_there_are():
    outcome = await sample_tools().run("t1", "weather", {})
    assert outcome.status == "error"
    assert "current_time, search_docs" in outcome.reply


def test_unknown_sample_tools_are_refused():
    with pytest.raises(ValueError, match="unknown tools"):
        sample_tools(["current_time", "rm_rf"])


async def test_latency_delays_every_sample_tool():
    registry = sample_tools(latency_seconds=0.3)
    outcomes = await asyncio.gather(
        registry.run("a", "current_time", {}), registry.run("b", "search_docs", {"query": "x"})
    )
    assert all(outcome.ms >= 300 for outcome in outcomes)


def write_docs(folder):
    (folder / "guide.md").write_text(
        "# Guide\n\nIntro text that is long enough to count as prose for the voice here.\n\n"
        "## Barge-in\n\nWhen the listener speaks, the turn is cancelled and its audio stops at "
        "once, so the next answer can start.\n\n```bash\nbarge-in --now\n```\n\n"
        "## Pricing\n\n| plan | price |\n|---|---|\n| basic | 1 |\n\nThe pricing table lists "
        "what each plan costs per month, with `base` and `extra` fees included.\n"
    )
    (folder / "other.md").write_text(
        "# Other\n\nNothing about interruptions here, only words about the weather and more.\n"
    )


def test_search_finds_the_section_and_says_it_as_prose(tmp_path):
    write_docs(tmp_path)
    found = DocsIndex((tmp_path,)).search("what happens on barge-in")
    assert found[0][1].heading == "Barge-in"
    assert found[0][1].file == "guide.md"
    pricing = DocsIndex((tmp_path,)).search("pricing")[0][1]
    said = excerpt(pricing.text)
    assert "|" not in said and "```" not in said
    assert "with base and extra fees included" in said


def test_a_query_of_unknown_or_common_words_finds_nothing(tmp_path):
    write_docs(tmp_path)
    assert DocsIndex((tmp_path,)).search("zebra") == []
    assert DocsIndex((tmp_path,)).search("what is the") == []


async def test_search_docs_over_voicewire_own_docs_finds_the_deploy_section():
    outcome = await sample_tools(["search_docs"]).run("t", "search_docs", {"query": "deploy"})
    top = outcome.reply["matches"][0]
    assert outcome.status == "ok"
    assert top["heading"] == "Deploy" and top["summary"].startswith("It needs an AWS account")


async def test_search_docs_reads_a_given_folder(tmp_path):
    write_docs(tmp_path)
    tool = search_docs_tool((tmp_path,))
    reply = await tool.run(tool.input_model(query="barge-in"))
    assert reply["matches"][0]["file"] == "guide.md"


@pytest.mark.parametrize(
    ("language", "filler"),
    [
        ("en-US", "One moment."),
        ("fr-FR", "Un instant."),
        ("ja", "少々お待ちください。"),
        (None, "One moment."),
        ("de-DE", "One moment."),
    ],
)
def test_the_filler_follows_the_voice_language(language, filler):
    assert filler_for(language) == filler


def test_the_prompt_is_the_last_user_text_and_results_are_what_follows():
    messages = [
        {"role": "user", "content": [{"text": "first"}]},
        {
            "role": "assistant",
            "content": [{"toolUse": {"toolUseId": "a", "name": "x", "input": {}}}],
        },
        {"role": "user", "content": [tool_result("a", "cut", "error"), {"text": "second"}]},
    ]
    assert prompt_and_results(messages) == ("second", [])  # an old turn's results
    later = [
        *messages,
        {"role": "assistant", "content": [{"text": "ok"}]},
        {"role": "user", "content": [tool_result("b", {"v": 1})]},
    ]
    assert prompt_and_results(later) == ("second", [tool_result("b", {"v": 1})["toolResult"]])


@pytest.mark.parametrize(
    ("prompt", "tool"),
    [
        ("What time is it in Paris?", "current_time"),
        ("What do the voicewire docs say about deploying?", "search_docs"),
    ],
)
async def test_tool_recordings_call_their_tool_and_answer_from_its_result(prompt, tool):
    registry = sample_tools()
    replay = ReplayBedrockClient(pace=0)
    request = converse_request("m", [], prompt, tool_config=registry.tool_config())
    agent = BedrockAgent(replay, request, registry)
    events = [event async for event in agent.events()]
    started = next(e for e in events if isinstance(e, ToolCallStarted))
    ended = next(e for e in events if isinstance(e, ToolCallEnded))
    assert started.name == tool and ended.status == "ok"
    answer = "".join(e.text for e in events[events.index(ended) :] if isinstance(e, AgentText))
    assert "{" not in answer and "(not in the result)" not in answer
    if tool == "current_time":
        assert ended.reply["spoken"] in answer
    else:
        assert ended.reply["matches"][0]["heading"] in answer
    assert len(replay.requests) == 2


async def test_a_tool_recording_answers_an_error_result_with_its_error():
    async def down(given):
        raise RuntimeError("the clock service is down")

    registry = sample_tools(["current_time"])
    tool = registry.tools["current_time"]
    registry.tools["current_time"] = dataclasses.replace(tool, run=down)
    agent = BedrockAgent(
        ReplayBedrockClient(pace=0),
        converse_request("m", [], "what time is it?", tool_config=registry.tool_config()),
        registry,
    )
    _ = [event async for event in agent.events()]
    assert "I could not read the clock just now: the tool failed: the clock service is down." in (
        agent.text
    )


def test_a_knowledge_base_id_switches_search_docs_and_is_checked():
    from functions.settings import Settings, SettingsError

    registry = sample_tools(knowledge_base_id="KB12345678")
    assert registry.tools["search_docs"].description.startswith("Search the documentation")
    with pytest.raises(SettingsError, match="VOICEWIRE_KNOWLEDGE_BASE_ID"):
        Settings.from_env({"VOICEWIRE_LLM": "replay", "VOICEWIRE_KNOWLEDGE_BASE_ID": "no/slash"})
