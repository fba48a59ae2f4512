"""The real speech server (``speech_server.app``: its WebSocket protocol, chunking, framing and
cancel) over a deterministic engine, for tests where the engine is not the point: fast on any
machine, and able to stall. Run in a thread (``conftest.start_server``) or, to be killed, in a
process of its own::

    python tests/speech_standin.py PORT [SECONDS_PER_CHUNK]
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np

RATE = 24_000
HERE = Path(__file__).resolve().parent


class ToneEngine:
    """A tone as long as the text (10 ms per character), after ``seconds_per_chunk`` of
    "compute". From chunk ``stall_at`` on (counted over the server's life), a chunk waits for
    ``release`` before it is synthesized: a server whose engine is stuck keeps its session open
    and sends nothing more."""

    name, sample_rate = "tone", RATE
    voices, default_voice = frozenset({"af_heart"}), "af_heart"

    def __init__(self, seconds_per_chunk: float = 0.0, stall_at: int | None = None) -> None:
        self.seconds_per_chunk = seconds_per_chunk
        self.stall_at = stall_at
        self.chunks = 0
        self.stalled = threading.Event()  # a chunk is waiting for ``release``
        self.stalled_at: float | None = None  # time.monotonic() when it began to
        self.release = threading.Event()
        self.timed_chunks = 0  # chunks whose words were asked for (word_timings)

    def synthesize(self, text: str, voice: str, speed: float) -> np.ndarray:
        index, self.chunks = self.chunks, self.chunks + 1
        if self.stall_at is not None and index >= self.stall_at:
            if self.stalled_at is None:
                self.stalled_at = time.monotonic()
            self.stalled.set()
            self.release.wait()
        time.sleep(self.seconds_per_chunk)
        samples = len(text) * RATE // 100
        return (0.3 + 0.1 * np.sin(np.arange(samples) * 0.3)).astype(np.float32)

    def synthesize_stream(self, text: str, voice: str, speed: float):
        yield self.synthesize(text, voice, speed)

    def synthesize_timed(self, text: str, voice: str, speed: float, *, streamed: bool):
        """The chunk's words, spread evenly over its tone (samples from the start of the
        chunk's audio), before the tone: what the real engines give the synthesis layer, which
        moves them onto the request's audio and sends the ``words`` frame."""
        from speech_server.word_timings import SpokenWord

        self.timed_chunks += 1
        audio = self.synthesize(text, voice, speed)
        written = text.split()
        step = len(audio) / max(1, len(written))
        yield [
            SpokenWord(word, round(index * step), round((index + 1) * step))
            for index, word in enumerate(written)
        ]
        yield audio


@dataclass
class SpeechProcess:
    """The stand-in in its own process, on a fixed port (so it can come back on it)."""

    port: int
    seconds_per_chunk: float = 0.0
    process: subprocess.Popen[bytes] | None = None

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/invocations-bidirectional-stream"

    def start(self, ready_within: float = 60) -> SpeechProcess:
        self.process = subprocess.Popen(
            [
                sys.executable,
                str(HERE / "speech_standin.py"),
                str(self.port),
                str(self.seconds_per_chunk),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + ready_within
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/ping", timeout=1).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the speech stand-in did not start on port {self.port}")
            time.sleep(0.05)

    def freeze(self) -> None:
        """SIGSTOP: the process stops, its sockets stay open, nothing answers (a hung host, a
        stuck event loop). ``stop`` still kills it."""
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGSTOP)

    def stop(self, how: signal.Signals = signal.SIGKILL) -> None:
        """SIGKILL: the process dies, its connections are cut without a close frame. SIGTERM:
        uvicorn shuts down, closing every WebSocket (1012) before it exits."""
        if self.process is None or self.process.poll() is not None:
            return
        os.kill(self.process.pid, how)
        try:
            self.process.wait(15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)


def main() -> None:
    import uvicorn

    from speech_server.app import create_app

    port = int(sys.argv[1])
    seconds_per_chunk = float(sys.argv[2]) if len(sys.argv) > 2 else 0.0
    app = create_app(lambda: ToneEngine(seconds_per_chunk))
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", ws="websockets-sansio")


if __name__ == "__main__":
    main()
