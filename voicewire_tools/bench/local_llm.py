"""``voicewire bench llm``: the local LLM (``--llm local``) on this machine's CPU, alone.

    uv run --extra local-llm voicewire bench llm [--trials 1] [--json PATH]

Through the same ``converse_stream`` adapter the worker reads (``LocalLlmClient`` and
``functions.adapters.converse_events``), with the speech system prompt the stack sends:

- **quality**: a dozen factual questions, each answered once per trial; an answer counts as
  right when it holds one of the expected words (a keyword check: "Shakespeare ... a French
  playwright" passes, so read the answers it prints);
- **speed**: time to first token (from the request to the first text delta) and tokens per
  second after it, medians over the answers;
- **cancellation**: a long answer closed after its fifth text delta, and the time from
  ``close()`` to the stream's end;
- **tool use**: the model offered two tools in its system prompt (it takes no ``toolConfig``:
  the adapter refuses one, as Bedrock does for a model without tool use), asked questions that
  need one and questions that need none; a call counts when the answer holds a JSON object
  naming the right tool with the right argument, and no call is the right answer to the
  others.

Nothing here runs the speech server; ``voicewire bench ttfa --llm local`` measures the first
audio with this model writing the answers.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import time
from dataclasses import dataclass
from typing import Any

from functions.adapters.bedrock_request import converse_request
from functions.adapters.converse_events import LlmResult, text_deltas
from functions.settings import DEFAULT_SYSTEM_PROMPT
from voicewire_tools.bench.machine import describe_machine, machine_line
from voicewire_tools.bench.report import write_json

RUNS_TURNS = False

QUESTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("What is the capital of France?", ("paris",)),
    ("What is the capital of Japan?", ("tokyo",)),
    ("How many days are in a week?", ("seven", "7")),
    ("What is the largest planet in the solar system?", ("jupiter",)),
    ("Who wrote Romeo and Juliet?", ("shakespeare",)),
    ("What color is the sky on a clear day?", ("blue",)),
    ("What is the boiling point of water in Celsius?", ("100",)),
    ("What is two plus two?", ("four", "4")),
    ("How many legs does a spider have?", ("eight", "8")),
    ("What is the chemical symbol for gold?", ("au",)),
    ("Which ocean is the largest?", ("pacific",)),
    ("What is the freezing point of water in Fahrenheit?", ("32",)),
)
LONG_ANSWER = "Tell me a long story about a lighthouse keeper and the sea."
CANCEL_AFTER_DELTAS = 5

TOOL_PROMPT = (
    "You are a helpful voice assistant with two tools. To call one, answer with only a JSON "
    'object: {"name": "current_time", "arguments": {"timezone": "<IANA time zone>"}} gives the '
    'time in a place; {"name": "search_docs", "arguments": {"query": "<words>"}} searches the '
    "project's documentation. Answer other questions in short spoken sentences."
)


@dataclass(frozen=True)
class ToolCase:
    prompt: str
    tool: str | None  # None: the right answer calls no tool
    argument: str | None = None  # the argument the call must carry


TOOL_CASES = (
    ToolCase("What time is it in Paris?", "current_time", "timezone"),
    ToolCase("What time is it in Tokyo right now?", "current_time", "timezone"),
    ToolCase("What's the time in New York?", "current_time", "timezone"),
    ToolCase("Search the docs for the release plan.", "search_docs", "query"),
    ToolCase("What do the docs say about barge-in?", "search_docs", "query"),
    ToolCase("Look up how to deploy in the documentation.", "search_docs", "query"),
    ToolCase("What is the capital of Italy?", None),
    ToolCase("How many legs does a cat have?", None),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--trials", type=int, default=1, help="answers per question")


def run(args: argparse.Namespace) -> dict[str, Any]:
    from voicewire_tools.commands.local_llm_setup import ensure_local_llm
    from voicewire_tools.local_stack.local_llm import LocalLlmClient

    if args.trials < 1:
        raise ValueError("--trials must be at least 1")
    ensure_local_llm()
    machine = describe_machine(None)
    print(machine_line(machine), flush=True)
    started = time.monotonic()
    client = LocalLlmClient.load(
        getattr(args, "local_llm_weights", None),
        progress=print,
        threads=getattr(args, "local_llm_threads", None),
    )
    load_s = time.monotonic() - started
    answers = [
        {**ask(client, question, DEFAULT_SYSTEM_PROMPT), "expected": expected}
        for _ in range(args.trials)
        for question, expected in QUESTIONS
    ]
    for answer in answers:
        answer["right"] = any(word in answer["text"].lower() for word in answer["expected"])
        print(
            f"  {'right' if answer['right'] else 'WRONG'}  {answer['prompt']} -> "
            f"{answer['text']!r}",
            flush=True,
        )
    tools = [tool_trial(client, case) for case in TOOL_CASES]
    for trial in tools:
        print(
            f"  tool {'right' if trial['right'] else 'WRONG'}  {trial['prompt']} -> "
            f"{trial['text']!r}",
            flush=True,
        )
    data = {
        "machine": machine,
        "model": client.model.model_id,
        "threads": client.model.threads,
        "load_s": round(load_s, 2),
        "quality": {"right": sum(a["right"] for a in answers), "asked": len(answers)},
        "first_token_ms": _median(a["first_token_ms"] for a in answers),
        "tokens_per_second": _median(a["tokens_per_second"] for a in answers if a["tokens"] > 1),
        "cancel_ms": cancel_time(client),
        "tool_use": {"right": sum(t["right"] for t in tools), "asked": len(tools)},
        "answers": answers,
        "tool_trials": tools,
    }
    print_report(data)
    if args.json:
        write_json(data, args.json)
    return data


def ask(client: Any, prompt: str, system: str, max_tokens: int = 200) -> dict[str, Any]:
    """One answer, timed: first token, tokens per second after it."""
    request = converse_request(client.model.model_id, [], prompt, system, max_tokens)
    result = LlmResult()
    sent = time.monotonic()
    first = None
    for _ in text_deltas(iter(client.converse_stream(**request)["stream"]), result):
        first = first or time.monotonic()
    ended = time.monotonic()
    tokens = result.usage.get("outputTokens", 0)
    after_first = ended - (first or ended)
    return {
        "prompt": prompt,
        "text": result.text.strip(),
        "tokens": tokens,
        "first_token_ms": round(((first or ended) - sent) * 1000, 1),
        "tokens_per_second": round((tokens - 1) / after_first, 1) if after_first > 0 else 0.0,
    }


def cancel_time(client: Any) -> float:
    """ms from ``close()`` after the fifth text delta of a long answer to the stream's end."""
    request = converse_request(client.model.model_id, [], LONG_ANSWER, DEFAULT_SYSTEM_PROMPT, 400)
    stream = client.converse_stream(**request)["stream"]
    closed_at = None
    deltas = 0
    for event in stream:
        if "contentBlockDelta" in event:
            deltas += 1
            if deltas == CANCEL_AFTER_DELTAS:
                closed_at = time.monotonic()
                stream.close()
    if closed_at is None:
        raise RuntimeError(f"the long answer ended before {CANCEL_AFTER_DELTAS} text deltas")
    return round((time.monotonic() - closed_at) * 1000, 2)


def tool_trial(client: Any, case: ToolCase) -> dict[str, Any]:
    answer = ask(client, case.prompt, TOOL_PROMPT, max_tokens=80)
    call = _tool_call(answer["text"])
    if case.tool is None:
        right = call is None
    else:
        right = (
            call is not None
            and call.get("name") == case.tool
            and bool((call.get("arguments") or {}).get(case.argument or ""))
        )
    return {"prompt": case.prompt, "text": answer["text"], "call": call, "right": right}


def _tool_call(text: str) -> dict[str, Any] | None:
    """The first JSON object in ``text`` that names a tool, if any."""
    for match in re.finditer(r"\{.*\}", text, re.DOTALL):
        try:
            found = json.loads(match.group(0))
        except ValueError:
            continue
        if isinstance(found, dict) and "name" in found:
            return found
    return None


def _median(values: Any) -> float:
    listed = list(values)
    return round(statistics.median(listed), 1) if listed else 0.0


def print_report(data: dict[str, Any]) -> None:
    quality, tools = data["quality"], data["tool_use"]
    print(
        f"\nlocal LLM {data['model']} on {data['threads']} threads (loaded in "
        f"{data['load_s']:.1f} s)"
    )
    print(f"  factual questions right   {quality['right']}/{quality['asked']}")
    print(f"  time to first token       {data['first_token_ms']:.0f} ms (median)")
    print(f"  tokens per second         {data['tokens_per_second']:.0f} (median, after the first)")
    print(f"  stop after close()        {data['cancel_ms']:.1f} ms")
    print(f"  tool use right            {tools['right']}/{tools['asked']}")
