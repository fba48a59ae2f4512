"""A ``converse_stream`` call to Bedrock: the client (its timeouts and retries) and the request
(the history, the prompt, the system prompt and tools, prompt caching, the output limit).

The answer is read by ``functions.adapters.converse_events`` (what the stream says), on a thread
of ``functions.adapters.llm`` (without blocking the event loop); ``ReplayBedrockClient`` and the
local LLM answer the same request as Bedrock does.
"""

from __future__ import annotations

from typing import Any, Protocol

import boto3
from botocore.config import Config

from functions.conversation.history import closed

# The most tokens one answer may have. Without a limit, each request reserves the model's maximum
# output against the account's tokens-per-minute quota (so far fewer turns fit in it), answers are
# unbounded (a spoken answer should be short), a batch answer can exceed API Gateway's 128 KB
# WebSocket message limit, and the stored history grows toward DynamoDB's 400 KB item limit.
# 512 tokens is about 380 English words: some three minutes of speech.
DEFAULT_MAX_OUTPUT_TOKENS = 512

BEDROCK_CONFIG = Config(
    # A TCP + TLS handshake to the regional endpoint takes milliseconds from Lambda; 2 s means the
    # endpoint is unreachable, and failing fast leaves time for a retry within the turn (botocore's
    # default is 60 s, longer than a person waits for a voice to start).
    connect_timeout=2,
    # The longest gap allowed between bytes of the answer, including the wait for the first token
    # (the model reads the whole prompt first). Models stream their first token within a few
    # seconds and then many per second; 20 s of silence is a stuck stream, not a slow model.
    read_timeout=20,
    # Standard mode retries throttling and transient errors with backoff and a retry quota, so a
    # brown-out is not multiplied by retries; 3 attempts in all (the first and 2 retries) is its
    # default, written out to be explicit. ``total_max_attempts``, not ``max_attempts``: in a
    # client Config, botocore reads ``max_attempts`` as the number of *retries* (3 would make 4).
    # Retries happen only before the stream starts: an error mid-stream is final for the turn.
    retries={"mode": "standard", "total_max_attempts": 3},
    # A Lambda environment reuses its connection across invocations, with idle gaps between turns:
    # keepalive probes keep NAT and load balancers from dropping it silently.
    tcp_keepalive=True,
)


class ConverseStreamClient(Protocol):
    """The one method of boto3's ``bedrock-runtime`` client the pipeline uses."""

    def converse_stream(self, **kwargs: Any) -> dict[str, Any]: ...


def bedrock_client(config: Config | None = None, **client_kwargs: Any) -> ConverseStreamClient:
    """A ``bedrock-runtime`` client with ``BEDROCK_CONFIG``; build one per Lambda environment.

    A client is slow to build (it loads the service model) and keeps its connection pool, so one
    per environment reuses the TLS connection across turns. ``config`` overrides single values of
    ``BEDROCK_CONFIG`` (tests shorten timeouts); ``client_kwargs`` go to ``boto3.client``
    (``region_name``, ``endpoint_url``, ...).
    """
    merged = BEDROCK_CONFIG if config is None else BEDROCK_CONFIG.merge(config)
    return boto3.client("bedrock-runtime", config=merged, **client_kwargs)


def converse_request(
    model_id: str,
    history: list[dict[str, Any]],
    prompt: str,
    system: str | None = None,
    max_tokens: int = DEFAULT_MAX_OUTPUT_TOKENS,
    tool_config: dict[str, Any] | None = None,
    *,
    cache_prompt: bool = False,
    latency: str = "standard",
) -> dict[str, Any]:
    """``converse_stream`` arguments for a prompt after a conversation history.

    ``tool_config``: the tools the model may call (``functions.tools``). ``cache_prompt`` ends
    the system prompt and the tool definitions with a ``cachePoint``, so a model that supports
    prompt caching reads them from its cache on every later turn (they are the same on every
    turn: the history changes after them). ``latency="optimized"``: ``performanceConfig``'s
    latency-optimized inference, on the models and regions that offer it.
    """
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be at least 1, not {max_tokens}")
    request: dict[str, Any] = {
        "modelId": model_id,
        "messages": with_prompt(history, prompt),
        "inferenceConfig": {"maxTokens": max_tokens},
    }
    cache_point = [{"cachePoint": {"type": "default"}}] if cache_prompt else []
    if system:
        request["system"] = [{"text": system}, *cache_point]
    if tool_config and tool_config.get("tools"):
        request["toolConfig"] = {**tool_config, "tools": [*tool_config["tools"], *cache_point]}
    if latency != "standard":
        request["performanceConfig"] = {"latency": latency}
    return request


def with_prompt(history: list[dict[str, Any]], prompt: str) -> list[dict[str, Any]]:
    """The messages of a request: the history (closed), then the prompt as the user's."""
    return [*closed(history), {"role": "user", "content": [{"text": prompt}]}]
