"""Each speech image's dependency set, installed exactly as container/Dockerfile installs it, in
a fresh environment, and the speech server started in it.

The image is built only at deploy time (no Docker engine here), so an import the image lacks
used to show only on AWS: the CPU endpoint's image once left out onnxruntime, and its ``/ping``
would have answered 500 until SageMaker rolled the stack back. Here each target's ``uv sync``
line is read from the Dockerfile (``stacks.speech_image``) and run as written, against a copy of
what the image copies, with the image's environment; only where things go differs (a temporary
directory instead of ``/app``, hard links instead of copies, no bytecode compiling).

- ``cpu`` (the ONNX engine): the server starts on the files ``speech-infra`` stages for it (the
  rewritten int8 graph and the official voices, mounted as ``/opt/ml/model`` would be), with an
  empty cache as a fresh container has, becomes ready and speaks.
- ``gpu`` (the torch engine) with its CUDA check off (``VOICEWIRE_DEVICE=cpu``): the locked
  torch, kokoro and misaki import, and the server starts and names what its model directory
  lacks. This machine has no Kokoro torch weights (they come from a model hub at deploy time), and
  the image's spaCy model comes from GitHub, which is not reachable here. The first run downloads
  the CUDA wheels (about 4 GB) into uv's cache.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from conftest import free_port
from required_tools import REQUIRED
from websockets.sync.client import connect

from stacks.speech_image import (
    SPEECH_DOCKERFILE,
    ImageStage,
    image_environment,
    image_stages,
    stage_chain,
)

ROOT = Path(__file__).resolve().parents[2]
IMAGE_ROOT = "/app"  # the Dockerfile's WORKDIR
MODEL_DIR = "/opt/ml/model"  # where SageMaker mounts the model data
# RUN lines of the Dockerfile that install no Python package from the lock, and why they do not
# run here; any other RUN fails this test until it is handled.
NOT_RUN_HERE = {
    "apt-get": "Debian packages: this machine's own system libraries stand in",
    "uv pip install": "the GPU image's spaCy model comes from GitHub, not reachable here",
}

pytestmark = [pytest.mark.image, pytest.mark.timeout(1800)]


def uv_command() -> str:
    """uv itself (``uv run`` names it in ``UV``)."""
    found = os.environ.get("UV") or shutil.which("uv")
    if found is None:
        if REQUIRED:
            raise RuntimeError("VOICEWIRE_REQUIRE_TOOLS=1 but uv is not on PATH")
        pytest.skip("needs uv on PATH")
    return found


def uv_sync_lines(chain: list[ImageStage]) -> list[str]:
    """The chain's ``uv sync`` lines, as written; every other RUN must be one of NOT_RUN_HERE."""
    lines = []
    for stage in chain:
        for run in stage.values("RUN"):
            command = " ".join(run.split())
            if command.startswith("uv sync "):
                lines.append(command)
            elif not any(command.startswith(known) for known in NOT_RUN_HERE):
                raise AssertionError(f"a RUN this test does not know how to mirror: {command}")
    assert lines, "the image installs nothing from the lock"
    return lines


def copy_what_the_image_copies(chain: list[ImageStage], app: Path) -> None:
    """``COPY source destination`` lines (not ``--from``), sources from the repository."""
    for stage in chain:
        for copy in stage.values("COPY"):
            words = shlex.split(copy)
            if words[0].startswith("--from"):
                continue
            *sources, destination = words
            for source in sources:
                origin = ROOT / source
                target = app / destination
                if destination.endswith("/"):
                    target = target / origin.name
                if origin.is_dir():
                    shutil.copytree(origin, target, ignore=shutil.ignore_patterns("__pycache__"))
                else:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(origin, target)


def install_image(target: str, where: Path) -> tuple[Path, dict[str, str]]:
    """A fresh environment with ``target``'s dependency set; the app directory and the image's
    environment pointed at it."""
    chain = stage_chain(image_stages(), target)
    app = where / "app"
    app.mkdir()
    copy_what_the_image_copies(chain, app)
    image_env = image_environment(chain)
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT") and not key.startswith("PYTHON")
    }
    env |= {key: value for key, value in image_env.items() if key.startswith("UV_")}
    # Where and how, not what: this machine's Python 3.12 (the image's is Ubuntu's), hard links
    # from uv's cache instead of copies, no bytecode compiled ahead.
    env |= {
        "UV_PYTHON": sys._base_executable,  # the interpreter under this venv
        "UV_LINK_MODE": "hardlink",
        "UV_COMPILE_BYTECODE": "0",
        "PATH": f"{Path(uv_command()).parent}{os.pathsep}{env.get('PATH', '')}",
    }
    for line in uv_sync_lines(chain):
        started = time.monotonic()
        done = subprocess.run(
            ["bash", "-c", line], cwd=app, env=env, capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, f"{line}\n{done.stderr[-4000:]}"
        print(f"{target}: {line[:60]}... in {time.monotonic() - started:.0f} s")
    assert (app / ".venv" / "bin" / "python").exists()
    return app, image_env


def server_environment(image_env: dict[str, str], app: Path, model: Path, cache: Path) -> dict:
    """The image's environment with its paths moved here; nothing of this machine's Python."""
    environment = {}
    for key, value in image_env.items():
        if key.startswith("UV_"):
            continue
        environment[key] = value.replace(MODEL_DIR, str(model)).replace(IMAGE_ROOT, str(app))
    return environment | {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(cache.parent),
        "VOICEWIRE_CACHE_DIR": str(cache),  # a fresh container's empty cache
        "VOICEWIRE_HOST": "127.0.0.1",
        "VOICEWIRE_PORT": str(free_port()),
    }


def start(app: Path, environment: dict) -> subprocess.Popen:
    """The image's ENTRYPOINT and CMD, in the app directory."""
    (stage,) = [s for s in image_stages().values() if s.values("ENTRYPOINT")]
    entrypoint = json.loads(stage.values("ENTRYPOINT")[0])
    command = json.loads(stage.values("CMD")[0])
    program = [entrypoint[0].replace(IMAGE_ROOT, str(app)), *entrypoint[1:], *command]
    return subprocess.Popen(
        program,
        cwd=app,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def ping_until_settled(server: subprocess.Popen, url: str, within: float) -> httpx.Response:
    """``GET /ping`` until the model is loaded or failed (anything but 503: loading)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise AssertionError(f"the server exited {server.returncode}:\n{server.stdout.read()}")
        try:
            answer = httpx.get(url, timeout=2)
        except httpx.TransportError:
            answer = None
        if answer is not None and answer.status_code != 503:
            return answer
        time.sleep(0.5)
    raise AssertionError(f"/ping did not settle within {within:g} s")


def spoken(session, text: str, request_id: str, wait: float) -> tuple[int, dict]:
    """One request over the bidirectional route: its audio's bytes and its synthesis_complete."""
    session.send(json.dumps({"text": text, "request_id": request_id}))
    audio = 0
    while True:
        frame = session.recv(timeout=wait)
        if isinstance(frame, bytes):
            audio += len(frame)
        elif json.loads(frame)["type"] == "synthesis_complete":
            return audio, json.loads(frame)


def stop(server: subprocess.Popen) -> str:
    server.terminate()
    try:
        output, _ = server.communicate(timeout=40)
    except subprocess.TimeoutExpired:
        server.kill()
        output, _ = server.communicate()
    return output


def test_the_dockerfile_has_one_target_per_engine_over_one_base():
    stages = image_stages()
    assert set(stages) == {"base", "cpu", "gpu"}
    assert stages["cpu"].base == stages["gpu"].base == "base"
    assert SPEECH_DOCKERFILE == ROOT / "container" / "Dockerfile"


def test_the_cpu_image_runs_the_onnx_engine_on_the_staged_files(tmp_path):
    from voicewire_tools.commands.model_weights import engine_files

    app, image_env = install_image("cpu", tmp_path)
    assert image_env["VOICEWIRE_ENGINE"] == "onnx"
    # The model directory as SageMaker mounts it: the files speech-infra stages for this engine.
    model = tmp_path / "model"
    model.mkdir()
    for name, path in engine_files("onnx", progress=lambda _: None).items():
        (model / name).symlink_to(path)
    environment = server_environment(image_env, app, model, tmp_path / "home" / "cache")
    server = start(app, environment)
    base_url = f"http://127.0.0.1:{environment['VOICEWIRE_PORT']}"
    try:
        # A fresh container tunes the engine first (minutes on a slow machine; SageMaker allows
        # the endpoint's startup timeout, 15 minutes).
        answer = ping_until_settled(server, f"{base_url}/ping", within=600)
        assert answer.status_code == 200, answer.text
        assert answer.json()["engine"] == "onnx"
        bidi = f"ws://127.0.0.1:{environment['VOICEWIRE_PORT']}/invocations-bidirectional-stream"
        with connect(bidi) as session:
            audio, complete = spoken(session, "The image speaks.", "r", wait=60)
        assert complete["status"] == "complete" and audio == complete["audio_bytes"] > 24_000
    finally:
        log = stop(server)
    assert "Traceback" not in log, log


def test_the_gpu_image_imports_its_engine_and_starts_without_cuda(tmp_path):
    app, image_env = install_image("gpu", tmp_path)
    assert (image_env["VOICEWIRE_ENGINE"], image_env["VOICEWIRE_DEVICE"]) == ("torch", "cuda")
    python = str(app / ".venv" / "bin" / "python")
    # What the torch engine imports when it loads, and the CPU engine's packages left out.
    probe = (
        "import torch, kokoro, misaki.en, spacy\n"
        "from kokoro import KModel, KPipeline\n"
        "import speech_server.engines.torch_engine, speech_server.gpu_check\n"
        "from importlib.util import find_spec\n"
        "print('left out:', [m for m in ('onnxruntime', 'onnx', 'kokoro_onnx') if find_spec(m)])\n"
        "print('torch', torch.__version__, torch.version.cuda)\n"
    )
    pythonpath = image_env["PYTHONPATH"].replace(IMAGE_ROOT, str(app))
    imported = subprocess.run(
        [python, "-c", probe],
        cwd=app,
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": os.environ.get("PATH", ""), "PYTHONPATH": pythonpath},
    )
    assert imported.returncode == 0, imported.stderr[-4000:]
    assert "left out: []" in imported.stdout
    assert "torch 2.10" in imported.stdout and " 12.8" in imported.stdout
    # The server itself, its CUDA check off, on an empty model directory: it starts, and /ping
    # names what the directory lacks (not an import the image misses).
    model = tmp_path / "model"
    model.mkdir()
    environment = server_environment(image_env, app, model, tmp_path / "home" / "cache")
    environment["VOICEWIRE_DEVICE"] = "cpu"
    server = start(app, environment)
    try:
        answer = ping_until_settled(
            server, f"http://127.0.0.1:{environment['VOICEWIRE_PORT']}/ping", within=300
        )
    finally:
        stop(server)
    assert answer.status_code == 500
    error = answer.json()
    assert error["code"] == "model_load_failed"
    assert "lacks config.json, a *.pth weights file" in error["message"]


def test_the_gpu_image_speaks_with_the_torch_engine_on_real_weights(tmp_path):
    """The GPU target's dependency set runs the torch engine end to end on real Kokoro weights
    (derived from the int8 export: ``voicewire torch-model``), on this CPU. Nothing of the
    image's is missing: no espeak-ng package either (misaki's fallback for a word out of its
    lexicon loads espeakng-loader's library), so an unknown word is still spoken. spaCy's English
    model, which the image installs from GitHub, is stood in for by a ``sitecustomize``."""
    pytest.importorskip("torch")  # the derivation runs in this process
    import spacy_english_standin

    from voicewire_tools.derived_torch_model import derived_model_dir

    model = derived_model_dir(progress=lambda _: None)
    app, image_env = install_image("gpu", tmp_path)
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(spacy_english_standin.sitecustomize_source())
    environment = server_environment(image_env, app, model, tmp_path / "home" / "cache")
    environment["VOICEWIRE_DEVICE"] = "cpu"
    environment["PYTHONPATH"] = f"{site}{os.pathsep}{environment['PYTHONPATH']}"
    server = start(app, environment)
    port = environment["VOICEWIRE_PORT"]
    try:
        answer = ping_until_settled(server, f"http://127.0.0.1:{port}/ping", within=600)
        assert answer.status_code == 200, answer.text
        assert answer.json()["engine"] == "torch"
        with connect(f"ws://127.0.0.1:{port}/invocations-bidirectional-stream") as session:
            seconds = {}
            for request_id, text in (("known", "The image speaks."), ("unknown", "Zyxquoth.")):
                audio, complete = spoken(session, text, request_id, wait=120)
                assert complete["status"] == "complete"
                seconds[request_id] = audio / 48_000  # seconds of 24 kHz s16le
    finally:
        log = stop(server)
    assert "Traceback" not in log, log
    assert seconds["known"] > 0.8, seconds
    assert seconds["unknown"] > 0.3, seconds  # said through espeak-ng's library, not skipped
