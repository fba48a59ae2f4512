"""The messages on Amazon Transcribe's streaming WebSocket, both ways, and the transcript's JSON.

Every WebSocket frame carries one message in AWS's event-stream encoding (Transcribe developer
guide, "Event stream encoding"): a prelude (total length, headers length, both big-endian uint32)
and its CRC32, the headers, the payload, and a CRC32 of everything before it. What flows:

- client -> Transcribe: ``AudioEvent`` messages, headers ``:content-type:
  application/octet-stream``, ``:event-type: AudioEvent``, ``:message-type: event`` (the guide's
  "Making a WebSocket streaming request"), payload raw audio (for ``pcm``: signed 16-bit
  little-endian mono samples, no WAV header). An ``AudioEvent`` with an empty payload ends the
  stream ("To end the audio data stream, send an empty audio chunk in an
  event-stream-encoded message"); Transcribe then sends its last results and closes.
- Transcribe -> client: ``TranscriptEvent`` messages (``:event-type: TranscriptEvent``,
  ``:message-type: event``), payload the JSON of the API reference's ``TranscriptEvent``; and on a
  failure one terminal ``:message-type: exception`` message (``:exception-type``
  ``BadRequestException``, ``LimitExceededException``, ``InternalFailureException``,
  ``ConflictException``, ``ServiceUnavailableException``) whose payload is ``{"Message": ...}``,
  then a close frame (the guide's "Handling WebSocket streaming errors").

``:content-type`` of what Transcribe sends: the guide's tables say ``application/octet-stream``
for both, but a frame captured from the service (awsdocs/amazon-transcribe-developer-guide#14:
``:exception-type BadRequestException``, ``:content-type application/json``, ``:message-type
exception``, ``{"Message":"Unexpected WebSocket frame received."}``) carries
``application/json``, as every AWS JSON event stream does; so JSON payloads are sent as
``application/json`` here, and the decoder does not insist on either.

Times in the transcript are seconds from the start of the audio stream (the guide's example
output: ``"StartTime": 0.23``); a recent version of the service model documents them as
"milliseconds", which its own examples contradict.

Encoding is ``smithy_aws_event_stream``'s ``EventMessage`` (AWS's Python event-stream code,
which this repo already uses for SageMaker's stream: botocore has no public encoder); decoding is
botocore's ``EventStreamBuffer``, which checks both CRCs. Two libraries, so a round trip checks
one against the other. Decoding first checks the frame's shape itself (one whole message, a
prelude CRC that matches) to say exactly what is wrong with a bad frame.
"""

from __future__ import annotations

import json
import struct
from binascii import crc32
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from botocore.eventstream import ChecksumMismatch, EventStreamBuffer, ParserError
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from smithy_aws_event_stream.events import EventMessage

MESSAGE_TYPE, EVENT_TYPE, EXCEPTION_TYPE, CONTENT_TYPE = (
    ":message-type",
    ":event-type",
    ":exception-type",
    ":content-type",
)
AUDIO_EVENT = "AudioEvent"
TRANSCRIPT_EVENT = "TranscriptEvent"
OCTET_STREAM = "application/octet-stream"
JSON = "application/json"
ExceptionType = Literal[
    "BadRequestException",
    "LimitExceededException",
    "InternalFailureException",
    "ConflictException",
    "ServiceUnavailableException",
]
EXCEPTION_TYPES: tuple[ExceptionType, ...] = (
    "BadRequestException",
    "LimitExceededException",
    "InternalFailureException",
    "ConflictException",
    "ServiceUnavailableException",
)
PRELUDE_BYTES = 12  # total length, headers length, prelude CRC
OVERHEAD_BYTES = 16  # the prelude and the message CRC


class EventStreamFrameError(ValueError):
    """A WebSocket frame that is not one well-formed event-stream message, or not the message
    expected; the message says what is wrong."""


# --- the transcript's JSON (API reference: TranscriptEvent, Transcript, Result, Alternative,
# Item), AWS's field names as aliases ---------------------------------------------------------


class _AwsShape(BaseModel):
    # Python names in code, AWS's names on the wire; fields AWS adds later are ignored.
    model_config = ConfigDict(
        frozen=True, extra="ignore", validate_by_name=True, validate_by_alias=True
    )


class Item(_AwsShape):
    """A word (``pronunciation``) or a punctuation mark, with its times in seconds."""

    start_time: float = Field(alias="StartTime")
    end_time: float = Field(alias="EndTime")
    type: Literal["pronunciation", "punctuation"] = Field(alias="Type")
    content: str = Field(alias="Content")
    vocabulary_filter_match: bool = Field(False, alias="VocabularyFilterMatch")
    # Only with partial-results stabilization: whether the item can still change.
    stable: bool | None = Field(None, alias="Stable")
    confidence: float | None = Field(None, alias="Confidence")
    speaker: str | None = Field(None, alias="Speaker")


class Alternative(_AwsShape):
    transcript: str = Field(alias="Transcript")
    items: tuple[Item, ...] = Field((), alias="Items")


class Result(_AwsShape):
    """One segment's transcription: partial results repeat and grow under one ``result_id``
    until the one with ``is_partial`` false."""

    result_id: str = Field(alias="ResultId")
    start_time: float = Field(alias="StartTime")
    end_time: float = Field(alias="EndTime")
    is_partial: bool = Field(alias="IsPartial")
    alternatives: tuple[Alternative, ...] = Field((), alias="Alternatives")
    channel_id: str | None = Field(None, alias="ChannelId")
    language_code: str | None = Field(None, alias="LanguageCode")


class Transcript(_AwsShape):
    results: tuple[Result, ...] = Field((), alias="Results")


class TranscriptEvent(_AwsShape):
    transcript: Transcript = Field(alias="Transcript")

    def to_json(self) -> bytes:
        """AWS's JSON: its field names, absent fields left out."""
        return self.model_dump_json(by_alias=True, exclude_none=True).encode()


class TranscribeException(Exception):
    """A terminal exception message from Transcribe (or the local endpoint): its
    ``:exception-type`` and its ``Message``. Returned by ``read_result``, raised by whoever
    treats it as the failure it is."""

    def __init__(self, type: str, message: str) -> None:
        super().__init__(f"{type}: {message}")
        self.type, self.message = type, message


@dataclass(frozen=True)
class DecodedMessage:
    """One event-stream message: its headers (name -> value) and its payload."""

    headers: Mapping[str, Any]
    payload: bytes


# --- encoding -----------------------------------------------------------------------------


def encode_message(headers: Mapping[str, str], payload: bytes) -> bytes:
    """One message, headers in the order given (string-valued, as Transcribe's are)."""
    return EventMessage(headers=dict(headers), payload=bytes(payload)).encode()


def audio_event(pcm: bytes) -> bytes:
    """An ``AudioEvent`` carrying ``pcm`` (an empty one ends the stream: ``end_of_stream``)."""
    return encode_message(
        {CONTENT_TYPE: OCTET_STREAM, EVENT_TYPE: AUDIO_EVENT, MESSAGE_TYPE: "event"}, pcm
    )


def end_of_stream() -> bytes:
    """The empty ``AudioEvent`` that tells Transcribe the audio is over."""
    return audio_event(b"")


def transcript_event(results: TranscriptEvent | Iterable[Result]) -> bytes:
    """A ``TranscriptEvent`` with these results (an event, or its results)."""
    event = (
        results
        if isinstance(results, TranscriptEvent)
        else TranscriptEvent(transcript=Transcript(results=tuple(results)))
    )
    return encode_message(
        {EVENT_TYPE: TRANSCRIPT_EVENT, CONTENT_TYPE: JSON, MESSAGE_TYPE: "event"},
        event.to_json(),
    )


def exception_event(type: ExceptionType, message: str) -> bytes:
    """A terminal exception message, as the captured frame above lays it out."""
    if type not in EXCEPTION_TYPES:
        raise ValueError(f"type must be one of {', '.join(EXCEPTION_TYPES)}, not {type!r}")
    return encode_message(
        {EXCEPTION_TYPE: type, CONTENT_TYPE: JSON, MESSAGE_TYPE: "exception"},
        json.dumps({"Message": message}, separators=(",", ":")).encode(),
    )


# --- decoding ------------------------------------------------------------------------------


def decode_message(frame: bytes) -> DecodedMessage:
    """The one message a WebSocket frame carries; raises ``EventStreamFrameError`` for a frame
    that is short, longer or shorter than its prelude says, or whose CRCs do not match."""
    frame = bytes(frame)
    if len(frame) < OVERHEAD_BYTES:
        raise EventStreamFrameError(
            f"a frame of {len(frame)} bytes is shorter than an event-stream message's "
            f"{OVERHEAD_BYTES} bytes of prelude and CRC"
        )
    total_length, headers_length, prelude_crc = struct.unpack(">III", frame[:PRELUDE_BYTES])
    if crc32(frame[:8]) & 0xFFFFFFFF != prelude_crc:
        raise EventStreamFrameError(
            f"the prelude's CRC32 does not match (sent 0x{prelude_crc:08x}, computed "
            f"0x{crc32(frame[:8]) & 0xFFFFFFFF:08x}): not an event-stream message, or corrupted"
        )
    if total_length != len(frame):
        raise EventStreamFrameError(
            f"the prelude says {total_length} bytes but the frame has {len(frame)}: one "
            "WebSocket frame must carry exactly one event-stream message"
        )
    if headers_length > total_length - OVERHEAD_BYTES:
        raise EventStreamFrameError(
            f"the prelude's headers length ({headers_length}) leaves no room in a "
            f"{total_length}-byte message"
        )
    buffer = EventStreamBuffer()
    buffer.add_data(frame)
    try:
        message = next(buffer)
    except ChecksumMismatch as mismatch:  # the prelude's was checked above: the message's
        raise EventStreamFrameError(
            f"the message's CRC32 does not match ({mismatch}): corrupted"
        ) from None
    except (ParserError, StopIteration, struct.error, UnicodeDecodeError, KeyError) as error:
        raise EventStreamFrameError(
            f"the message's headers cannot be read: {type(error).__name__} {error}"
        ) from None
    return DecodedMessage(dict(message.headers), bytes(message.payload))


def read_audio_event(frame: bytes) -> bytes:
    """The audio of an ``AudioEvent`` frame (empty: the end of the stream); raises
    ``EventStreamFrameError`` for anything else."""
    message = decode_message(frame)
    headers = message.headers
    if headers.get(MESSAGE_TYPE) != "event" or headers.get(EVENT_TYPE) != AUDIO_EVENT:
        raise EventStreamFrameError(
            f"expected an AudioEvent ({MESSAGE_TYPE}=event, {EVENT_TYPE}={AUDIO_EVENT}), got "
            f"{MESSAGE_TYPE}={headers.get(MESSAGE_TYPE)!r}, "
            f"{EVENT_TYPE}={headers.get(EVENT_TYPE)!r}"
        )
    content_type = headers.get(CONTENT_TYPE)
    if content_type is not None and content_type != OCTET_STREAM:
        raise EventStreamFrameError(
            f"an AudioEvent's {CONTENT_TYPE} is {OCTET_STREAM}, not {content_type!r}"
        )
    return message.payload


def read_result(frame: bytes) -> TranscriptEvent | TranscribeException:
    """What Transcribe sent: a ``TranscriptEvent``, or the exception that ends the stream;
    raises ``EventStreamFrameError`` for a frame that is neither."""
    message = decode_message(frame)
    headers = message.headers
    kind = headers.get(MESSAGE_TYPE)
    if kind == "exception":
        exception_type = headers.get(EXCEPTION_TYPE)
        if not isinstance(exception_type, str):
            raise EventStreamFrameError(f"an exception message without {EXCEPTION_TYPE}")
        try:
            body = json.loads(message.payload or b"{}")
        except ValueError:
            body = {}
        text = body.get("Message") if isinstance(body, dict) else None
        if not isinstance(text, str):
            text = message.payload.decode("utf-8", "replace")
        return TranscribeException(exception_type, text)
    if kind == "event" and headers.get(EVENT_TYPE) == TRANSCRIPT_EVENT:
        try:
            return TranscriptEvent.model_validate_json(message.payload)
        except ValidationError as invalid:
            raise EventStreamFrameError(
                f"a TranscriptEvent's JSON is not valid: {invalid}"
            ) from None
    raise EventStreamFrameError(
        f"expected a TranscriptEvent or an exception, got {MESSAGE_TYPE}={kind!r}, "
        f"{EVENT_TYPE}={headers.get(EVENT_TYPE)!r}"
    )
