"""The functions' configuration, from the environment the CDK stack (or the local stack) sets."""

from __future__ import annotations

import os
from dataclasses import dataclass

from voicewire.client_protocol import AudioDelivery


@dataclass(frozen=True)
class Settings:
    table_name: str
    worker_function: str
    speech_target: str  # a ws:// URL (local) or a SageMaker endpoint name
    llm: str  # "bedrock" or "replay"
    bedrock_model_id: str
    token_secret_parameter: str | None  # SSM parameter (SecureString) holding the HMAC secret
    callback_url: str | None  # @connections endpoint; default: from the event's domain and stage
    voices: frozenset[str] | None  # known voices, for validating requests early
    system_prompt: str
    # Keep a speech session open between turns of one execution environment (see
    # functions/adapters/speech_sessions.py for when a kept session is trusted again).
    speech_session_reuse: bool = True
    speech_session_max_idle_seconds: float = 55.0
    # Bedrock's inferenceConfig.maxTokens: a spoken answer of a few sentences needs ~100-300
    # tokens; the limit bounds the tokens-per-minute quota each request reserves, the batch
    # answer's size and the history (see functions/adapters/llm.py).
    max_output_tokens: int = 512
    region: str | None = None  # for the @connections URL when no callback URL is configured
    # "seed": the seed article's pipeline (its regex sentence splitter, whole sentences, no early
    # first chunk), a baseline for ``voicewire bench ttfa`` on the local stack; never deployed.
    baseline: str = "voicewire"
    # A stalled speech server: the longest wait for a sentence's next speech event (its start,
    # first audio, next audio, end) before the turn fails with ``speech_failed``. Above the
    # slowest legitimate chunk: a 320-character chunk decoded whole took ~20 s on 2 loaded CPU
    # cores (the local stack); a GPU endpoint takes well under a second.
    speech_chunk_timeout_seconds: float = 30.0
    # Per-connection limits (docs/security.md). Browser origins allowed to connect (None: any);
    # a connection without an Origin header (not a browser) is held by its ticket alone.
    allowed_origins: frozenset[str] | None = None
    # Turns a connection may start per clock minute: a person asks a few; a script that floods
    # ``ask`` would otherwise start an LLM stream and a synthesis per message.
    max_turns_per_minute: int = 30
    # Audio one turn may send: ~4,000 characters of ``speak`` text last about 4-5 minutes.
    max_speech_seconds_per_turn: float = 360.0
    # How audio reaches a connection that does not ask (``?audio=``): binary frames where that
    # is proven (the local stack; a deployment ``agent-infra check`` found to carry them), else
    # base64 text frames, which every client accepts (the stack's default: AWS documents no
    # frame type for @connections posts).
    audio_delivery: AudioDelivery = "binary"

    @classmethod
    def from_env(cls) -> Settings:
        env = os.environ
        voices = env.get("VOICEWIRE_VOICES", "")
        return cls(
            table_name=env.get("VOICEWIRE_TABLE", "voicewire-sessions"),
            worker_function=env.get("VOICEWIRE_WORKER_FUNCTION", "voicewire-worker"),
            speech_target=env.get("VOICEWIRE_SPEECH_TARGET", "kokoro-82m"),
            llm=env.get("VOICEWIRE_LLM", "bedrock"),
            bedrock_model_id=env.get("VOICEWIRE_BEDROCK_MODEL_ID", ""),
            token_secret_parameter=env.get("VOICEWIRE_TOKEN_SECRET_PARAMETER") or None,
            callback_url=env.get("VOICEWIRE_CALLBACK_URL") or None,
            voices=frozenset(v for v in voices.split(",") if v) or None,
            system_prompt=env.get(
                "VOICEWIRE_SYSTEM_PROMPT",
                "You are a helpful voice assistant. Answer in short spoken sentences.",
            ),
            speech_session_reuse=env.get("VOICEWIRE_SPEECH_SESSION_REUSE", "true").lower()
            not in ("0", "false", "no", "off"),
            speech_session_max_idle_seconds=float(
                env.get("VOICEWIRE_SPEECH_SESSION_MAX_IDLE_SECONDS", "55")
            ),
            max_output_tokens=int(env.get("VOICEWIRE_MAX_OUTPUT_TOKENS", "512")),
            region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION"),
            baseline=env.get("VOICEWIRE_BASELINE", "voicewire"),
            allowed_origins=parse_origins(env.get("VOICEWIRE_ALLOWED_ORIGINS", "")),
            max_turns_per_minute=int(env.get("VOICEWIRE_MAX_TURNS_PER_MINUTE", "30")),
            max_speech_seconds_per_turn=float(
                env.get("VOICEWIRE_MAX_SPEECH_SECONDS_PER_TURN", "360")
            ),
            speech_chunk_timeout_seconds=float(
                env.get("VOICEWIRE_SPEECH_CHUNK_TIMEOUT_SECONDS", "30")
            ),
            audio_delivery=audio_delivery(env.get("VOICEWIRE_AUDIO_DELIVERY", "binary")),
        )


def audio_delivery(value: str) -> AudioDelivery:
    if value not in ("binary", "base64"):
        raise ValueError(f"VOICEWIRE_AUDIO_DELIVERY must be 'binary' or 'base64', not {value!r}")
    return value  # type: ignore[return-value]


def parse_origins(value: str) -> frozenset[str] | None:
    """``https://app.example.com,https://admin.example.com`` as a set of normalized origins;
    None when empty (any origin)."""
    origins = frozenset(normalize_origin(part) for part in value.split(",") if part.strip())
    return origins or None


def normalize_origin(origin: str) -> str:
    """Origins compare case-insensitively and without a trailing slash (RFC 6454)."""
    return origin.strip().rstrip("/").lower()
