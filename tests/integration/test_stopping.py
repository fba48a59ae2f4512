"""Ctrl-C (and SIGTERM) stops the long-running commands within a few seconds at any moment:
while the model is assembled or loads, while idle, while a turn speaks. One line after the
signal, no traceback from any process, and nothing left behind: no child process, no port.

A terminal's Ctrl-C reaches the whole foreground process group, so the commands are started in
a group of their own and signalled as a group (``killpg``), as a terminal does; SIGTERM goes to
the one process, as ``kill`` sends it.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import free_port
from websockets.sync.client import connect

ROOT = Path(__file__).resolve().parents[2]
STOP_WITHIN_SECONDS = 10  # "a few seconds": the stack's own stop is ~2 s on 2 cores
QUESTION = "Why does streaming make voice agents feel faster?"


@dataclass
class Command:
    """A command run as a user runs it, its output read as it comes."""

    process: subprocess.Popen[str]
    ports: tuple[int, ...]
    lines: queue.Queue[str] = field(default_factory=queue.Queue)
    seen: list[str] = field(default_factory=list)

    @classmethod
    def start(cls, argv: list[str], ports: tuple[int, ...], env: dict[str, str]) -> Command:
        process = subprocess.Popen(
            [sys.executable, "-m", *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=ROOT,
            env={**os.environ, **env},
            start_new_session=True,
        )
        command = cls(process, ports)
        threading.Thread(target=command._read, daemon=True).start()
        return command

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line)
        self.lines.put("")  # the end of the output

    def wait_for(self, text: str, seconds: float = 240) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=1)
            except queue.Empty:
                continue
            if line == "":
                pytest.fail(f"exited before {text!r}:\n{''.join(self.seen)}")
            self.seen.append(line)
            if text in line:
                return
        pytest.fail(f"no {text!r} within {seconds} s:\n{''.join(self.seen)}")

    def children(self) -> set[int]:
        """Every process below this one (the speech server, its own children)."""
        below, found = {self.process.pid}, set()
        for _ in range(3):  # children, grandchildren, ...
            for entry in Path("/proc").iterdir():
                if entry.name.isdigit():
                    try:
                        ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                    except (OSError, IndexError, ValueError):
                        continue
                    if ppid in below:
                        found.add(int(entry.name))
            below |= found
        return found

    def stop(self, signum: int, group: bool) -> list[str]:
        """Send the signal; the lines written after it, once the process has exited."""
        children = self.children()
        before = len(self.seen)
        (os.killpg if group else os.kill)(self.process.pid, signum)
        sent = time.monotonic()
        try:
            self.process.wait(STOP_WITHIN_SECONDS)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            pytest.fail(f"still running {STOP_WITHIN_SECONDS} s after {signum!r}")
        stopped_in = time.monotonic() - sent
        while (line := self.lines.get(timeout=5)) != "":
            self.seen.append(line)
        after = [line.rstrip("\n") for line in self.seen[before:] if line.strip()]
        assert not any("Traceback" in line for line in self.seen), "".join(self.seen)
        assert stopped_in < STOP_WITHIN_SECONDS
        left = [pid for pid in children if _alive(pid)]
        deadline = time.monotonic() + 5  # a child stops by itself when its parent is gone
        while left and time.monotonic() < deadline:
            time.sleep(0.1)
            left = [pid for pid in left if _alive(pid)]
        assert left == [], f"left running: {left}"
        for port in self.ports:
            with socket.socket() as sock:
                # As a server binds (uvicorn, the stack): only a listening socket is in its way,
                # not the closed connections' TIME_WAIT.
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind(("127.0.0.1", port))  # free again
        return after


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie has exited; only its parent's wait is missing


def start_up(cache: Path | None = None) -> tuple[Command, int]:
    port, speech_port, runtime_port = free_port(), free_port(), free_port()
    env = {"VOICEWIRE_CACHE_DIR": str(cache)} if cache else {}
    command = Command.start(
        [
            "voicewire_tools.cli",
            "up",
            "--port",
            str(port),
            "--speech-port",
            str(speech_port),
            "--runtime-port",
            str(runtime_port),
        ],
        (port, speech_port, runtime_port),
        env,
    )
    return command, port


def speak_until_audio(port: int) -> None:
    """Ask, and return once the answer's first audio frame has come: the turn is speaking."""
    with connect(f"ws://127.0.0.1:{port}/ws", max_size=None) as ws:
        ws.send(json.dumps({"action": "ask", "prompt": QUESTION, "mode": "bidi"}))
        while not isinstance(ws.recv(timeout=60), bytes):
            pass


@pytest.mark.parametrize(
    ("moment", "signum", "group"),
    [
        ("assembling", signal.SIGINT, True),
        ("loading", signal.SIGTERM, False),
        ("idle", signal.SIGINT, True),
        ("speaking", signal.SIGINT, True),
        ("speaking", signal.SIGTERM, False),
    ],
)
def test_voicewire_up_stops_at_any_moment(moment, signum, group, tmp_path):
    # A first run assembles the model into an empty cache; the others use the shared one.
    command, port = start_up(tmp_path if moment == "assembling" else None)
    marker = {
        "assembling": "assembling Kokoro-82M",
        "loading": "speech server: loading",
        "idle": "Ctrl-C stops everything",
        "speaking": "Ctrl-C stops everything",
    }[moment]
    command.wait_for(marker)
    if moment == "speaking":
        talking = threading.Thread(target=speak_until_audio, args=(port,), daemon=True)
        talking.start()
        talking.join(90)
    after = command.stop(signum, group)
    assert command.process.returncode == 0
    started = moment in ("idle", "speaking")
    # The speech server's progress lines may still be on their way (the model's parts): the
    # stack's own output after the signal is its one line.
    own = [line for line in after if not line.startswith("speech server:")]
    assert own == ["stopping..." if started else "stopped while starting"]


def test_serve_speech_stops_at_any_moment():
    # Listening, the model not yet loading; loading; ready.
    for wait, signum in (
        ("speech server on", signal.SIGINT),
        ("loading ", signal.SIGINT),
        ("ready in", signal.SIGTERM),
    ):
        port = free_port()
        command = Command.start(
            ["voicewire_tools.cli", "serve-speech", "--port", str(port)], (port,), {}
        )
        command.wait_for(wait)
        command.stop(signum, group=signum == signal.SIGINT)
        assert command.process.returncode == 0, "".join(command.seen)
        assert sum("stopped" in line for line in command.seen) <= 1


def test_voicewire_demo_stops_during_a_trial():
    command = Command.start(
        ["voicewire_tools.cli", "demo", "--trials", "3", "--out-dir", "/dev/null/none"], (), {}
    )
    command.wait_for("trial 1 bidi")
    after = command.stop(signal.SIGINT, group=True)
    assert command.process.returncode == 130
    assert after[-1] == "voicewire demo: stopped"
    assert not any(line.startswith("trial 2") for line in after)


WAIT_FOR_STOP_CHILD = """
import signal, threading, time
from voicewire_tools.stop_signals import stop_on_signals, wait_for_stop

# A server's thread, as the stack runs several: the kernel may hand it the process's signal.
ready, server = threading.Event(), threading.Event()
def serve():
    ready.set()
    server.wait(30)
other = threading.Thread(target=serve, daemon=True)
other.start()
ready.wait()
with stop_on_signals("test"):
    threading.Timer(0.5, lambda: signal.pthread_kill(other.ident, signal.SIGTERM)).start()
    started = time.monotonic()
    try:
        wait_for_stop()
    except KeyboardInterrupt:
        print(f"stopped {time.monotonic() - started:.2f}")
"""


def test_a_signal_another_thread_receives_still_stops_the_main_thread():
    # The signal is delivered to a thread that is not the main one: CPython only marks it pending
    # for the main thread, and an endless lock wait there never ran the handler (CI's hang).
    done = subprocess.run(
        [sys.executable, "-c", WAIT_FOR_STOP_CHILD],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=20,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("stopped "), done.stdout + done.stderr
    assert float(done.stdout.split()[1]) < 0.5 + 2


SIGNAL_AROUND_SERVING_CHILD = """
import signal, sys
sys.path.insert(0, "container")
from speech_server.process_exit import end_by_signal_after_serving

end_by_signal_after_serving(lambda: {began})
signal.raise_signal(signal.SIGINT)
print("still running")
"""


@pytest.mark.parametrize(("began", "returncode"), [(False, 0), (True, -signal.SIGINT)])
def test_a_signal_just_before_uvicorn_takes_the_signals_is_a_clean_stop(began, returncode):
    # CI's failure: a SIGINT right after "speech server on", before uvicorn installed its
    # handlers, ended the process by SIGINT. Before serving began it is the one-line stop; once
    # uvicorn has given the signals back, a signal still ends the process by that signal.
    done = subprocess.run(
        [sys.executable, "-c", SIGNAL_AROUND_SERVING_CHILD.format(began=began)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=20,
    )
    assert done.returncode == returncode, done.stderr
    assert "still running" not in done.stdout
    assert ("speech server: stopped (SIGINT)" in done.stderr) == (not began)
