"""The speech link: messages between a client (the worker, a test, a CLI) and the speech server.

This is the one definition of the wire contract that both sides import: the client
(``voicewire.speech_link``: the Lambda worker, the CLIs) builds its messages with these models and
reads the server's frames with ``read_server_frame``; the container validates the messages with
``parse_client_message`` and builds its frames with the same models. A field added here (word
timings, say) reaches both sides at once. ``docs/protocol.md`` describes the same contract for
people; keep the two in step.

Client -> server, as text *or binary* WebSocket frames (SageMaker forwards every request part as
a binary frame, so a server must decode bytes as UTF-8)::

    {"text": "Hello there.", "voice": "af_heart", "speed": 1.0, "request_id": "r1"}
    {"type": "cancel", "request_id": "r1"}      # or no request_id: cancel everything pending
    {"type": "ping", "request_id": "p1"}        # answered in turn by {"type": "pong", ...}
    {"type": "close"}

Server -> client: a ``synthesis_start`` text frame, raw PCM s16le 24 kHz mono binary frames, a
``synthesis_complete`` text frame; ``error`` text frames for bad input. The session stays open.

A request with ``"word_timings": true`` also gets ``words`` text frames, each before the first
audio frame it describes: the written words and the samples they are spoken in, counted from the
start of that request's audio (all its binary frames, concatenated)::

    {"type": "words", "request_id": "r1", "words": [{"text": "Hello", "start": 7560, "end": 14400}]}
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    TypeAdapter,
    field_validator,
)

from voicewire.error_codes import ErrorCode, ProtocolError
from voicewire.field_rules import (
    json_kind,
    known_voice,
    shown,
    speakable,
    speed_in_range,
    validate_or_raise,
)

# Audio on the speech link: what the binary frames carry.
SAMPLE_RATE = 24_000
CHANNELS = 1
SAMPLE_WIDTH = 2  # bytes, signed 16-bit little-endian
AUDIO_ENCODING = "pcm_s16le"

# Input limits, documented in docs/protocol.md.
MAX_TEXT_CHARS = 4_000
MAX_REQUEST_ID_CHARS = 128
MAX_PENDING_REQUESTS = 64  # per session: queued plus running
# A request of MAX_TEXT_CHARS is at most 16 KB of UTF-8; anything far larger is refused before
# it is parsed (the client link has API Gateway's own 128 KB limit, the same figure).
MAX_MESSAGE_BYTES = 128 * 1024


# --- client -> server ------------------------------------------------------------------------

RequestId = Annotated[str, Field(min_length=1, max_length=MAX_REQUEST_ID_CHARS)]


class SynthesisRequest(BaseModel):
    """One text to speak. Unknown fields are ignored so that older servers accept newer clients.

    Validation needs the server's voices: pass ``context={"voices": {...}}``; without it any
    voice name is accepted (a client building a request cannot know the server's list).
    """

    model_config = ConfigDict(extra="ignore", frozen=True)

    type: Literal["synthesize"] | None = None
    text: str
    voice: str | None = None
    # Strict types: "1.5" or true is a client bug worth reporting, not something to coerce.
    speed: float = Field(default=1.0, strict=True)
    request_id: RequestId | None = None
    fast_start: StrictBool = True
    # Whether this text begins an answer (the engine weighs a new answer against what it can
    # speak in time: ``speech_busy``) or continues one (never refused). Absent: a fast-start
    # text on a session that is not speaking begins one.
    starts_answer: StrictBool | None = None
    # ``words`` frames for this request (off by default: a client that asks knows the frame).
    word_timings: StrictBool = False

    @field_validator("text")
    @classmethod
    def _text_is_speakable(cls, text: str) -> str:
        return speakable(
            text, MAX_TEXT_CHARS, ErrorCode.MISSING_TEXT, ErrorCode.TEXT_TOO_LONG, "text"
        )

    _speed = field_validator("speed")(lambda cls, speed: speed_in_range(speed))
    _voice = field_validator("voice")(lambda cls, voice, info: known_voice(voice, info))


class CancelMessage(BaseModel):
    """Drop a queued or running request; without ``request_id``, every pending request."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    type: Literal["cancel"]
    request_id: RequestId | None = None


class CloseMessage(BaseModel):
    """End the session once every earlier message is answered (close code 1000)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    type: Literal["close"]


class PingMessage(BaseModel):
    """Answered in turn with a ``pong``: proves the whole path to the server (and, over
    SageMaker, the front door and its sidecar) still carries messages both ways. A client checks
    a kept-open session with it before reusing it."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    type: Literal["ping"]
    request_id: RequestId | None = None


ClientMessage = SynthesisRequest | CancelMessage | PingMessage | CloseMessage


# --- server -> client ------------------------------------------------------------------------


class SynthesisStart(BaseModel):
    type: Literal["synthesis_start"] = "synthesis_start"
    request_id: str
    encoding: str = AUDIO_ENCODING
    sample_rate: int = SAMPLE_RATE
    channels: int = CHANNELS


CompletionStatus = Literal["complete", "cancelled", "failed"]


class SynthesisComplete(BaseModel):
    type: Literal["synthesis_complete"] = "synthesis_complete"
    request_id: str
    status: CompletionStatus = "complete"
    audio_seconds: float
    audio_bytes: int
    chunks: int
    first_audio_ms: float | None = None  # None (left out of the frame): no audio was sent
    elapsed_ms: float


class TimedWord(BaseModel):
    """A written word and the samples it is spoken in, ``[start, end)``, counted from the start
    of its request's audio (24 kHz)."""

    text: str
    start: int = Field(ge=0)
    end: int = Field(ge=0)


class WordsFrame(BaseModel):
    """The words of the request's audio that follows: sent before the first audio frame they
    describe, one frame per engine batch (a chunk's words, or a long chunk's 510-phoneme part)."""

    type: Literal["words"] = "words"
    request_id: str
    words: list[TimedWord]


class Pong(BaseModel):
    type: Literal["pong"] = "pong"
    request_id: str | None = None


class ErrorFrame(BaseModel):
    type: Literal["error"] = "error"
    # A client reads a code it does not know (from a newer server) as the plain string it is.
    code: ErrorCode | str
    message: str
    request_id: str | None = None

    @classmethod
    def of(cls, error: ProtocolError) -> ErrorFrame:
        """The frame that tells the client of bad input: its code, its sentence, its request."""
        return cls(code=error.code, message=error.message, request_id=error.request_id)


ServerFrame = SynthesisStart | SynthesisComplete | WordsFrame | Pong | ErrorFrame
SERVER_FRAME_TYPES = frozenset(
    frame.model_fields["type"].default for frame in get_args(ServerFrame)
)
_SERVER_FRAME: TypeAdapter[ServerFrame] = TypeAdapter(
    Annotated[ServerFrame, Field(discriminator="type")]
)


def read_server_frame(control: dict[str, Any]) -> ServerFrame | None:
    """A control frame from the server, validated by the models the server built it with.

    ``None`` for a type this client does not know (a newer server's), which a reader skips; a
    known type with a missing or mistyped field raises pydantic's ``ValidationError``. Fields
    this client does not know are ignored, so a server may add some.
    """
    if control.get("type") not in SERVER_FRAME_TYPES:
        return None
    return _SERVER_FRAME.validate_python(control)


def dump_frame(frame: BaseModel) -> str:
    """Serialize a control frame; ``None`` fields are left out to keep frames small."""
    return frame.model_dump_json(exclude_none=True)


# --- parsing ---------------------------------------------------------------------------------


def decode_message_bytes(payload: bytes) -> str:
    """Decode a binary frame's payload (what SageMaker delivers) as UTF-8."""
    try:
        return payload.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ProtocolError(
            ErrorCode.INVALID_UTF8,
            f"binary frame is not UTF-8 text (bad byte at offset {error.start})",
        ) from None


class _NotStrictJson(ValueError):
    """A message the standard library would accept but JSON (RFC 8259) leaves undefined."""


def _refuse_constant(name: str) -> None:
    raise _NotStrictJson(f"{name} is not a JSON value")


def _refuse_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # A repeated key is ambiguous: API Gateway's route selection and this parser could read
    # different values from one message, so it is refused rather than resolved.
    value: dict[str, Any] = {}
    for key, item in pairs:
        if key in value:
            raise _NotStrictJson(f"key {shown(key)} appears twice in one object")
        value[key] = item
    return value


def _has_lone_surrogate(value: object) -> bool:
    """Whether a string anywhere in ``value`` (keys included) holds a lone UTF-16 surrogate
    (a ``\\ud800`` escape), which is not a character and cannot be encoded to send back."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def load_json_object(text: str) -> dict[str, Any]:
    """Parse a message body that must be a JSON object, strictly: no NaN or Infinity, no
    repeated key, no lone surrogate; nesting too deep or a number too long is ``invalid_json``
    rather than an exception escaping from the parser."""
    try:
        value = json.loads(
            text, parse_constant=_refuse_constant, object_pairs_hook=_refuse_duplicate_keys
        )
    except json.JSONDecodeError as error:
        raise ProtocolError(
            ErrorCode.INVALID_JSON,
            f"message is not JSON ({error.msg} at line {error.lineno} column {error.colno})",
        ) from None
    except _NotStrictJson as error:
        raise ProtocolError(
            ErrorCode.INVALID_JSON, f"message is not strict JSON: {error}"
        ) from None
    except RecursionError:
        raise ProtocolError(ErrorCode.INVALID_JSON, "message is nested too deeply") from None
    except ValueError as error:  # an integer of more than 4,300 digits (CVE-2020-10735 guard)
        raise ProtocolError(
            ErrorCode.INVALID_JSON, f"message has a number too long: {error}"
        ) from None
    if not isinstance(value, dict):
        raise ProtocolError(
            ErrorCode.NOT_AN_OBJECT,
            f"message must be a JSON object, not {json_kind(value)}",
        )
    if _has_lone_surrogate(value):
        raise ProtocolError(
            ErrorCode.INVALID_UTF8,
            "a string in the message holds a lone UTF-16 surrogate escape (such as \\ud800), "
            "which is not a Unicode character",
        )
    return value


def parse_client_message(raw: str | bytes, voices: frozenset[str] | None = None) -> ClientMessage:
    """Turn one WebSocket frame into a message, or raise ``ProtocolError`` with a stable code."""
    size = len(raw) if isinstance(raw, bytes) else len(raw.encode("utf-8", "surrogatepass"))
    if size > MAX_MESSAGE_BYTES:
        raise ProtocolError(
            ErrorCode.MESSAGE_TOO_LARGE,
            f"the message has {size} bytes; the limit is {MAX_MESSAGE_BYTES}",
        )
    text = decode_message_bytes(raw) if isinstance(raw, bytes) else raw
    body = load_json_object(text)
    kind = body.get("type")
    if kind is None or kind == "synthesize":
        return validate_synthesis_request(body, voices)
    request_id = _request_id_of(body)
    if kind == "cancel":
        return _validate(CancelMessage, body, None, request_id)
    if kind == "ping":
        return _validate(PingMessage, body, None, request_id)
    if kind == "close":
        return _validate(CloseMessage, body, None, request_id)
    raise ProtocolError(
        ErrorCode.UNKNOWN_TYPE,
        f"unknown message type {shown(kind)}; "
        "expected a text to speak, 'cancel', 'ping' or 'close'",
        request_id,
    )


def validate_synthesis_request(
    body: dict[str, Any], voices: frozenset[str] | None = None
) -> SynthesisRequest:
    """Validate a synthesis request body (also used by ``POST /invocations``)."""
    return _validate(SynthesisRequest, body, voices, _request_id_of(body))


def _validate[M: BaseModel](
    model: type[M], body: dict[str, Any], voices: frozenset[str] | None, request_id: str | None
) -> M:
    return validate_or_raise(model, body, request_id, voices, {"text": ErrorCode.MISSING_TEXT})


def _request_id_of(body: dict[str, Any]) -> str | None:
    value = body.get("request_id")
    return value if isinstance(value, str) and 0 < len(value) <= MAX_REQUEST_ID_CHARS else None
