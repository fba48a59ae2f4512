"""Kokoro-82M on torch through hexgrad's ``kokoro`` KPipeline: the container image's GPU engine.

Everything loads from a local model directory laid out as the Kokoro-82M release is::

    /opt/ml/model/config.json
    /opt/ml/model/kokoro-v1_0.pth
    /opt/ml/model/voices/af_heart.pt ...

SageMaker mounts that directory from the S3 model data the model-cache stack syncs. Voices are
passed to KPipeline as file paths, so it never reaches for the hub. English G2P is misaki's, which
needs spaCy's ``en_core_web_sm`` installed in the image at build time.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from speech_server.engines import choose_default_voice
from speech_server.model_assets import ModelAssetError
from speech_server.settings import EngineSettings

logger = logging.getLogger(__name__)

SAMPLE_RATE = 24_000
_REPO_ID = "hexgrad/Kokoro-82M"  # names the architecture variant; nothing is downloaded


@dataclass
class KokoroTorchEngine:
    pipeline: Any  # kokoro.KPipeline; typed loosely so this module imports without torch
    voice_files: dict[str, Path]
    default_voice: str
    name: str = "torch"
    sample_rate: int = SAMPLE_RATE

    @property
    def voices(self) -> frozenset[str]:
        return frozenset(self.voice_files)

    @classmethod
    def from_settings(cls, settings: EngineSettings) -> KokoroTorchEngine:
        return cls.load(settings.model_dir, settings.voice, settings.device)

    @classmethod
    def load(
        cls, model_dir: Path, voice: str | None = None, device: str | None = None
    ) -> KokoroTorchEngine:
        try:
            import torch
            from kokoro import KModel, KPipeline
        except ImportError:
            raise ModelAssetError(
                "the torch engine needs the optional dependencies: uv sync --extra torch"
            ) from None
        config, weights, voice_files = _model_files(model_dir)
        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        started = time.perf_counter()
        logger.info("loading %s on %s", weights, device)
        model = KModel(repo_id=_REPO_ID, config=str(config), model=str(weights))
        pipeline = KPipeline(lang_code="a", repo_id=_REPO_ID, model=model.to(device).eval())
        for path in voice_files.values():
            pipeline.load_voice(str(path))  # cached by path: no lazy disk read per request
        engine = cls(pipeline, voice_files, choose_default_voice(frozenset(voice_files), voice))
        engine.synthesize("Ready.", engine.default_voice, 1.0)  # CUDA kernels load now
        logger.info("model ready in %.1f s on %s", time.perf_counter() - started, device)
        return engine

    def synthesize(self, text: str, voice: str, speed: float) -> NDArray[np.float32]:
        path = str(self.voice_files[voice])
        # split_pattern=None: the synthesis layer already chose the chunk; KPipeline still splits
        # inside it at 510 phonemes, which is the model's own limit.
        parts = [
            result.audio.detach().cpu().numpy()
            for result in self.pipeline(text, voice=path, speed=speed, split_pattern=None)
            if result.audio is not None
        ]
        if not parts:
            return np.zeros(0, dtype=np.float32)
        return np.concatenate(parts).astype(np.float32, copy=False)


def _model_files(model_dir: Path) -> tuple[Path, Path, dict[str, Path]]:
    config = model_dir / "config.json"
    weights = sorted(model_dir.glob("*.pth"))
    voice_files = {path.stem: path for path in sorted((model_dir / "voices").glob("*.pt"))}
    missing = [
        what
        for what, absent in (
            ("config.json", not config.is_file()),
            ("a *.pth weights file", not weights),
            ("voices/*.pt", not voice_files),
        )
        if absent
    ]
    if missing:
        raise ModelAssetError(f"model directory {model_dir} lacks {', '.join(missing)}")
    return config, weights[0], voice_files
