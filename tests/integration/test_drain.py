"""The speech server drains on SIGTERM instead of cutting its sessions (``speech_server.drain``).

SageMaker stops a container with SIGTERM and sends SIGKILL 30 s later. Each test starts the real
server (``python -m speech_server``, the container's entry point) as its own process on a real
port, with the real Kokoro-82M ONNX model, and signals it: a signal ends a process, so no two
tests share one.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from conftest import free_port
from speech_client import collect_reply
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, ConnectionClosedOK, InvalidStatus

pytestmark = pytest.mark.model

LONG_TEXT = (
    "This sentence is long enough to keep the speech server busy for a little while. "
    "And here is a second one, so that the audio is still being made when the signal comes."
)
# A turn still speaking at the signal that every machine finishes inside the 25 s drain: its
# second sentence is still to be made when the first audio comes. (LONG_TEXT took 19 s after
# the signal on a 2-core machine with both cores busy, 2026-12-07, and was cut.)
TURN_AT_THE_SIGNAL = "This turn is still speaking at the signal. Its second sentence comes after."


@dataclass
class SpeechProcess:
    process: subprocess.Popen[bytes]
    log_path: Path
    port: int

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/invocations-bidirectional-stream"

    def log(self) -> str:
        return self.log_path.read_text()

    def wait_ready(self, within: float = 180) -> None:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the speech server exited:\n{self.log()}")
            try:
                if httpx.get(f"{self.base_url}/ping").status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"the speech server did not become ready:\n{self.log()}")

    async def wait_exit(self, within: float) -> int:
        deadline = time.monotonic() + within
        while self.process.poll() is None:
            assert time.monotonic() < deadline, f"still running after {within} s:\n{self.log()}"
            await asyncio.sleep(0.05)
        return self.process.returncode

    async def wait_draining(self, within: float = 5) -> httpx.Response:
        """``GET /ping`` once it no longer says 200: the drain has begun."""
        deadline = time.monotonic() + within
        async with httpx.AsyncClient() as client:
            while (response := await client.get(f"{self.base_url}/ping")).status_code == 200:
                assert time.monotonic() < deadline, "/ping still says 200"
                await asyncio.sleep(0.02)
        return response


@pytest.fixture
def speech_process(tmp_path: Path) -> Iterator[Callable[..., SpeechProcess]]:
    started: list[SpeechProcess] = []

    def start(**env: str) -> SpeechProcess:
        port = free_port()
        log_path = tmp_path / f"speech-{port}.log"
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "speech_server"],
                env={
                    **os.environ,
                    "VOICEWIRE_HOST": "127.0.0.1",
                    "VOICEWIRE_PORT": str(port),
                    **env,
                },
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        running = SpeechProcess(process, log_path, port)
        started.append(running)
        running.wait_ready()
        return running

    yield start
    for running in started:
        if running.process.poll() is None:
            running.process.kill()
            running.process.wait()


async def in_flight(ws: ClientConnection, request_id: str, text: str) -> bytearray:
    """Send a request; return its first audio frame once it has come."""
    await ws.send(json.dumps({"text": text, "request_id": request_id}))
    start = json.loads(await asyncio.wait_for(ws.recv(), 60))
    assert start["type"] == "synthesis_start" and start["request_id"] == request_id
    frame = await asyncio.wait_for(ws.recv(), 60)
    assert isinstance(frame, bytes)
    return bytearray(frame)


async def rest_of_reply(ws: ClientConnection, audio: bytearray) -> dict:
    """Read a request's remaining audio into ``audio``; return its ``synthesis_complete``."""
    while isinstance(frame := await asyncio.wait_for(ws.recv(), 60), bytes):
        audio += frame
    complete = json.loads(frame)
    assert complete["type"] == "synthesis_complete", complete
    return complete


async def closed_by_server(ws: ClientConnection, within: float) -> None:
    """Read (and drop) whatever is left until the server closes the session."""
    with pytest.raises(ConnectionClosed):
        async with asyncio.timeout(within):
            while True:
                await ws.recv()


async def test_sigterm_lets_open_sessions_finish_then_exits(speech_process):
    server = speech_process()
    async with connect(server.ws_url) as busy, connect(server.ws_url) as idle:
        # Two sentences: seconds of synthesis still to come when the first words are heard.
        first_audio = await in_flight(busy, "first", TURN_AT_THE_SIGNAL)
        signalled = time.monotonic()
        server.process.send_signal(signal.SIGTERM)

        ping = await server.wait_draining()
        assert ping.status_code == 503
        assert ping.json()["status"] == "draining"
        # A turn in progress keeps sending: a request that comes during the drain is answered.
        more = {"text": "One more.", "request_id": "2nd"}
        await busy.send(json.dumps(more))
        with pytest.raises(InvalidStatus) as refused:
            async with connect(server.ws_url):
                pass
        assert refused.value.response.status_code == 503
        assert json.loads(refused.value.response.body)["status"] == "draining"

        # The idle session is closed after the idle grace, while the busy one still speaks.
        with pytest.raises(ConnectionClosedOK):
            await asyncio.wait_for(idle.recv(), 15)
        idle_closed_after = time.monotonic() - signalled
        assert (idle.close_code, idle.close_reason) == (1001, "the server is shutting down")
        # The idle grace (5 s: a turn's next sentence may be seconds away), not the deadline.
        assert 4 < idle_closed_after < 12

        # Every frame of both requests, and each one's synthesis_complete.
        first = await rest_of_reply(busy, first_audio)
        second = await collect_reply(busy, 60)
        assert first["request_id"] == "first" and first["status"] == "complete"
        assert first["audio_bytes"] == len(first_audio) and first["audio_seconds"] > 2
        assert second.complete["request_id"] == "2nd" and second.complete["status"] == "complete"
        assert second.complete["audio_bytes"] == len(second.audio) > 0
        with pytest.raises(ConnectionClosedOK):
            await asyncio.wait_for(busy.recv(), 10)
        assert busy.close_code == 1001

    # It exits once its last session is done (within 10 s of it), and no session was cut at
    # the deadline (the log's count below). How long the sessions took after the signal depends
    # on how fast the machine's cores are, so that is not what is compared.
    assert await server.wait_exit(10) == 0
    log = server.log()
    assert "draining: 2 session(s) open" in log
    assert "2 session(s) closed idle, 0 closed by their clients, 0 cut at the deadline" in log


async def test_sessions_still_busy_at_the_deadline_are_cut(speech_process):
    server = speech_process(VOICEWIRE_DRAIN_SECONDS="3")
    async with connect(server.ws_url) as ws:
        for number in range(1, 7):  # far more than 3 s of work on a CPU
            await ws.send(json.dumps({"text": LONG_TEXT, "request_id": f"r{number}"}))
        start = json.loads(await asyncio.wait_for(ws.recv(), 60))
        assert start["type"] == "synthesis_start"
        signalled = time.monotonic()
        server.process.send_signal(signal.SIGTERM)

        completed: list[str] = []
        with pytest.raises(ConnectionClosedOK):
            async with asyncio.timeout(20):
                while True:
                    frame = await ws.recv()
                    if isinstance(frame, str) and json.loads(frame)["type"] == "synthesis_complete":
                        completed.append(json.loads(frame)["request_id"])
        cut_after = time.monotonic() - signalled
        assert (ws.close_code, ws.close_reason) == (1001, "the server is shutting down")
        assert 2.5 < cut_after < 8, cut_after
        assert len(completed) < 6  # it was cut, not drained to the end

    assert await server.wait_exit(10) == 0
    assert "1 cut at the deadline" in server.log()


async def test_a_second_signal_exits_at_once(speech_process):
    server = speech_process()
    async with connect(server.ws_url) as ws:
        for number in range(1, 7):
            await ws.send(json.dumps({"text": LONG_TEXT, "request_id": f"r{number}"}))
        await asyncio.wait_for(ws.recv(), 60)
        server.process.send_signal(signal.SIGTERM)
        await server.wait_draining()
        server.process.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        await closed_by_server(ws, 10)
        assert await server.wait_exit(10) == -signal.SIGTERM
        assert time.monotonic() - signalled < 8  # not the 25 s drain
