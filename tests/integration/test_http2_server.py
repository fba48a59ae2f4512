"""The local stack's HTTP/2-over-TLS server (``voicewire_tools.local_stack.http2_server``), through
a real TLS socket and the ``h2`` client state machine."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import struct
import threading
from collections.abc import AsyncIterator

import h2.config
import h2.connection
import h2.events
import pytest

from voicewire_tools.local_stack.http2_server import (
    ClientGone,
    Handler,
    Http1Answer,
    Http2Server,
    Stream,
)
from voicewire_tools.local_stack.local_tls import LocalTls

BURST = 50  # response DATA frames sent back to back, as the relay sends a cut audio frame's parts


REQUEST = [(":method", "POST"), (":path", "/"), (":scheme", "https"), (":authority", "localhost")]


def connect_h2(port: int, ca_file: str) -> tuple[ssl.SSLSocket, h2.connection.H2Connection]:
    """A client connection, TLS with ALPN ``h2``, its preface sent."""
    context = ssl.create_default_context(cafile=ca_file)
    context.set_alpn_protocols(["h2"])
    raw = socket.create_connection(("127.0.0.1", port))
    sock = context.wrap_socket(raw, server_hostname="localhost")
    client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    client.initiate_connection()
    sock.sendall(client.data_to_send())
    return sock, client


def open_h2_stream(port: int, ca_file: str) -> ssl.SSLSocket:
    """A client connection with one request open (its input not ended), back once the response's
    headers have come."""
    sock, client = connect_h2(port, ca_file)
    client.send_headers(1, REQUEST)
    sock.sendall(client.data_to_send())
    while True:
        data = sock.recv(65_536)
        assert data, "the server closed before answering"
        events = client.receive_data(data)
        sock.sendall(client.data_to_send())
        if any(isinstance(event, h2.events.ResponseReceived) for event in events):
            return sock


@contextlib.asynccontextmanager
async def serving(handler: Handler, tls: LocalTls) -> AsyncIterator[int]:
    """The server on a free port, for the block; its port."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    server = Http2Server(handler, sock, tls.server_file, Http1Answer(400, "text/plain", b"h2 only"))
    await server.start()
    try:
        yield sock.getsockname()[1]
    finally:
        await server.stop()


def reset(sock: ssl.SSLSocket) -> None:
    """Drop the connection as a crashed or killed client does: a TCP reset, no TLS close."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


async def test_a_burst_sent_after_the_client_reset_ends_in_client_gone_and_writes_no_dead_socket(
    tmp_path, caplog
):
    # A reset seen by the socket while a handler sends parts back to back: the TLS layer hears of
    # it only through a callback the event loop runs next. A handler that never yields wrote on
    # into the dead socket, and asyncio warned "socket.send() raised exception." once per write
    # after the fifth, on the stack's terminal when Ctrl-C came during a turn.
    tls = LocalTls.create(tmp_path)
    loop = asyncio.get_running_loop()
    client_socket: asyncio.Future[ssl.SSLSocket] = loop.create_future()
    outcome: asyncio.Future[str] = loop.create_future()

    async def handler(stream: Stream) -> None:
        await stream.send_headers(200, [("content-type", "application/octet-stream")])
        client = await client_socket
        sent = 0
        try:
            for _ in range(BURST):
                await stream.send_data(b"x" * 100)
                sent += 1
                if sent == 1:
                    reset(client)  # mid-burst, the loop not run since: only the socket knows
        except ClientGone:
            outcome.set_result(f"client gone after {sent}")
        else:
            outcome.set_result(f"all {sent} sent")

    async with serving(handler, tls) as port:

        def client() -> None:
            opened = open_h2_stream(port, str(tls.ca_file))
            loop.call_soon_threadsafe(client_socket.set_result, opened)

        with caplog.at_level(logging.DEBUG, logger="asyncio"):
            threading.Thread(target=client, daemon=True).start()
            result = await asyncio.wait_for(outcome, 10)
        assert result.startswith("client gone after "), result
        assert int(result.rsplit(" ", 1)[1]) < 5  # told within a few parts, not at the end
        warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert warnings == []


@pytest.mark.parametrize("burst", [1, BURST])
async def test_a_burst_to_a_client_still_there_arrives_whole(tmp_path, burst):
    # The same sending path with the client reading: every byte arrives, in order.
    tls = LocalTls.create(tmp_path)
    payload = bytes(range(100))

    async def handler(stream: Stream) -> None:
        await stream.send_headers(200, [])
        for _ in range(burst):
            await stream.send_data(payload)
        await stream.end()

    async with serving(handler, tls) as port:

        def client() -> bytes:
            conn, h2c = connect_h2(port, str(tls.ca_file))
            with conn:
                h2c.send_headers(1, REQUEST, end_stream=True)
                conn.sendall(h2c.data_to_send())
                body = bytearray()
                while True:
                    data = conn.recv(65_536)
                    assert data, "the server closed before ending the response"
                    for event in h2c.receive_data(data):
                        if isinstance(event, h2.events.DataReceived):
                            body += event.data
                            h2c.acknowledge_received_data(event.flow_controlled_length, 1)
                        if isinstance(event, h2.events.StreamEnded):
                            return bytes(body)
                    conn.sendall(h2c.data_to_send())

        body = await asyncio.wait_for(asyncio.to_thread(client), 10)
        assert body == payload * burst
