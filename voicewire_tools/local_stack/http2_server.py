"""A small HTTP/2-over-TLS server for long-lived duplex streams, on ``h2`` (the HTTP/2 protocol
library hypercorn and httpx use).

Why not an ASGI server: SageMaker's clients end their input *after* the response has ended (the
stream is then half-closed, which HTTP/2 allows), and hypercorn forgets a stream as soon as its
response ends, then fails the whole connection on the client's next DATA frame (``KeyError`` in
its event loop). Here a stream lives until both sides have ended it; what arrives after the
handler is done is acknowledged (flow control) and dropped.

Each request runs ``handler(stream)``: ``stream.receive()`` yields request body chunks (``None``
once the client ends its input), ``send_headers``/``send_data``/``end`` answer. Sending honours
HTTP/2 flow control: ``send_data`` waits for window updates rather than buffering without bound.
A client that does not negotiate ``h2`` through ALPN gets a one-shot HTTP/1.1 answer from
``http1_answer``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions

logger = logging.getLogger(__name__)

READ_SIZE = 65_536
HANDLER_GRACE_SECONDS = 2.0  # once a connection is gone, how long its handlers get to finish


class ClientGone(Exception):
    """The client reset the stream or dropped the connection."""


@dataclass
class Http1Answer:
    status: int
    content_type: str
    body: bytes


@dataclass
class Stream:
    """One request/response exchange on a connection."""

    stream_id: int
    method: str
    path: str
    headers: dict[str, str]  # lower-case names; the last value of a repeated header
    _connection: _Connection
    _body: asyncio.Queue[bytes | ClientGone | None] = field(default_factory=asyncio.Queue)
    request_ended: bool = False
    response_ended: bool = False
    reset: bool = False

    async def receive(self) -> bytes | None:
        """The next chunk of the request body; ``None`` once the client ended it. Raises
        ``ClientGone`` if the client reset the stream or left."""
        item = await self._body.get()
        if isinstance(item, ClientGone):
            self._body.put_nowait(item)  # every later call says the same
            raise item
        if item is None:
            self._body.put_nowait(None)
        return item

    async def send_headers(self, status: int, headers: list[tuple[str, str]]) -> None:
        self._connection.send_headers(self, status, headers)
        await self._connection.flush()

    async def send_data(self, data: bytes) -> None:
        await self._connection.send_data(self, data)

    async def end(self) -> None:
        """End the response (the client may go on sending until it ends its side)."""
        if not self.response_ended and not self.reset:
            self.response_ended = True
            self._connection.end_stream(self)
            await self._connection.flush()


Handler = Callable[[Stream], Awaitable[None]]


class _Connection:
    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, handler: Handler
    ) -> None:
        self.reader, self.writer, self.handler = reader, writer, handler
        self.h2 = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=False, header_encoding="utf-8")
        )
        self.streams: dict[int, Stream] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        self.window_opened = asyncio.Condition()
        self.closed = False

    async def run(self) -> None:
        self.h2.initiate_connection()
        await self.flush()
        try:
            while not self.closed:
                data = await self.reader.read(READ_SIZE)
                if not data:
                    break
                try:
                    events = self.h2.receive_data(data)
                except h2.exceptions.ProtocolError as error:
                    logger.info("HTTP/2 protocol error from the client: %s", error)
                    break
                for event in events:
                    await self._handle(event)
                await self.flush()
        except (ConnectionError, ssl.SSLError, OSError):
            logger.debug("connection lost", exc_info=True)
        finally:
            await self._close()

    async def _handle(self, event: h2.events.Event) -> None:
        match event:
            case h2.events.RequestReceived():
                headers = {name.lower(): value for name, value in event.headers}
                stream = Stream(
                    event.stream_id,
                    headers.get(":method", ""),
                    headers.get(":path", ""),
                    headers,
                    self,
                )
                self.streams[event.stream_id] = stream
                if event.stream_ended is not None:
                    self._request_ended(stream)
                task = asyncio.create_task(
                    self._serve(stream), name=f"h2-stream-{stream.stream_id}"
                )
                self.tasks.add(task)
                task.add_done_callback(self.tasks.discard)
            case h2.events.DataReceived():
                # Acknowledged at once: the body is queued without bound, which is fine for a
                # local tool whose handlers keep up (a real server would acknowledge as it reads).
                self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                stream = self.streams.get(event.stream_id)
                if stream is not None and not stream.request_ended:
                    stream._body.put_nowait(event.data)
                if stream is not None and event.stream_ended is not None:
                    self._request_ended(stream)
            case h2.events.StreamEnded():
                stream = self.streams.get(event.stream_id)
                if stream is not None:
                    self._request_ended(stream)
            case h2.events.StreamReset():
                stream = self.streams.pop(event.stream_id, None)
                if stream is not None:
                    stream.reset = True
                    stream._body.put_nowait(ClientGone("the client reset the stream"))
                await self._notify_window()
            case h2.events.WindowUpdated() | h2.events.RemoteSettingsChanged():
                await self._notify_window()
            case h2.events.ConnectionTerminated():
                self.closed = True

    def _request_ended(self, stream: Stream) -> None:
        if not stream.request_ended:
            stream.request_ended = True
            stream._body.put_nowait(None)
        self._forget_if_done(stream)

    def _forget_if_done(self, stream: Stream) -> None:
        if stream.request_ended and stream.response_ended:
            self.streams.pop(stream.stream_id, None)

    async def _serve(self, stream: Stream) -> None:
        try:
            await self.handler(stream)
        except ClientGone:
            logger.debug("stream %d: the client went away", stream.stream_id)
        except Exception:
            logger.exception("stream %d failed", stream.stream_id)
            if not stream.response_ended and not stream.reset:
                with contextlib.suppress(Exception):
                    self.h2.reset_stream(stream.stream_id, h2.errors.ErrorCodes.INTERNAL_ERROR)
                    stream.reset = True
                    await self.flush()
        finally:
            if not stream.response_ended and not stream.reset and not self.closed:
                with contextlib.suppress(Exception):
                    await stream.end()
            self._forget_if_done(stream)

    # --- sending ------------------------------------------------------------------------------

    def send_headers(self, stream: Stream, status: int, headers: list[tuple[str, str]]) -> None:
        with self._sending(stream):
            self.h2.send_headers(stream.stream_id, [(":status", str(status)), *headers])

    async def send_data(self, stream: Stream, data: bytes) -> None:
        view = memoryview(data)
        while view:
            if stream.reset or self.closed or self.writer.is_closing():
                raise ClientGone("the stream is gone")
            window = self.h2.local_flow_control_window(stream.stream_id)
            if window <= 0:
                async with self.window_opened:
                    await self.window_opened.wait()
                continue
            size = min(window, self.h2.max_outbound_frame_size, len(view))
            with self._sending(stream):
                self.h2.send_data(stream.stream_id, bytes(view[:size]))
            view = view[size:]
            await self.flush()

    def end_stream(self, stream: Stream) -> None:
        with self._sending(stream):
            self.h2.end_stream(stream.stream_id)
        self._forget_if_done(stream)

    @contextlib.contextmanager
    def _sending(self, stream: Stream) -> Iterator[None]:
        """What the client ended (the stream reset, the connection closed) is ``ClientGone``."""
        if stream.reset or self.closed or self.writer.is_closing():
            raise ClientGone("the stream is gone")
        try:
            yield
        except (h2.exceptions.StreamClosedError, h2.exceptions.ProtocolError) as error:
            raise ClientGone(f"the stream is gone ({error})") from None

    async def flush(self) -> None:
        data = self.h2.data_to_send()
        if data and not self.writer.is_closing():
            self.writer.write(data)
            with contextlib.suppress(ConnectionError, OSError):
                await self.writer.drain()
            # drain() returns without yielding while the buffer is below its high-water mark,
            # so a handler sending parts back to back never lets the loop run. A connection
            # the socket found dead (the client reset it) reaches the TLS layer, and
            # ``is_closing()``, only through a callback the loop runs next: without this yield
            # every later part went into the dead socket, and asyncio warned "socket.send()
            # raised exception." for each one after the fifth.
            await asyncio.sleep(0)

    async def _notify_window(self) -> None:
        async with self.window_opened:
            self.window_opened.notify_all()

    async def _close(self) -> None:
        self.closed = True
        for stream in list(self.streams.values()):
            stream._body.put_nowait(ClientGone("the connection closed"))
        await self._notify_window()
        with contextlib.suppress(Exception):
            self.h2.close_connection()
            await self.flush()
        self.writer.close()
        with contextlib.suppress(Exception):
            await self.writer.wait_closed()
        if self.tasks:  # told the client is gone; a handler stuck elsewhere is cut short
            _, stuck = await asyncio.wait(self.tasks, timeout=HANDLER_GRACE_SECONDS)
            for task in stuck:
                task.cancel()
            await asyncio.gather(*stuck, return_exceptions=True)


class Http2Server:
    """Serve ``handler`` on an already bound socket, over TLS with ``cert_file``."""

    def __init__(
        self,
        handler: Handler,
        sock: socket.socket,
        cert_file: Path,
        http1_answer: Http1Answer,
    ) -> None:
        self.handler = handler
        self.sock = sock
        self.http1_answer = http1_answer
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(str(cert_file))
        context.set_alpn_protocols(["h2"])
        self.context = context
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._accept, sock=self.sock, ssl=self.context, ssl_handshake_timeout=5
        )

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            ssl_object = writer.get_extra_info("ssl_object")
            if ssl_object is None or ssl_object.selected_alpn_protocol() != "h2":
                await self._answer_http1(reader, writer)
                return
            sock = writer.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            await _Connection(reader, writer, self.handler).run()
        except asyncio.CancelledError:
            # The server is stopping and cut this connection short: that is its end, not an
            # error (asyncio's stream callback would print the cancellation as a traceback).
            writer.close()
        finally:
            self._connections.discard(task)

    async def _answer_http1(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """A client without HTTP/2 gets one plain answer, then the connection closes."""
        with contextlib.suppress(Exception):
            async with asyncio.timeout(5):
                await reader.readuntil(b"\r\n\r\n")
            answer = self.http1_answer
            head = (
                f"HTTP/1.1 {answer.status} Bad Request\r\n"
                f"content-type: {answer.content_type}\r\n"
                f"content-length: {len(answer.body)}\r\nconnection: close\r\n\r\n"
            )
            writer.write(head.encode() + answer.body)
            await writer.drain()
        writer.close()
