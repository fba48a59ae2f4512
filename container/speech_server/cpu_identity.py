"""Which CPU this is: its model name and the vector instructions its kernels can use.

onnxruntime's MLAS picks its convolution and matrix kernels by these instructions (AVX2, FMA,
AVX-512, AVX-VNNI, AMX, NEON...), so two machines of the same size can rank the engine's graphs
differently (an AMD EPYC gained nothing from the graph rewrite that made an Intel Xeon 1.24x
faster). The engine's tuning record (``speech_server.engine_tuning``) is kept per CPU identity,
and the benchmarks print the model name beside their figures.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")
# The flags that change which kernels onnxruntime runs; the rest (power states, bugs) do not.
_KERNEL_FLAG_PREFIXES = ("sse", "ssse", "avx", "fma", "f16c", "amx", "asimd", "sve", "bf16")


def cpu_model(cpuinfo: Path = CPUINFO) -> str:
    """The CPU's model name (Linux's /proc/cpuinfo), or the platform's processor string."""
    for line in _lines(cpuinfo):
        if line.lower().startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def kernel_flags(cpuinfo: Path = CPUINFO) -> tuple[str, ...]:
    """The vector-instruction flags of the first CPU, sorted (x86 ``flags``, Arm ``Features``)."""
    for line in _lines(cpuinfo):
        key = line.split(":", 1)[0].strip().lower()
        if key in ("flags", "features"):
            flags = line.split(":", 1)[1].split()
            return tuple(sorted(f for f in flags if f.startswith(_KERNEL_FLAG_PREFIXES)))
    return ()


def usable_cores() -> int:
    """The cores this process may run on (a container's CPU set, not the host's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _lines(cpuinfo: Path) -> list[str]:
    if not cpuinfo.is_file():
        return []
    return cpuinfo.read_text(errors="replace").splitlines()
