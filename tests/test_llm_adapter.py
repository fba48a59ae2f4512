"""Text deltas from converse_stream: real boto3 parsing of event streams, and the replay client."""

from __future__ import annotations

import json
import threading

import boto3
import pytest
from botocore.awsrequest import AWSResponse
from eventstream_encoding import RawEventStream, encode_message

from functions.adapters.llm import LlmError, LlmResult, converse_request, stream_text
from functions.adapters.replay_llm import RECORDINGS_DIR, Recording, ReplayBedrockClient
from voicewire.error_codes import ErrorCode


def event(kind: str, body: dict) -> bytes:
    headers = {":event-type": kind, ":content-type": "application/json", ":message-type": "event"}
    return encode_message(headers, json.dumps(body).encode())


def exception(kind: str, message: str) -> bytes:
    headers = {
        ":exception-type": kind,
        ":content-type": "application/json",
        ":message-type": "exception",
    }
    return encode_message(headers, json.dumps({"message": message}).encode())


def bedrock_answering(messages: list[bytes], status: int = 200, error: dict | None = None):
    """A real boto3 bedrock-runtime client whose HTTP layer answers with these bytes."""
    client = boto3.client(
        "bedrock-runtime", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="y"
    )

    def answer(request, **_):
        if error is not None:
            body = json.dumps(error).encode()
            return AWSResponse(
                request.url, status, {"x-amzn-errortype": error["__type"]}, RawEventStream([body])
            )
        headers = {"content-type": "application/vnd.amazon.eventstream"}
        return AWSResponse(request.url, 200, headers, RawEventStream(messages))

    client.meta.events.register("before-send.bedrock-runtime.ConverseStream", answer)
    return client


def delta(text: str) -> bytes:
    return event("contentBlockDelta", {"delta": {"text": text}, "contentBlockIndex": 0})


async def collect(client, prompt="Hi", stop=None):
    result = LlmResult()
    texts = [
        text
        async for text in stream_text(client, converse_request("model", [], prompt), result, stop)
    ]
    return texts, result


async def test_only_text_deltas_are_spoken_and_the_stop_reason_is_kept():
    client = bedrock_answering(
        [
            event("messageStart", {"role": "assistant"}),
            event(
                "contentBlockDelta",
                {"delta": {"reasoningContent": {"text": "hmm"}}, "contentBlockIndex": 0},
            ),
            delta("Hello"),
            event(
                "contentBlockDelta", {"delta": {"toolUse": {"input": "{}"}}, "contentBlockIndex": 1}
            ),
            delta(" there."),
            event("contentBlockStop", {"contentBlockIndex": 0}),
            event("messageStop", {"stopReason": "max_tokens"}),
            event(
                "metadata",
                {
                    "usage": {"inputTokens": 3, "outputTokens": 2, "totalTokens": 5},
                    "metrics": {"latencyMs": 9},
                },
            ),
        ]
    )
    texts, result = await collect(client)
    assert texts == ["Hello", " there."]
    assert result.stop_reason == "max_tokens" and result.text == "Hello there."
    assert result.usage["outputTokens"] == 2


async def test_throttling_inside_the_stream_is_llm_throttled():
    client = bedrock_answering([delta("Let me"), exception("throttlingException", "slow down")])
    with pytest.raises(LlmError) as raised:
        await collect(client)
    assert raised.value.code == ErrorCode.LLM_THROTTLED


async def test_a_model_stream_error_is_llm_failed():
    client = bedrock_answering([delta("Let me"), exception("modelStreamErrorException", "broke")])
    with pytest.raises(LlmError) as raised:
        await collect(client)
    assert raised.value.code == ErrorCode.LLM_FAILED


async def test_throttling_of_the_call_itself_is_llm_throttled():
    client = bedrock_answering(
        [], status=429, error={"__type": "ThrottlingException", "message": "Rate exceeded"}
    )
    with pytest.raises(LlmError) as raised:
        await collect(client)
    assert raised.value.code == ErrorCode.LLM_THROTTLED


def test_every_recording_is_bedrock_shaped_and_paced_like_a_model():
    recordings = [Recording.load(path) for path in sorted(RECORDINGS_DIR.glob("*.json"))]
    assert {"short", "four_sentences", "long_markdown", "default"} <= {r.name for r in recordings}
    for recording in recordings:
        times = [at for at, _ in recording.events]
        assert times == sorted(times)
        deltas = [at for at, e in recording.events if "contentBlockDelta" in e]
        assert 0.4 <= deltas[0] <= 0.6
        rate = (len(deltas) - 1) / (deltas[-1] - deltas[0])
        assert 40 <= rate <= 80, (recording.name, rate)
        for _, e in recording.events:
            assert len(e) == 1  # converse_stream events are one-key dicts
    default = next(r for r in recordings if r.name == "default")
    assert default.events[-1][0] - default.events[2][0] >= 3.0  # text streams for 3+ seconds
    assert len(default.text.split(". ")) >= 4


def test_prompts_choose_their_recording():
    replay = ReplayBedrockClient(pace=0)
    assert replay.choose("Hello, who are you?").name == "short"
    assert replay.choose("Tell me about the release plan").name == "long_markdown"
    assert replay.choose("Why is Kokoro fast?").name == "four_sentences"
    assert replay.choose("What is the capital of Peru?").name == "default"


async def test_replay_goes_through_the_same_adapter():
    replay = ReplayBedrockClient(pace=0)
    texts, result = await collect(replay, "What is the release plan?")
    assert "".join(texts) == replay.choose("release plan").text == result.text
    assert result.stop_reason == "end_turn"
    assert replay.requests[0]["messages"][-1]["content"][0]["text"] == "What is the release plan?"


async def test_replayed_throttling_is_llm_throttled():
    with pytest.raises(LlmError) as raised:
        await collect(ReplayBedrockClient(pace=0), "please [throttle] now")
    assert raised.value.code == ErrorCode.LLM_THROTTLED


async def test_stopping_ends_the_stream_early():
    stop = threading.Event()
    replay = ReplayBedrockClient(pace=0.05)
    result = LlmResult()
    seen = []
    async for text in stream_text(replay, converse_request("m", [], "anything"), result, stop):
        seen.append(text)
        if len(seen) == 3:
            stop.set()
            break
    assert len(seen) == 3
    assert len(result.text) < len(replay.default.text)
