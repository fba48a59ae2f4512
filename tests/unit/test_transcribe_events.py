"""Transcribe's event-stream messages: the bytes AWS documents and sends, the round trip through
botocore's decoder, and bad frames named for what is wrong with them."""

from __future__ import annotations

import binascii
import json
import struct

import pytest
from botocore.eventstream import EventStreamBuffer

from voicewire.speech_in.transcribe_events import (
    Alternative,
    EventStreamFrameError,
    Item,
    Result,
    TranscribeException,
    TranscriptEvent,
    audio_event,
    decode_message,
    end_of_stream,
    exception_event,
    read_audio_event,
    read_result,
    transcript_event,
)

# A frame Amazon Transcribe sent, as a user printed it (awsdocs/amazon-transcribe-developer-
# guide#14): the exception a bad WebSocket frame gets.
CAPTURED_EXCEPTION = (
    b"\x00\x00\x00\xa3\x00\x00\x00ah\x10k\xe1\x0f:exception-type\x07\x00\x13BadRequestException"
    b"\r:content-type\x07\x00\x10application/json\r:message-type\x07\x00\texception"
    b'{"Message":"Unexpected WebSocket frame received."}\xbd\xceK\x8a'
)

# The guide's example of a streaming result (seconds; partial results stabilization on).
AWS_RESULT_JSON = {
    "Transcript": {
        "Results": [
            {
                "Alternatives": [
                    {
                        "Items": [
                            {
                                "Content": "Hello",
                                "EndTime": 0.52,
                                "Stable": True,
                                "StartTime": 0.23,
                                "Type": "pronunciation",
                                "VocabularyFilterMatch": False,
                            },
                            {
                                "Content": ".",
                                "EndTime": 0.52,
                                "Stable": True,
                                "StartTime": 0.52,
                                "Type": "punctuation",
                                "VocabularyFilterMatch": False,
                            },
                        ],
                        "Transcript": "Hello.",
                    }
                ],
                "EndTime": 0.52,
                "IsPartial": False,
                "ResultId": "12345a67-8bc9-0de1-2f34-a5b678c90d12",
                "StartTime": 0.23,
                "SomethingAwsAddsLater": 1,
            }
        ]
    }
}


def spec_encoding(headers: list[tuple[str, str]], payload: bytes) -> bytes:
    """The event-stream encoding written from the guide's "Event stream encoding" page (string
    headers, type 7), independently of the encoder under test."""
    encoded = b"".join(
        bytes([len(name)])
        + name.encode()
        + b"\x07"
        + struct.pack(">H", len(value))
        + value.encode()
        for name, value in headers
    )
    prelude = struct.pack(">II", len(encoded) + len(payload) + 16, len(encoded))
    prelude += struct.pack(">I", binascii.crc32(prelude))
    body = prelude + encoded + payload
    return body + struct.pack(">I", binascii.crc32(body))


def test_an_audio_event_is_laid_out_as_transcribes_guide_shows():
    pcm = bytes(range(256)) * 4
    frame = audio_event(pcm)
    assert frame == spec_encoding(
        [
            (":content-type", "application/octet-stream"),
            (":event-type", "AudioEvent"),
            (":message-type", "event"),
        ],
        pcm,
    )
    # The guide's table: name lengths 13, 11, 13; value type 7; value lengths 24, 10, 5.
    assert b"\x0d:content-type\x07\x00\x18application/octet-stream" in frame
    assert b"\x0b:event-type\x07\x00\x0aAudioEvent" in frame
    assert b"\x0d:message-type\x07\x00\x05event" in frame


def test_an_exception_is_byte_for_byte_the_frame_transcribe_sent():
    assert exception_event("BadRequestException", "Unexpected WebSocket frame received.") == (
        CAPTURED_EXCEPTION
    )
    exception = read_result(CAPTURED_EXCEPTION)
    assert isinstance(exception, TranscribeException)
    assert (exception.type, exception.message) == (
        "BadRequestException",
        "Unexpected WebSocket frame received.",
    )
    with pytest.raises(ValueError, match="must be one of"):
        exception_event("TeapotException", "no")  # type: ignore[arg-type]


def test_audio_round_trips_through_botocores_decoder():
    pcm = b"\x01\x00\xff\x7f" * 800
    buffer = EventStreamBuffer()
    buffer.add_data(audio_event(pcm))
    (message,) = list(buffer)
    assert message.headers == {
        ":content-type": "application/octet-stream",
        ":event-type": "AudioEvent",
        ":message-type": "event",
    }
    assert message.payload == pcm
    assert read_audio_event(audio_event(pcm)) == pcm


def test_the_end_of_the_stream_is_an_empty_audio_event():
    frame = end_of_stream()
    assert read_audio_event(frame) == b""
    assert decode_message(frame).headers[":event-type"] == "AudioEvent"


def test_a_transcript_event_round_trips_with_aws_field_names():
    item = Item(start_time=0.23, end_time=0.52, type="pronunciation", content="Hello")
    result = Result(
        result_id="r-1",
        start_time=0.23,
        end_time=0.52,
        is_partial=True,
        alternatives=(Alternative(transcript="Hello", items=(item,)),),
    )
    frame = transcript_event([result])
    message = decode_message(frame)
    assert message.headers == {
        ":event-type": "TranscriptEvent",
        ":content-type": "application/json",
        ":message-type": "event",
    }
    assert json.loads(message.payload) == {
        "Transcript": {
            "Results": [
                {
                    "ResultId": "r-1",
                    "StartTime": 0.23,
                    "EndTime": 0.52,
                    "IsPartial": True,
                    "Alternatives": [
                        {
                            "Transcript": "Hello",
                            "Items": [
                                {
                                    "StartTime": 0.23,
                                    "EndTime": 0.52,
                                    "Type": "pronunciation",
                                    "Content": "Hello",
                                    "VocabularyFilterMatch": False,
                                }
                            ],
                        }
                    ],
                }
            ]
        }
    }
    assert read_result(frame) == TranscriptEvent.model_validate_json(message.payload)
    assert read_result(frame).transcript.results == (result,)


def test_aws_json_parses_into_the_models():
    frame = spec_encoding(
        [
            (":event-type", "TranscriptEvent"),
            (":content-type", "application/json"),
            (":message-type", "event"),
        ],
        json.dumps(AWS_RESULT_JSON).encode(),
    )
    event = read_result(frame)
    assert isinstance(event, TranscriptEvent)
    (result,) = event.transcript.results
    assert (result.is_partial, result.start_time, result.end_time) == (False, 0.23, 0.52)
    words, mark = result.alternatives[0].items
    assert (words.content, words.type, words.stable) == ("Hello", "pronunciation", True)
    assert (mark.content, mark.type, mark.start_time) == (".", "punctuation", 0.52)


def corrupt(frame: bytes, index: int) -> bytes:
    return frame[:index] + bytes([frame[index] ^ 0xFF]) + frame[index + 1 :]


@pytest.mark.parametrize(
    ("frame", "says"),
    [
        (corrupt(audio_event(b"\x00\x01" * 10), 40), "message's CRC32 does not match"),
        (corrupt(audio_event(b"\x00\x01" * 10), 3), "prelude's CRC32 does not match"),
        (corrupt(audio_event(b"\x00\x01" * 10), 9), "prelude's CRC32 does not match"),
        (audio_event(b"\x00\x01" * 10)[:-1], "the frame has"),
        (audio_event(b"\x00\x01") + audio_event(b"\x00\x01"), "exactly one event-stream message"),
        (b"RIFF\x24\x00\x00\x00WAVEfmt ", "prelude's CRC32"),
        (b"\x00" * 8, "shorter than"),
        (b"", "shorter than"),
    ],
)
def test_a_bad_frame_is_named_for_what_is_wrong(frame, says):
    with pytest.raises(EventStreamFrameError, match=says):
        decode_message(frame)


def test_a_header_section_that_does_not_parse_is_a_bad_frame():
    headers = b"\x05:oops\x63"  # value type 99 does not exist
    prelude = struct.pack(">II", len(headers) + 16, len(headers))
    prelude += struct.pack(">I", binascii.crc32(prelude))
    body = prelude + headers
    frame = body + struct.pack(">I", binascii.crc32(body))
    with pytest.raises(EventStreamFrameError, match="headers cannot be read"):
        decode_message(frame)


def test_only_an_audio_event_is_audio():
    result = Result(result_id="r", start_time=0, end_time=0, is_partial=True)
    with pytest.raises(EventStreamFrameError, match="expected an AudioEvent"):
        read_audio_event(transcript_event([result]))
    wrong_type = spec_encoding(
        [(":content-type", "audio/wav"), (":event-type", "AudioEvent"), (":message-type", "event")],
        b"\x00\x00",
    )
    with pytest.raises(EventStreamFrameError, match="application/octet-stream"):
        read_audio_event(wrong_type)
    with pytest.raises(EventStreamFrameError, match="TranscriptEvent or an exception"):
        read_result(audio_event(b"\x00\x00"))
