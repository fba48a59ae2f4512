"""The client link: a browser or wscat and the API Gateway WebSocket API (``docs/protocol.md``).

Client -> server: JSON text frames, routed on ``action`` (API Gateway's
``$request.body.action``)::

    {"action": "ask", "prompt": "What is Kokoro?", "mode": "bidi", "voice": "af_heart"}
    {"action": "speak", "text": "Hello there."}
    {"action": "cancel", "turn_id": "t-1", "heard_ms": 2350}
    {"action": "voices"}
    {"action": "history"}

Server -> client: JSON control frames (``turn_start``, ``text_delta``, ``sentence``, ``words``,
``turn_end``, ``error``, and ``voices`` and ``history`` answering those actions) and binary
audio frames with a 9-byte header::

    byte 0      0xA1 (audio frame, protocol v1; never "{")
    bytes 1-4   turn number, uint32 big-endian (the ``turn`` of ``turn_start``)
    bytes 5-8   frame sequence within the turn, uint32 big-endian, from 0
    bytes 9-    audio in the turn's encoding (pcm_s16le, 24 kHz, mono)

Every frame is at most 32 KB, API Gateway's frame limit. Connections opened with
``?audio=base64``, and every connection of an API whose default is base64 (a deployment not
checked to carry binary frames), get ``{"type": "audio", "turn", "seq", "data"}`` text frames
instead; ``turn_start``'s ``audio.delivery`` says which.
"""

from __future__ import annotations

import base64
import json
import math
import re
import struct
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator
from pydantic_core import PydanticCustomError

from voicewire.error_codes import ErrorCode, ProtocolError
from voicewire.field_rules import known_voice, shown, speakable, speed_in_range, validate_or_raise
from voicewire.speech_in.transcribe_url import LANGUAGE_CODE, MAX_SAMPLE_RATE, MIN_SAMPLE_RATE
from voicewire.speech_protocol import (
    AUDIO_ENCODING,
    CHANNELS,
    MAX_TEXT_CHARS,
    SAMPLE_RATE,
    load_json_object,
)

AUDIO_FRAME_MARKER = 0xA1
AUDIO_HEADER = struct.Struct(">BII")
MAX_FRAME_BYTES = 32 * 1024  # API Gateway WebSocket frame limit
MAX_MESSAGE_BYTES = 128 * 1024  # API Gateway WebSocket message limit (client -> server too)
MAX_AUDIO_PAYLOAD = MAX_FRAME_BYTES - AUDIO_HEADER.size
# A base64 audio frame is JSON text of at most 32 KB: 4/3 expansion plus the envelope.
MAX_BASE64_AUDIO_PAYLOAD = 24_000
MAX_PROMPT_CHARS = 4_000
_TURN_ID = re.compile(r"[A-Za-z0-9._:-]{1,64}")

TurnMode = Literal["bidi", "batch"]
# Where a turn is, one set for the wire and for the conversation's record of it: ``starting``
# (admitted, its task or job not yet running), ``running``, then how it ended, which is what
# ``turn_end`` says (``EndedStatus``) and never changes once written.
EndedStatus = Literal["complete", "cancelled", "failed"]
TurnStatus = Literal["starting", "running", EndedStatus]
ENDED_STATUSES: tuple[EndedStatus, ...] = get_args(EndedStatus)
AudioDelivery = Literal["binary", "base64"]


# --- client -> server ------------------------------------------------------------------------


def _check_turn_id(cls: type, value: str | None) -> str | None:
    if value is not None and not _TURN_ID.fullmatch(value):
        raise PydanticCustomError(
            ErrorCode.INVALID_FIELD.value,
            "turn_id must be 1-64 characters of letters, digits, '.', '_', ':' or '-'",
        )
    return value


class _Action(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


def _check_heard_ms(cls: type, value: object) -> float | None:
    """The client's playback position in the interrupted turn's audio: a finite number >= 0.
    One code for every bad value (a string, a boolean, a negative number, or a NaN from a
    lenient parser), checked before pydantic coerces anything."""
    if value is None:
        return None
    number = value if isinstance(value, int | float) and not isinstance(value, bool) else None
    if number is None or not math.isfinite(number) or number < 0:
        raise PydanticCustomError(
            ErrorCode.INVALID_HEARD_MS.value,
            "heard_ms must be a number of milliseconds >= 0, not {value}",
            {"value": shown(value)},
        )
    return float(number)


class _SpeechOptions(_Action):
    voice: str | None = None
    speed: float = Field(default=1.0, strict=True)
    turn_id: str | None = None
    # A barge-in's word on the turn it interrupts: how much of its audio was heard (ms).
    heard_ms: float | None = None
    # ``words`` frames for this turn's audio (on by default; the speech server is then asked
    # for its word timings).
    word_timings: StrictBool = True

    _speed = field_validator("speed")(lambda cls, speed: speed_in_range(speed))
    _voice = field_validator("voice")(lambda cls, voice, info: known_voice(voice, info))
    _turn_id = field_validator("turn_id")(_check_turn_id)
    _heard_ms = field_validator("heard_ms", mode="before")(_check_heard_ms)


TextDeltas = Literal["live", "sentence"]


class AskAction(_SpeechOptions):
    """Ask the agent; its answer is spoken while it is written (``bidi``) or after (``batch``)."""

    action: Literal["ask"]
    prompt: str
    mode: str = "bidi"
    # How the answer's text is sent: "live" coalesces text_delta frames to about one per
    # 100 ms; "sentence" sends them only as each sentence is cut (fewer posts, same text).
    text_deltas: str = "live"

    @field_validator("text_deltas")
    @classmethod
    def _text_deltas_is_known(cls, value: str) -> TextDeltas:
        if value not in ("live", "sentence"):
            raise PydanticCustomError(
                ErrorCode.INVALID_FIELD.value,
                "text_deltas {value} is not 'live' or 'sentence'",
                {"value": shown(value)},
            )
        return value  # type: ignore[return-value]

    @field_validator("prompt")
    @classmethod
    def _prompt_is_present(cls, prompt: str) -> str:
        return speakable(
            prompt, MAX_PROMPT_CHARS, ErrorCode.MISSING_PROMPT, ErrorCode.PROMPT_TOO_LONG, "prompt"
        )

    @field_validator("mode")
    @classmethod
    def _mode_is_known(cls, mode: str) -> TurnMode:
        if mode not in ("bidi", "batch"):
            raise PydanticCustomError(
                ErrorCode.INVALID_MODE.value,
                "mode {mode} is not 'bidi' or 'batch'",
                {"mode": shown(mode)},
            )
        return mode  # type: ignore[return-value]


class SpeakAction(_SpeechOptions):
    """Speak a given text: synthesis only, no LLM."""

    action: Literal["speak"]
    text: str

    @field_validator("text")
    @classmethod
    def _text_is_present(cls, text: str) -> str:
        return speakable(
            text, MAX_TEXT_CHARS, ErrorCode.MISSING_TEXT, ErrorCode.TEXT_TOO_LONG, "text"
        )


class CancelAction(_Action):
    """Cancel the connection's active turn (or the named one, if it is the active one)."""

    action: Literal["cancel"]
    turn_id: str | None = None
    # How much of the turn's audio the client played (ms): the agent remembers only that much.
    heard_ms: float | None = None

    _turn_id = field_validator("turn_id")(_check_turn_id)
    _heard_ms = field_validator("heard_ms", mode="before")(_check_heard_ms)


class VoicesAction(_Action):
    """List the voices ``ask`` and ``speak`` accept."""

    action: Literal["voices"]


class HistoryAction(_Action):
    """Show what the agent will remember of this connection's conversation."""

    action: Literal["history"]


class ListenAction(_Action):
    """Ask for a way to speak to the agent: the answer (a ``listen`` frame) is a presigned URL of
    Amazon Transcribe streaming's WebSocket API (or the local stack's), valid for a few minutes,
    to which the client streams its microphone; the final transcript comes back as an ``ask``.
    The audio never passes through voicewire."""

    action: Literal["listen"]
    language_code: str = "en-US"
    sample_rate: int = Field(default=16_000, strict=True)

    @field_validator("language_code")
    @classmethod
    def _language_code_is_shaped(cls, value: str) -> str:
        if not LANGUAGE_CODE.fullmatch(value):
            raise PydanticCustomError(
                ErrorCode.INVALID_FIELD.value,
                "language_code {value} is not a language code such as 'en-US'",
                {"value": shown(value)},
            )
        return value

    @field_validator("sample_rate")
    @classmethod
    def _sample_rate_in_range(cls, value: int) -> int:
        if not MIN_SAMPLE_RATE <= value <= MAX_SAMPLE_RATE:
            raise PydanticCustomError(
                ErrorCode.INVALID_FIELD.value,
                "sample_rate {value} is outside 8000-48000 Hz (Transcribe's range)",
                {"value": shown(value)},
            )
        return value


ClientAction = AskAction | SpeakAction | CancelAction | VoicesAction | HistoryAction | ListenAction
_ACTIONS: dict[str, type[_Action]] = {
    "ask": AskAction,
    "speak": SpeakAction,
    "cancel": CancelAction,
    "voices": VoicesAction,
    "history": HistoryAction,
    "listen": ListenAction,
}
# The route keys of the WebSocket API: API Gateway routes on them (stacks/voice_api.py) and so
# does the local gateway; anything else goes to $default.
CLIENT_ACTIONS: tuple[str, ...] = tuple(_ACTIONS)


def parse_action(body: str | None, voices: frozenset[str] | None = None) -> ClientAction:
    """Validate a client message, or raise ``ProtocolError`` with a stable code."""
    if body is None or not body.strip():
        raise ProtocolError(ErrorCode.INVALID_JSON, "the message is empty; send a JSON object")
    if len(body.encode("utf-8")) > MAX_MESSAGE_BYTES:
        raise ProtocolError(ErrorCode.MESSAGE_TOO_LARGE, "the message is larger than 128 KB")
    data = load_json_object(body)
    action = data.get("action")
    given = data.get("turn_id")
    turn_id = given if isinstance(given, str) and _TURN_ID.fullmatch(given) else None
    model = _ACTIONS.get(action) if isinstance(action, str) else None
    if model is None:
        raise ProtocolError(
            ErrorCode.UNKNOWN_ACTION,
            f"unknown action {shown(action)}; expected one of: {', '.join(CLIENT_ACTIONS)}",
            turn_id,
        )
    missing = {"prompt": ErrorCode.MISSING_PROMPT, "text": ErrorCode.MISSING_TEXT}
    return validate_or_raise(model, data, turn_id, voices, missing)  # type: ignore[return-value]


# --- server -> client ------------------------------------------------------------------------


class AudioFormat(BaseModel):
    encoding: str = AUDIO_ENCODING
    sample_rate: int = SAMPLE_RATE
    channels: int = CHANNELS
    # How this connection's audio frames arrive: binary frames, or base64 JSON text frames. A
    # deployed API sends base64 unless its deployment was checked to carry binary frames
    # (``agent-infra check``); ``?audio=`` on the connect URL asks for one.
    delivery: AudioDelivery = "binary"


class TurnStart(BaseModel):
    type: Literal["turn_start"] = "turn_start"
    turn_id: str
    turn: int
    mode: Literal["bidi", "batch", "speak"]
    audio: AudioFormat = Field(default_factory=AudioFormat)


class TextDelta(BaseModel):
    type: Literal["text_delta"] = "text_delta"
    turn_id: str
    seq: int
    text: str


class Sentence(BaseModel):
    type: Literal["sentence"] = "sentence"
    turn_id: str
    index: int
    text: str


class WordTiming(BaseModel):
    """A written word and when it is spoken, ``[start_ms, end_ms)``: milliseconds from the start
    of the turn's audio (all its audio frames, concatenated)."""

    text: str
    start_ms: float
    end_ms: float


class Words(BaseModel):
    """The words of one speech request of the turn (a sentence, a filler, a batch answer), sent
    no later than the first audio frame they describe."""

    type: Literal["words"] = "words"
    turn_id: str
    words: list[WordTiming]


ToolStatus = Literal["ok", "error", "timeout", "cancelled"]


class ToolStart(BaseModel):
    """The agent called a tool; the turn is working on it until the ``tool_end`` of the same
    ``tool_use_id``. ``input`` only when the stack is set to show tool data (it can be private)."""

    type: Literal["tool_start"] = "tool_start"
    turn_id: str
    tool_use_id: str
    name: str
    input: dict[str, Any] | None = None


class ToolEnd(BaseModel):
    type: Literal["tool_end"] = "tool_end"
    turn_id: str
    tool_use_id: str
    name: str
    status: ToolStatus
    ms: float
    result: Any = None  # only when the stack is set to show tool data


class Timings(BaseModel):
    """Milliseconds from the moment the turn was accepted; ``None`` if it never happened."""

    first_text_ms: float | None = None
    first_sentence_ms: float | None = None
    first_audio_ms: float | None = None
    total_ms: float | None = None


class TurnEnd(BaseModel):
    type: Literal["turn_end"] = "turn_end"
    turn_id: str
    status: EndedStatus
    timings: Timings
    audio_bytes: int
    audio_frames: int


class ClientError(BaseModel):
    type: Literal["error"] = "error"
    code: ErrorCode
    message: str
    turn_id: str | None = None


class VoiceInfo(BaseModel):
    name: str
    language: str  # BCP 47, e.g. en-US
    label: str  # e.g. American English
    gender: str | None = None


class ListenOffer(BaseModel):
    """The answer to ``listen``: where to stream the microphone. ``url`` is a presigned
    Transcribe streaming WebSocket URL (``wss://transcribestreaming.REGION.amazonaws.com:8443/
    stream-transcription-websocket?...``, or the local stack's ``ws://``) that opens within
    ``expires_in_s`` seconds; the client sends ``media_encoding`` audio (signed 16-bit
    little-endian mono PCM) at ``sample_rate`` Hz in event-stream ``AudioEvent`` messages and
    reads ``TranscriptEvent`` messages (Transcribe's protocol, docs/protocol.md)."""

    type: Literal["listen"] = "listen"
    url: str
    language_code: str
    sample_rate: int
    media_encoding: Literal["pcm"] = "pcm"
    expires_in_s: int


class VoiceList(BaseModel):
    """The answer to ``voices``: every voice, English first, and the one used by default."""

    type: Literal["voices"] = "voices"
    default_voice: str | None
    voices: list[VoiceInfo]

    @classmethod
    def of(cls, names: frozenset[str] | tuple[str, ...]) -> VoiceList:
        from voicewire.voice_catalog import default_voice, describe_voices

        described = [
            VoiceInfo(name=v.name, language=v.language, label=v.label, gender=v.gender)
            for v in describe_voices(list(names))
        ]
        return cls(default_voice=default_voice(names), voices=described)


class RememberedMessage(BaseModel):
    """One message of the history as a person reads it: tool calls and results left out."""

    role: Literal["user", "assistant"]
    text: str
    # An answer the listener cut short: ``text`` is only what they heard (maybe nothing).
    interrupted: bool = False


class HistoryFrame(BaseModel):
    """The answer to ``history``: what the agent will remember, oldest first."""

    type: Literal["history"] = "history"
    messages: list[RememberedMessage]


ControlFrame = (
    TurnStart
    | TextDelta
    | Sentence
    | Words
    | ToolStart
    | ToolEnd
    | TurnEnd
    | ClientError
    | VoiceList
    | HistoryFrame
)


def dump_control(frame: BaseModel) -> bytes:
    return frame.model_dump_json(exclude_none=True).encode()


def encode_audio_frame(turn: int, seq: int, payload: bytes) -> bytes:
    if len(payload) > MAX_AUDIO_PAYLOAD:
        raise ValueError(f"audio payload of {len(payload)} bytes exceeds {MAX_AUDIO_PAYLOAD}")
    return AUDIO_HEADER.pack(AUDIO_FRAME_MARKER, turn, seq) + payload


def decode_audio_frame(frame: bytes) -> tuple[int, int, bytes]:
    """``(turn, seq, payload)`` of a binary audio frame; ``ValueError`` if it is not one."""
    if len(frame) < AUDIO_HEADER.size or frame[0] != AUDIO_FRAME_MARKER:
        raise ValueError("not a voicewire audio frame")
    _, turn, seq = AUDIO_HEADER.unpack_from(frame)
    return turn, seq, frame[AUDIO_HEADER.size :]


def encode_base64_audio(turn: int, seq: int, payload: bytes) -> bytes:
    if len(payload) > MAX_BASE64_AUDIO_PAYLOAD:
        raise ValueError(
            f"audio payload of {len(payload)} bytes exceeds {MAX_BASE64_AUDIO_PAYLOAD}"
        )
    data = base64.b64encode(payload).decode("ascii")
    return json.dumps({"type": "audio", "turn": turn, "seq": seq, "data": data}).encode()


def split_audio(pcm: bytes, max_payload: int) -> list[bytes]:
    """Cut PCM into payloads of at most ``max_payload`` bytes, never inside a sample."""
    step = max_payload - max_payload % 2
    return [pcm[offset : offset + step] for offset in range(0, len(pcm), step)]
