"""The control-frame rule: how a receiver tells JSON control frames from audio on one stream.

SageMaker's bidirectional stream hands back every frame the container sent as a payload part of
bytes, text and audio alike. A part is a control frame only if the *whole* part decodes as UTF-8
and parses as a JSON object; anything else is audio. Looking at the first byte is not enough: raw
PCM may begin with 0x7b, the ``{`` that opens a JSON object.

    >>> decode_control_frame(b'{"type": "synthesis_complete"}')
    {'type': 'synthesis_complete'}
    >>> decode_control_frame(b"{\\x00\\x81\\xfe") is None   # PCM that happens to start with "{"
    True
"""

from __future__ import annotations

import json
from typing import Any


def decode_control_frame(chunk: bytes) -> dict[str, Any] | None:
    """The frame's JSON object, or ``None`` if the frame is audio."""
    if not chunk or chunk[:1] not in b"{ \t\r\n":
        return None  # fast path: a JSON object starts with "{" (or whitespace before it)
    try:
        decoded = json.loads(chunk.decode("utf-8"))
    except (ValueError, RecursionError):  # not UTF-8, not JSON, a huge number, too deep
        return None
    return decoded if isinstance(decoded, dict) else None
