"""The GPU image and the driver under it: which CUDA the image's torch is built for, which NVIDIA
driver that needs, and which SageMaker inference AMI gives such a driver. One place, read by the
endpoint stack (the AMI it names on GPU variants), the torch engine's start-up check (what it says
when the GPU cannot be used) and ``tests/unit/test_gpu_pairing.py`` (which checks it against
uv.lock).

Why it matters: SageMaker gives a real-time ml.g5 variant NVIDIA driver 470 (CUDA 11.4) unless the
production variant names an ``InferenceAmiVersion``. CUDA user-space newer than the driver can
run makes torch report no device, and a server that then quietly runs on the CPU passes ``/ping``
while every figure the product exists for is ~50x worse.

The pairing (sources in docs/aws-facts.md):

- the image installs torch 2.10.0 from uv.lock: PyPI's build for CUDA 12.8
  (``nvidia-cuda-runtime-cu12`` 12.8.90, cuDNN 9.10), with compiled kernels for sm_70, sm_75,
  sm_80, sm_86, sm_90, sm_100 and sm_120 and no PTX (read off the wheel with cuobjdump, 2026-12);
- ``al2-ami-sagemaker-inference-gpu-3-1`` has driver 550, CUDA 12.4 natively;
- CUDA 12.x runs on any driver from 525.60.13 through NVIDIA's *minor version compatibility*,
  whose limits (no JIT of newer PTX, a few new APIs) the wheel does not meet: it carries compiled
  kernels for every GPU SageMaker offers (T4 7.5, A10G 8.6, L4 and L40S 8.9 run the 8.6 kernels,
  A100 8.0, H100 9.0).

torch 2.11 and later are CUDA 13 on PyPI and need driver 580 (``al2023-...-gpu-4-1``, added to
the API in 2026-03; its instance types are not yet in AWS's table): moving to them is this
module's two constants and the lock, and the test says if they disagree.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

CudaVersion = tuple[int, int]
DriverVersion = tuple[int, ...]


@dataclass(frozen=True)
class InferenceAmi:
    """A SageMaker inference AMI's NVIDIA driver and the newest CUDA that driver runs natively."""

    name: str
    driver: DriverVersion
    cuda: CudaVersion


# botocore's ProductionVariant.InferenceAmiVersion documentation (2026-08): every GPU value.
INFERENCE_AMIS = {
    ami.name: ami
    for ami in (
        InferenceAmi("al2-ami-sagemaker-inference-gpu-2", (535,), (12, 2)),
        InferenceAmi("al2-ami-sagemaker-inference-gpu-2-1", (535,), (12, 2)),
        InferenceAmi("al2-ami-sagemaker-inference-gpu-3-1", (550,), (12, 4)),
        InferenceAmi("al2023-ami-sagemaker-inference-gpu-4-1", (580,), (13, 0)),
    )
}
# What a real-time ml.g5 (or ml.g4dn, ml.p4d) variant gets without InferenceAmiVersion.
SAGEMAKER_DEFAULT_DRIVER = InferenceAmi("(none: SageMaker's default on ml.g5)", (470,), (11, 4))

# The pairing this project deploys.
IMAGE_TORCH = "2.10.0"
IMAGE_CUDA: CudaVersion = (12, 8)
INFERENCE_AMI = "al2-ami-sagemaker-inference-gpu-3-1"

# NVIDIA, "CUDA minor version compatibility": the oldest Linux driver that runs any release of a
# CUDA major version (applications with compiled kernels for their GPU, no newer PTX to JIT).
MINOR_VERSION_COMPATIBLE_DRIVER: dict[int, DriverVersion] = {
    11: (450, 80, 2),
    12: (525, 60, 13),
    13: (580,),
}

_GPU_INSTANCE = re.compile(r"ml\.[gp]\d")  # ml.g4dn, ml.g5, ml.g6, ml.g6e, ml.p4d, ml.p5 ...


def is_gpu_instance(instance_type: str) -> bool:
    """Whether a SageMaker instance type has an NVIDIA GPU (the ``ml.g*`` and ``ml.p*`` families;
    Inferentia and Trainium types are not CUDA devices)."""
    return _GPU_INSTANCE.match(instance_type) is not None


def driver_runs(cuda: CudaVersion, ami: InferenceAmi) -> bool:
    """Whether CUDA ``cuda`` user-space runs on the AMI's driver: natively (the driver's own CUDA
    or older), or through minor version compatibility (same major version, driver new enough)."""
    if cuda <= ami.cuda:
        return True
    oldest = MINOR_VERSION_COMPATIBLE_DRIVER.get(cuda[0])
    return cuda[0] == ami.cuda[0] and oldest is not None and ami.driver >= oldest


def required_driver(cuda: CudaVersion) -> str:
    """In words: the driver CUDA ``cuda`` needs (for the start-up check's message)."""
    oldest = MINOR_VERSION_COMPATIBLE_DRIVER.get(cuda[0])
    if oldest is None:
        return f"a driver for CUDA {cuda[0]}.{cuda[1]}"
    return f"NVIDIA driver >= {'.'.join(map(str, oldest))}"
