"""The speech link over a direct WebSocket (the local stack, tests, a container on a laptop)."""

from __future__ import annotations

import contextlib

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, ConnectionClosedOK, InvalidHandshake

from voicewire.speech_link.errors import SpeechStreamError


class WebSocketTransport:
    def __init__(self, url: str, open_timeout: float = 10) -> None:
        self.url = url
        self.open_timeout = open_timeout
        self._connection: ClientConnection | None = None

    @property
    def target(self) -> str:
        return self.url

    async def connect(self) -> None:
        try:
            self._connection = await connect(
                self.url, max_size=None, open_timeout=self.open_timeout, compression=None
            )
        except (OSError, InvalidHandshake, TimeoutError) as error:
            raise SpeechStreamError("connect_failed", f"cannot open {self.url}: {error}") from error

    async def send_message(self, payload: bytes) -> None:
        try:
            # Text frames: the server accepts both, and text is what wscat and browsers send.
            await self._open.send(payload.decode("utf-8"))
        except ConnectionClosed as error:
            raise SpeechStreamError("connection_closed", str(error)) from error

    async def receive(self) -> str | bytes | None:
        try:
            return await self._open.recv()
        except ConnectionClosedOK:
            return None
        except ConnectionClosed as error:
            raise SpeechStreamError("connection_closed", str(error)) from error

    async def close(self, graceful: bool = True) -> None:
        connection, self._connection = self._connection, None
        if connection is None:
            return
        if not graceful:
            connection.transport.abort()  # no closing handshake with a peer that may be gone
            return
        with contextlib.suppress(Exception):  # already closed by the server: nothing to do
            await connection.close()

    @property
    def _open(self) -> ClientConnection:
        if self._connection is None:
            raise SpeechStreamError("not_connected", "the session is not open")
        return self._connection
