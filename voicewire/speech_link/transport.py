"""What a ``SpeechSession`` needs from a connection: send a message, receive frames."""

from __future__ import annotations

from typing import Protocol


class SpeechTransport(Protocol):
    async def connect(self) -> None: ...

    async def send_message(self, payload: bytes) -> None:
        """Send one JSON message (UTF-8)."""
        ...

    async def receive(self) -> str | bytes | None:
        """The next frame: ``str`` for a known text (control) frame, ``bytes`` when the transport
        cannot tell (the control-frame rule decides), ``None`` once the stream has ended.
        Raises ``SpeechStreamError`` when the stream fails."""
        ...

    async def close(self) -> None:
        """Stop sending; the receiving side drains until ``receive`` returns ``None``."""
        ...
