"""The GPU engine's start-up check: a CUDA device that runs a kernel, or a refusal that says why.

torch reports a missing or too-old driver as "no device" and carries on, on the CPU: a GPU
endpoint would then answer ``/ping`` and speak ~50x slower than designed. When the image asks for
CUDA (``VOICEWIRE_DEVICE=cuda``, as the image and the stack set it), the server instead stops
before it listens, with one line naming what it found: the driver, the CUDA it runs, and the
CUDA torch is built for (``speech_server.gpu_pairing``).

torch exposes no driver version, so it is read where the driver publishes it: the kernel
module's ``/proc/driver/nvidia/version``, and ``cuDriverGetVersion`` of ``libcuda.so.1`` (which
the NVIDIA container runtime mounts into the container).
"""

from __future__ import annotations

import ctypes
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from speech_server.gpu_pairing import INFERENCE_AMI, required_driver

DRIVER_VERSION_FILE = Path("/proc/driver/nvidia/version")
_KERNEL_MODULE = re.compile(r"Kernel Module\s+(\d+(?:\.\d+)+)")


class GpuUnavailable(RuntimeError):
    """The image asked for CUDA and there is none it can use; the message says what was found."""


@dataclass(frozen=True)
class GpuFindings:
    torch_version: str
    torch_cuda: str | None  # the CUDA torch is built for; None for a CPU build
    driver: str | None  # the kernel module's version, e.g. "550.163.01"
    driver_cuda: str | None  # the newest CUDA that driver runs, e.g. "12.4"
    device: str | None = None  # the GPU's name, once torch sees one
    torch_error: str | None = None  # what torch said when it tried to use CUDA

    def describe(self) -> str:
        driver = (
            f"driver {self.driver or 'unknown'} (CUDA {self.driver_cuda or 'unknown'})"
            if self.driver or self.driver_cuda
            else "no NVIDIA driver"
        )
        build = f"CUDA {self.torch_cuda}" if self.torch_cuda else "the CPU only"
        found = f"{driver}; torch {self.torch_version} built for {build}"
        return f"{self.device}, {found}" if self.device else found


def installed_driver(version_file: Path = DRIVER_VERSION_FILE) -> str | None:
    try:
        match = _KERNEL_MODULE.search(version_file.read_text())
    except OSError:
        return None
    return match.group(1) if match else None


def driver_cuda_version(library: str = "libcuda.so.1") -> str | None:
    """The newest CUDA the installed driver runs (``cuDriverGetVersion``: 12040 is 12.4)."""
    try:
        libcuda = ctypes.CDLL(library)
    except OSError:
        return None
    version = ctypes.c_int(0)
    if libcuda.cuDriverGetVersion(ctypes.byref(version)) != 0 or version.value <= 0:
        return None
    return f"{version.value // 1000}.{version.value % 1000 // 10}"


def find(torch: Any, version_file: Path = DRIVER_VERSION_FILE) -> GpuFindings:
    return GpuFindings(
        torch_version=str(torch.__version__),
        torch_cuda=getattr(torch.version, "cuda", None),
        driver=installed_driver(version_file),
        driver_cuda=driver_cuda_version(),
    )


def require_cuda(torch: Any, device: str, version_file: Path = DRIVER_VERSION_FILE) -> GpuFindings:
    """A device that runs a kernel, or ``GpuUnavailable`` saying what was found and what to do."""
    findings = find(torch, version_file)
    problem = None
    if not findings.torch_cuda:
        problem = "this torch is a CPU build"
    elif not torch.cuda.is_available():
        problem = "torch sees no CUDA device"
        try:  # is_available() is silent; init() says why (no driver, a driver too old ...)
            torch.cuda.init()
        except Exception as error:
            problem += f": {_first_line(error)}"
    else:
        try:
            index = torch.device(device).index or 0
            torch.ones(1, device=device).add_(1).cpu()  # a kernel runs, and its result returns
            name = str(torch.cuda.get_device_name(index))
        except Exception as error:
            problem = f"a CUDA kernel failed: {_first_line(error)}"
        else:
            return GpuFindings(**{**findings.__dict__, "device": name})
    need = (
        f"torch {findings.torch_version} needs {required_driver(_cuda(findings.torch_cuda))}"
        if findings.torch_cuda
        else "install the torch extra's CUDA build (uv.lock)"
    )
    raise GpuUnavailable(
        f"VOICEWIRE_DEVICE={device} but {problem}. Found {findings.describe()}. {need}; on "
        f"SageMaker the variant's InferenceAmiVersion gives it ({INFERENCE_AMI}, "
        "stacks/speech.py). VOICEWIRE_DEVICE=cpu runs on the CPU on purpose."
    )


def _cuda(version: str | None) -> tuple[int, int]:
    major, _, minor = (version or "0.0").partition(".")
    return int(major), int(minor or 0)


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
