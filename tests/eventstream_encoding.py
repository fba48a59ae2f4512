"""Encoding AWS event-stream messages (``application/vnd.amazon.eventstream``) for tests.

botocore only decodes this format; the Stubber cannot return event streams. A ``before-send``
handler that answers with these bytes makes boto3 parse a real ``EventStream`` through its own
code path. Layout of one message: total length and headers length (uint32 BE), CRC32 of those 8
bytes, the headers, the payload, CRC32 of everything before it.
"""

from __future__ import annotations

import json
import struct
import zlib

_STRING = 7


def _headers(headers: dict[str, str]) -> bytes:
    out = b""
    for name, value in headers.items():
        raw_name, raw_value = name.encode(), value.encode()
        out += struct.pack(">B", len(raw_name)) + raw_name
        out += struct.pack(">BH", _STRING, len(raw_value)) + raw_value
    return out


def encode_message(headers: dict[str, str], payload: bytes) -> bytes:
    encoded_headers = _headers(headers)
    total = 12 + len(encoded_headers) + len(payload) + 4
    prelude = struct.pack(">II", total, len(encoded_headers))
    prelude += struct.pack(">I", zlib.crc32(prelude))
    message = prelude + encoded_headers + payload
    return message + struct.pack(">I", zlib.crc32(message))


def payload_part(data: bytes) -> bytes:
    return encode_message(
        {
            ":event-type": "PayloadPart",
            ":content-type": "application/octet-stream",
            ":message-type": "event",
        },
        data,
    )


def stream_exception(kind: str, message: str) -> bytes:
    return encode_message(
        {
            ":exception-type": kind,
            ":content-type": "application/json",
            ":message-type": "exception",
        },
        json.dumps({"Message": message, "ErrorCode": kind}).encode(),
    )


class RawEventStream:
    """What botocore reads an event-stream body from: an object with ``stream()``."""

    def __init__(self, messages: list[bytes]) -> None:
        self._messages = messages

    def stream(self, **_: object):
        yield from self._messages

    def close(self) -> None:
        pass
