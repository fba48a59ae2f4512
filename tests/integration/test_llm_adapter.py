"""Text deltas from converse_stream: real boto3 parsing of event streams, and the replay client.

Most tests use the real client as production builds it (``bedrock_client``) against
``BedrockStandin``, a local HTTP server speaking ConverseStream's wire protocol, so timeouts,
retries, connection errors and closing the stream go through boto3's and urllib3's own code.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator

import boto3
import pytest
from bedrock_standin import BedrockStandin, Script, answer, delta, event, exception
from botocore.awsrequest import AWSResponse
from botocore.config import Config
from eventstream_encoding import RawEventStream

from functions.adapters.bedrock_request import (
    DEFAULT_MAX_OUTPUT_TOKENS,
    bedrock_client,
    converse_request,
)
from functions.adapters.converse_events import LlmResult
from functions.adapters.llm import stream_text
from functions.adapters.llm_errors import LlmError
from functions.adapters.replay_llm import RECORDINGS_DIR, Recording, ReplayBedrockClient
from voicewire.error_codes import ErrorCode

# Generous for a slow, shared CI machine; none of them is a speed target.
DISCONNECT_BOUND_S = 2.0  # from the stop to the server seeing the connection closed
WAIT_S = 10.0  # for something that should happen at once


def bedrock_answering(messages: list[bytes], status: int = 200, error: dict | None = None):
    """A real boto3 bedrock-runtime client whose HTTP layer answers with these bytes."""
    client = boto3.client(
        "bedrock-runtime", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="y"
    )

    def respond(request, **_):
        if error is not None:
            body = json.dumps(error).encode()
            return AWSResponse(
                request.url, status, {"x-amzn-errortype": error["__type"]}, RawEventStream([body])
            )
        headers = {"content-type": "application/vnd.amazon.eventstream"}
        return AWSResponse(request.url, 200, headers, RawEventStream(messages))

    client.meta.events.register("before-send.bedrock-runtime.ConverseStream", respond)
    return client


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


# --- the request ----------------------------------------------------------------------------------


def test_the_request_limits_the_output():
    history = [{"role": "assistant", "content": [{"text": "Earlier."}]}]
    request = converse_request("model", history, "Hi", "Be brief.")  # positional, as callers do
    assert request["inferenceConfig"] == {"maxTokens": DEFAULT_MAX_OUTPUT_TOKENS}
    assert request["system"] == [{"text": "Be brief."}]
    assert request["messages"][0] == history[0]
    assert converse_request("model", [], "Hi", max_tokens=64)["inferenceConfig"]["maxTokens"] == 64
    for nonsense in (0, -5):
        with pytest.raises(ValueError, match="max_tokens"):
            converse_request("model", [], "Hi", max_tokens=nonsense)


# --- the real client against a real HTTP server ---------------------------------------------------


def standin_client(standin_url: str, **config):
    """The client as production builds it, pointed at the stand-in; ``config`` overrides values."""
    return bedrock_client(
        config=Config(**config) if config else None,
        endpoint_url=standin_url,
        region_name="us-east-1",
        aws_access_key_id="x",
        aws_secret_access_key="y",
    )


def test_the_client_has_explicit_timeouts_retries_and_keepalive():
    config = standin_client("http://127.0.0.1:9").meta.config
    assert config.connect_timeout == 2
    assert config.read_timeout == 20
    assert config.retries == {"mode": "standard", "total_max_attempts": 3}  # 2 retries
    assert config.tcp_keepalive is True
    overridden = standin_client("http://127.0.0.1:9", read_timeout=1).meta.config
    assert overridden.read_timeout == 1
    assert overridden.connect_timeout == 2 and overridden.tcp_keepalive is True


async def test_the_answer_streams_through_the_real_client_and_the_limit_reaches_the_server():
    with BedrockStandin(Script(answer("Hello", " there.", stop_reason="max_tokens"))) as standin:
        client = standin_client(standin.url)
        result = LlmResult()
        request = converse_request("my-model", [], "Hi", max_tokens=200)
        texts = [text async for text in stream_text(client, request, result)]
    assert texts == ["Hello", " there."]
    assert result.stop_reason == "max_tokens" and result.usage["outputTokens"] == 2
    assert standin.paths == ["/model/my-model/converse-stream"]
    assert standin.requests[0]["inferenceConfig"] == {"maxTokens": 200}
    assert standin.requests[0]["messages"][-1]["content"] == [{"text": "Hi"}]


async def test_one_client_reuses_its_connection_from_turn_to_turn():
    # Why one client per Lambda environment: the next turn skips the TCP and TLS handshakes.
    with BedrockStandin() as standin:
        client = standin_client(standin.url)
        for prompt in ("One", "Two"):
            request = converse_request("model", [], prompt)
            assert [text async for text in stream_text(client, request, LlmResult())]
    first, second = standin.client_addresses
    assert first == second


def llm_threads(existing: set[threading.Thread]) -> list[threading.Thread]:
    """The adapter's threads (reader and stop watcher) started since ``existing`` was taken."""
    return [
        thread
        for thread in threading.enumerate()
        if thread.name.startswith("llm-stream") and thread not in existing and thread.is_alive()
    ]


async def wait_for(flag: threading.Event) -> bool:
    return await asyncio.to_thread(flag.wait, WAIT_S)


@pytest.fixture
def holding_standin() -> Iterator[BedrockStandin]:
    """Sends the headers at once, then holds the first event far longer than any test runs."""
    with BedrockStandin(Script(answer("Too", " late."), holds={0: 60})) as standin:
        yield standin


async def test_a_stop_before_the_first_token_closes_the_connection(holding_standin):
    existing = set(threading.enumerate())
    stop = threading.Event()
    request = converse_request("model", [], "Hi")
    texts = stream_text(standin_client(holding_standin.url), request, LlmResult(), stop)
    first = asyncio.ensure_future(anext(texts, None))
    assert await wait_for(holding_standin.headers_sent)
    stopped_at = time.monotonic()
    stop.set()  # what the turn does when it is cancelled
    assert await wait_for(holding_standin.disconnected)
    assert holding_standin.disconnected_at - stopped_at < DISCONNECT_BOUND_S
    assert await first is None  # the stream just ends: a stop is no error
    await texts.aclose()
    assert llm_threads(existing) == []


async def test_cancelling_the_consumer_closes_the_connection_and_waits_for_the_reader(
    holding_standin,
):
    existing = set(threading.enumerate())
    request = converse_request("model", [], "Hi")

    async def consume() -> list[str]:
        return [text async for text in stream_text(client, request, LlmResult())]

    client = standin_client(holding_standin.url)
    consumer = asyncio.create_task(consume())
    assert await wait_for(holding_standin.headers_sent)
    cancelled_at = time.monotonic()
    consumer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await consumer
    # The generator's cleanup returned only once the reading thread had ended.
    assert llm_threads(existing) == []
    assert await wait_for(holding_standin.disconnected)
    assert holding_standin.disconnected_at - cancelled_at < DISCONNECT_BOUND_S


async def test_a_stop_closes_the_connection_even_when_nobody_iterates_any_more():
    # The turn's consuming task was cancelled while it waited on something else (speech): the
    # generator stays suspended after a delta and only ``stop`` is set.
    script = Script(answer("Hello", " never."), holds={2: 60})
    with BedrockStandin(script) as standin:
        existing = set(threading.enumerate())
        stop = threading.Event()
        request = converse_request("model", [], "Hi")
        texts = stream_text(standin_client(standin.url), request, LlmResult(), stop)
        assert await anext(texts) == "Hello"
        stopped_at = time.monotonic()
        stop.set()
        assert await wait_for(standin.disconnected)
        assert standin.disconnected_at - stopped_at < DISCONNECT_BOUND_S
        for thread in llm_threads(existing):
            await asyncio.to_thread(thread.join, WAIT_S)
        assert llm_threads(existing) == []
        await texts.aclose()


async def test_a_stop_before_the_response_headers_closes_the_stream_when_they_arrive():
    script = Script(answer("Too", " late."), hold_headers_s=1.0, holds={0: 60})
    with BedrockStandin(script) as standin:
        existing = set(threading.enumerate())
        stop = threading.Event()
        request = converse_request("model", [], "Hi")
        texts = stream_text(standin_client(standin.url), request, LlmResult(), stop)
        first = asyncio.ensure_future(anext(texts, None))
        assert await wait_for(standin.request_received)
        stop.set()  # the reading thread is inside converse_stream, waiting for the headers
        assert await first is None
        await texts.aclose()
        assert llm_threads(existing) == []
        assert standin.headers_sent.is_set()
        assert await wait_for(standin.disconnected)
        assert standin.disconnected_at - standin.headers_sent_at < DISCONNECT_BOUND_S


async def test_the_stream_is_closed_exactly_once_however_many_sides_close_it():
    # Stopped inside converse_stream: the watcher, the hand-over, the reading thread's finally
    # and the generator's cleanup all close; the stream sees one close.
    class CountingStream:
        closes = 0

        def __iter__(self):
            return iter([{"contentBlockDelta": {"delta": {"text": "late"}}}])

        def close(self):
            self.closes += 1

    class GatedClient:
        def __init__(self):
            self.called, self.release, self.stream = threading.Event(), threading.Event(), None

        def converse_stream(self, **_):
            self.called.set()
            self.release.wait(WAIT_S)
            self.stream = CountingStream()
            return {"stream": self.stream}

    client, stop = GatedClient(), threading.Event()
    texts = stream_text(client, converse_request("m", [], "Hi"), LlmResult(), stop)
    first = asyncio.ensure_future(anext(texts, None))
    assert await wait_for(client.called)
    stop.set()
    client.release.set()
    assert await first is None
    await texts.aclose()
    assert client.stream.closes == 1


# --- failures of the connection and the request ---------------------------------------------------

# One attempt, so a failure is not retried three times; a read timeout short enough to wait for.
FAIL_FAST = {"retries": {"mode": "standard", "total_max_attempts": 1}, "read_timeout": 1}


async def failure_of(client, model_id: str = "model") -> LlmError:
    with pytest.raises(LlmError) as raised:
        async for _ in stream_text(client, converse_request(model_id, [], "Hi"), LlmResult()):
            pass
    assert raised.value.code == ErrorCode.LLM_FAILED
    return raised.value


@pytest.mark.parametrize(
    ("script", "meaning"),
    [
        (Script(hold_headers_s=60), "read timeout"),  # botocore's ReadTimeoutError
        (Script(holds={0: 60}), "read timeout"),  # urllib3's, raised while reading the stream
        (Script(holds={2: 60}), "read timeout"),  # the model stalls after a first token
        (Script(hang_up_before_headers=True), "closed the connection"),  # ConnectionClosedError
        (Script(hang_up_after=2), "closed the connection"),  # cut mid-stream: urllib3's error
    ],
    ids=["before-headers", "before-first-event", "mid-stream", "hang-up", "cut-mid-stream"],
)
async def test_a_stalled_or_broken_connection_is_llm_failed(script: Script, meaning: str):
    with BedrockStandin(script) as standin:
        failure = await failure_of(standin_client(standin.url, **FAIL_FAST))
    assert meaning in failure.message


async def test_an_unreachable_endpoint_is_llm_failed():
    with socket.socket() as probe:  # a port nobody listens on: connection refused
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    failure = await failure_of(standin_client(f"http://127.0.0.1:{closed_port}", **FAIL_FAST))
    assert "could not reach" in failure.message


async def test_an_empty_model_id_is_llm_failed_without_a_request():
    with BedrockStandin() as standin:
        failure = await failure_of(standin_client(standin.url, **FAIL_FAST), model_id="")
    assert "invalid" in failure.message and "modelId" in failure.message
    assert standin.requests == []


async def test_a_bug_is_not_disguised_as_a_model_failure():
    class BrokenClient:
        def converse_stream(self, **_):
            raise TypeError("a bug, not the model")

    with pytest.raises(TypeError, match="a bug"):
        async for _ in stream_text(BrokenClient(), converse_request("m", [], "Hi"), LlmResult()):
            pass
