"""Writes the synthetic ``converse_stream`` recordings in this folder (run once; output committed).

    uv run python events/llm/make_recordings.py

The texts are ours; the event shapes are Bedrock's ``converse_stream`` (messageStart,
contentBlockDelta text deltas, contentBlockStop, messageStop, metadata). Pacing imitates a real
model: the first token 400-600 ms after the call, then 40-80 tokens per second, with tokens of
1-4 characters plus their leading space. A fixed seed per file keeps them reproducible.

A tool recording (``TOOL_RECORDINGS``) is two model messages: the first speaks a preamble and
calls a tool (a ``toolUse`` block whose input arrives in JSON fragments, ``stopReason:
tool_use``); ``after_tool`` answers the request that carries the tool's result, and
``after_tool_error`` one whose result is an error. Their texts hold placeholders the replay
fills from that result (``{result.spoken}``: a key of its JSON, ``{error}``: its text), each
kept in one delta.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

HERE = Path(__file__).resolve().parent

RECORDINGS = {
    "short": (
        ["hello", "hi there", "hey", "who are you"],
        "Hello! I'm voicewire, the voice of your agent. Ask me anything.",
    ),
    "four_sentences": (
        ["kokoro", "latency", "voice agent", "streaming"],
        "Voice agents feel slow when they wait for the whole answer before speaking. "
        "Streaming sends each new sentence to the speech model as soon as it exists. "
        "First audio then arrives within a fraction of one second. "
        "The rest follows while the answer is still being written.",
    ),
    "long_markdown": (
        ["plan", "steps", "pricing", "release"],
        "## The release plan\n\n"
        "Here is what changes in **v2.3.1**, shipping on Jan. 5 at 10:30 a.m.:\n\n"
        "1. The price drops from $29.99 to $24.99 per month, about 16.7% less.\n"
        "2. Latency falls from 329.3 ms to 156.7 ms, e.g. for the first sentence.\n"
        "3. The `cache` moves to a new region.\n\n"
        "- Dr. Smith reviews the numbers first.\n"
        "- Then the team runs the _full_ test suite, which takes 3.5 hours.\n\n"
        "See [the report](https://example.com/report.pdf) for details. "
        "Questions go to ops@example.com, and that's the whole plan!",
    ),
    "default": (
        [],
        "That's a good question, and I'm glad you asked it. I don't have a recorded answer for "
        "that prompt, so here is a general one while the real model is not connected. "
        "voicewire speaks each sentence as soon as the agent has written it, instead of waiting "
        "for the whole answer. The first words reach you after a fraction of a second, while the "
        "rest of the answer is still being written. Each sentence is cut out of the stream the "
        "moment it ends, synthesized by Kokoro, and sent to you as small binary audio frames. "
        "If you ask something new while I'm still talking, I stop, and the new answer starts. "
        "Try asking about the release plan, or about streaming latency, to hear other answers.",
    ),
    "throttled": (
        ["[throttle]"],
        "Let me think about",
    ),
    "stream_error": (
        ["[stream-error]"],
        "Here is the start of an answer that",
    ),
}
FAILURES = {
    "throttled": {"throttlingException": {"message": "Too many tokens, please wait."}},
    "stream_error": {"modelStreamErrorException": {"message": "The model stream broke."}},
}


TOOL_RECORDINGS = {
    "tool_time": {
        "match": ["what time", "what's the time", "time is it"],
        "preamble": "Let me check the clock.",
        "tool": ("current_time", {"time_zone": "Europe/Paris"}),
        "after_tool": "In Paris, it is {result.spoken}. Anything else I can check for you?",
        "after_tool_error": "I could not read the clock just now: {error}.",
    },
    "tool_quiet": {
        "match": ["[no-preamble]"],
        "preamble": "",
        "tool": ("current_time", {"time_zone": "Europe/Paris"}),
        "after_tool": "It is {result.spoken} in Paris.",
        "after_tool_error": "I could not read the clock just now: {error}.",
    },
    "tool_docs": {
        "match": ["voicewire docs", "in the docs"],
        "preamble": "I'll look that up in the docs.",
        "tool": ("search_docs", {"query": "deploy"}),
        "after_tool": (
            "The docs cover that under {result.matches.0.heading}, in {result.matches.0.file}. "
            "{result.matches.0.summary}"
        ),
        "after_tool_error": "I could not search the docs just now: {error}.",
    },
}


def tokens(text: str, rng: random.Random) -> list[str]:
    """Model-like tokens; a ``{placeholder}`` stays whole, so the replay can fill it."""
    pieces, position = [], 0
    while position < len(text):
        match = re.match(r"\s*", text[position:])
        start = position + (match.end() if match else 0)
        placeholder = re.match(r"\{[^}]*\}", text[start:])
        if placeholder:
            end = start + placeholder.end()
        else:
            end = start + rng.randint(1, 4)
            brace = text.find("{", start, end)
            end = brace if brace > start else end  # a token never runs into a placeholder
        pieces.append(text[position:end])
        position = end
    return pieces


def message(
    rng: random.Random,
    text: str,
    tool: tuple[str, dict] | None = None,
    tool_use_id: str = "",
    failure: dict | None = None,
) -> list[dict]:
    """One model message's events: its text, then a tool call if any; first token after
    400-600 ms."""
    at = rng.uniform(400, 600)
    events = [
        {"at_ms": round(at - 5, 1), "event": {"messageStart": {"role": "assistant"}}},
        {
            "at_ms": round(at - 5, 1),
            "event": {"contentBlockStart": {"start": {}, "contentBlockIndex": 0}},
        },
    ]
    count = 0
    for piece in tokens(text, rng):
        events.append(
            {
                "at_ms": round(at, 1),
                "event": {"contentBlockDelta": {"delta": {"text": piece}, "contentBlockIndex": 0}},
            }
        )
        count += 1
        at += 1000 / rng.uniform(40, 80)
    if failure is not None:
        events.append({"at_ms": round(at, 1), "event": failure})
        return events
    events.append({"at_ms": round(at, 1), "event": {"contentBlockStop": {"contentBlockIndex": 0}}})
    stop_reason = "end_turn"
    if tool is not None:
        name, given = tool
        stop_reason = "tool_use"
        start = {"toolUse": {"toolUseId": tool_use_id, "name": name}}
        events.append(
            {
                "at_ms": round(at, 1),
                "event": {"contentBlockStart": {"start": start, "contentBlockIndex": 1}},
            }
        )
        written = json.dumps(given)
        cut = len(written) // 2
        for fragment in (written[:cut], written[cut:]):
            at += 1000 / rng.uniform(40, 80)
            count += 1
            events.append(
                {
                    "at_ms": round(at, 1),
                    "event": {
                        "contentBlockDelta": {
                            "delta": {"toolUse": {"input": fragment}},
                            "contentBlockIndex": 1,
                        }
                    },
                }
            )
        events.append(
            {"at_ms": round(at, 1), "event": {"contentBlockStop": {"contentBlockIndex": 1}}}
        )
    events += [
        {"at_ms": round(at, 1), "event": {"messageStop": {"stopReason": stop_reason}}},
        {
            "at_ms": round(at + 2, 1),
            "event": {
                "metadata": {
                    "usage": {"inputTokens": 42, "outputTokens": count, "totalTokens": 42 + count},
                    "metrics": {"latencyMs": round(at)},
                }
            },
        },
    ]
    return events


def tool_record(name: str, spec: dict) -> dict:
    rng = random.Random(name)
    tool_use_id = f"tooluse_{name}_{rng.randrange(16**8):08x}"
    return {
        "description": "Synthetic sample in Bedrock converse_stream shapes (not a real model's "
        "output): a preamble and a tool call, then the answers to its result; the replay fills "
        "the placeholders from the toolResult it is sent. Made by make_recordings.py.",
        "match": spec["match"],
        "pacing": "first token after 400-600 ms, then 40-80 tokens/s, in each message",
        "events": message(rng, spec["preamble"], spec["tool"], tool_use_id),
        "after_tool": message(rng, spec["after_tool"]),
        "after_tool_error": message(rng, spec["after_tool_error"]),
    }


def record(name: str, match: list[str], text: str) -> dict:
    rng = random.Random(name)
    return {
        "description": "Synthetic sample in Bedrock converse_stream shapes (not a real model's "
        "output); made by make_recordings.py.",
        "match": match,
        "pacing": "first token after 400-600 ms, then 40-80 tokens/s",
        "events": message(rng, text, failure=FAILURES.get(name)),
    }


def main() -> None:
    made = {name: record(name, match, text) for name, (match, text) in RECORDINGS.items()}
    made |= {name: tool_record(name, spec) for name, spec in TOOL_RECORDINGS.items()}
    for name, recording in made.items():
        path = HERE / f"{name}.json"
        path.write_text(json.dumps(recording, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {path.name}")


if __name__ == "__main__":
    main()
