"""What a ``SpeechSession`` needs from a connection: send a message, receive frames."""

from __future__ import annotations

from typing import Protocol


class SpeechTransport(Protocol):
    @property
    def target(self) -> str:
        """What this transport connects to, for messages (a URL, an endpoint name)."""
        ...

    async def connect(self) -> None:
        """Open the stream, or start opening it; raises ``SpeechStreamError("connect_failed")``
        when it cannot. It may return before the service has answered (``SageMakerTransport``
        sends its first message with the request, since a service may answer only after the
        first event): ``send_message`` works at once, and a refusal, or no answer in time, then
        surfaces from ``receive`` as ``SpeechStreamError("connect_failed", ...)`` (and from
        ``send_message`` once known)."""
        ...

    async def send_message(self, payload: bytes) -> None:
        """Send one JSON message (UTF-8)."""
        ...

    async def receive(self) -> str | bytes | None:
        """The next frame: ``str`` for a known text (control) frame, ``bytes`` when the transport
        cannot tell (the control-frame rule decides), ``None`` once the stream has ended (or
        was closed before the service answered). Raises ``SpeechStreamError`` when the stream
        fails, ``connect_failed`` when it never opened."""
        ...

    async def close(self, graceful: bool = True) -> None:
        """End the stream and release the connection; a reader waiting on ``receive`` then gets
        the end (``None``) or an error. ``graceful``: give the server a moment to end the stream
        its side first (the session has no answers pending); otherwise cut it now. Safe to call
        more than once."""
        ...
