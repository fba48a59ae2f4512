"""The speech server asked for CUDA without one: one line, and it never listens."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

from conftest import free_port
from torch_standin import Gpu, torch_module_source


def test_the_server_asked_for_cuda_without_one_exits_with_one_line_and_never_listens(tmp_path):
    """The container's entry point as SageMaker starts it (``python -m speech_server serve``),
    with the image's environment, on a machine without a GPU."""
    (tmp_path / "torch.py").write_text(torch_module_source(Gpu()))
    port = free_port()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
        "VOICEWIRE_ENGINE": "torch",
        "VOICEWIRE_DEVICE": "cuda",
        "VOICEWIRE_MODEL_DIR": str(tmp_path),
        "VOICEWIRE_HOST": "127.0.0.1",
        "VOICEWIRE_PORT": str(port),
    }
    started = time.monotonic()
    server = subprocess.Popen(
        [sys.executable, "-m", "speech_server", "serve"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    listened = False
    try:
        while server.poll() is None and not listened and time.monotonic() - started < 60:
            with socket.socket() as probe:
                listened = probe.connect_ex(("127.0.0.1", port)) == 0
            time.sleep(0.05)
    finally:
        if server.poll() is None:
            server.kill()
    _, stderr = server.communicate(timeout=10)
    assert server.returncode == 1
    assert not listened  # /ping never answered: SageMaker never sees a healthy container
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("speech server: VOICEWIRE_DEVICE=cuda but torch sees no CUDA device")
    assert "Found no NVIDIA driver" in last and "torch 2.10.0+cu128 built for CUDA 12.8" in last
