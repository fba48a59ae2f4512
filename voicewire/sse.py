"""Server-Sent Events carrying JSON: ``data: {json}\\n\\n`` per event.

The decoder is incremental because delivery chunks do not respect event boundaries (the seed saw
4 logical MP3 frames arrive in 6 delivery chunks, 2 ending mid-frame): it buffers *bytes* and acts
only on the blank-line delimiter, so an event, or a multi-byte UTF-8 character, split across
chunks is decoded only once it is whole. Lines may end in LF, CRLF or a lone CR (the SSE
standard's three: https://html.spec.whatwg.org/multipage/server-sent-events.html#parsing-an-event-stream),
and a CRLF may itself be split between two chunks: a chunk's final CR waits for the next byte.
"""

from __future__ import annotations

import json
from typing import Any

_DELIMITER = b"\n\n"


def encode_sse_event(payload: dict[str, Any]) -> bytes:
    """One event; compact JSON never contains a raw newline, so one ``data:`` line suffices."""
    return (
        b"data: "
        + json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()
        + _DELIMITER
    )


class SseDecoder:
    """Feed delivery chunks, get whole events' JSON payloads.

    >>> decoder = SseDecoder()
    >>> decoder.feed(b'data: {"a": 1}\\n\\ndata: {"b"')
    [{'a': 1}]
    >>> decoder.feed(b': 2}\\n\\n')
    [{'b': 2}]
    """

    def __init__(self) -> None:
        self._buffer = b""  # line ends already made LF
        self._cr = False  # the last chunk ended in a CR: the start of a CRLF, or a line end

    def feed(self, chunk: bytes) -> list[dict[str, Any]]:
        if self._cr:
            chunk = b"\r" + chunk
        # Replacing CRLF chunk by chunk would miss one cut between its CR and LF (and count it
        # as two line ends: an event merged with the next one, or never dispatched).
        self._cr = chunk.endswith(b"\r")
        if self._cr:
            chunk = chunk[:-1]
        self._buffer += chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        return self._dispatch()

    def end(self) -> list[dict[str, Any]]:
        """The stream has ended: a CR held back was a line end after all. Returns the events
        that completes; ``pending_bytes`` then tells whether the stream was cut mid-event."""
        if not self._cr:
            return []
        self._cr = False
        self._buffer += b"\n"
        return self._dispatch()

    def _dispatch(self) -> list[dict[str, Any]]:
        events = []
        while (end := self._buffer.find(_DELIMITER)) >= 0:
            block, self._buffer = self._buffer[:end], self._buffer[end + len(_DELIMITER) :]
            data = [
                line[5:].removeprefix(b" ")
                for line in block.split(b"\n")
                if line.startswith(b"data:")
            ]
            if data:  # comment-only or id/event-only blocks carry no payload
                events.append(json.loads(b"\n".join(data).decode("utf-8")))
        return events

    @property
    def pending_bytes(self) -> int:
        """Bytes of an incomplete event still held (non-zero after ``end`` = truncated)."""
        return len(self._buffer) + self._cr
