"""Kokoro-82M on torch through hexgrad's ``kokoro`` KPipeline: the container image's GPU engine.

Everything loads from a local model directory::

    /opt/ml/model/config.json
    /opt/ml/model/kokoro-v1_0.pth
    /opt/ml/model/voices.npz          Kokoro's official voices, as the ONNX engine reads them
    (or /opt/ml/model/voices/*.pt     the layout of hexgrad's release, for a user's own directory)

SageMaker mounts that directory from the S3 prefix the SpeechModelCache stack fills. Voices are
handed to KPipeline as tensors, so it never reaches for the hub. Each voice is phonemized by the
pipeline of its language letter (``a`` American, ``b`` British English...); a language whose G2P
is not installed in the image (misaki's Japanese and Chinese extras) has its voices left out,
said once at start-up. English G2P is misaki's, which needs spaCy's ``en_core_web_sm`` installed
in the image at build time.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from speech_server.engines.default_voice import choose_default_voice
from speech_server.gpu_check import find, require_cuda
from speech_server.model_assets import ModelAssetError
from speech_server.settings import EngineSettings
from speech_server.word_timings import SpokenWord, WordTimer, ended_by_audio, fed_phonemes

logger = logging.getLogger(__name__)

SAMPLE_RATE = 24_000
_REPO_ID = "hexgrad/Kokoro-82M"  # names the architecture variant; nothing is downloaded
VOICES_FILE = "voices.npz"


@dataclass
class KokoroTorchEngine:
    pipelines: dict[str, Any]  # language letter -> kokoro.KPipeline; loose: imports without torch
    voice_packs: dict[str, Any]  # voice name -> its (510, 1, 256) torch.FloatTensor, on the CPU
    default_voice: str
    device: str = "cpu"
    name: str = "torch"
    sample_rate: int = SAMPLE_RATE
    # Not measured: on a GPU the engine is ~50x faster than playback, so the chunk schedule
    # takes it as keeping up (speech_server.chunk_schedule).
    real_time_factor: float | None = None

    @property
    def voices(self) -> frozenset[str]:
        return frozenset(self.voice_packs)

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
        config, weights, voices = _model_files(model_dir)
        device = _choose_device(torch, device)
        started = time.perf_counter()
        logger.info("loading %s on %s", weights, device)
        model = KModel(repo_id=_REPO_ID, config=str(config), model=str(weights)).to(device).eval()
        packs = _voice_packs(voices, torch)
        pipelines: dict[str, Any] = {}
        for letter in sorted({name[0] for name in packs}):
            try:
                pipelines[letter] = KPipeline(lang_code=letter, repo_id=_REPO_ID, model=model)
            except Exception as error:  # a language's G2P extra missing from the image
                left_out = sorted(name for name in packs if name[0] == letter)
                logger.warning(
                    "no G2P for language %r (%s): leaving out %s", letter, error, left_out
                )
        packs = {name: pack for name, pack in packs.items() if name[0] in pipelines}
        if not packs:
            raise ModelAssetError(f"no voice in {model_dir} has a language this image speaks")
        engine = cls(pipelines, packs, choose_default_voice(frozenset(packs), voice), device=device)
        loaded = time.perf_counter()
        # CUDA loads its kernels and cuDNN picks its algorithms on first use: a short synthesis
        # now, so that the first person to ask does not pay for it.
        engine.synthesize("Ready.", engine.default_voice, 1.0)
        logger.info(
            "model ready in %.1f s on %s (warm-up synthesis %.0f ms): %d voices, default %s",
            time.perf_counter() - started,
            device,
            (time.perf_counter() - loaded) * 1000,
            len(packs),
            engine.default_voice,
        )
        return engine

    def synthesize_stream(
        self, text: str, voice: str, speed: float
    ) -> Iterator[NDArray[np.float32]]:
        # On a GPU the whole chunk takes a few tens of milliseconds: one piece.
        yield self.synthesize(text, voice, speed)

    def synthesize(self, text: str, voice: str, speed: float) -> NDArray[np.float32]:
        pipeline = self.pipelines[voice[0]]
        # split_pattern=None: the synthesis layer already chose the chunk; KPipeline still splits
        # inside it at 510 phonemes, which is the model's own limit.
        parts = [
            result.audio.detach().cpu().numpy()
            for result in pipeline(
                text, voice=self.voice_packs[voice], speed=speed, split_pattern=None
            )
            if result.audio is not None
        ]
        if not parts:
            return np.zeros(0, dtype=np.float32)
        return np.concatenate(parts).astype(np.float32, copy=False)

    def synthesize_timed(
        self, text: str, voice: str, speed: float, *, streamed: bool
    ) -> Iterator[NDArray[np.float32] | list[SpokenWord]]:
        """The chunk's audio with its written words first, samples counted from the start of
        its audio: KPipeline's results carry the phonemes it fed the model and ``pred_dur``, the
        duration predictor's frames per token (pads included, ``speed`` applied). On a GPU the
        whole chunk takes tens of milliseconds: one piece either way (``streamed`` is moot)."""
        pipeline = self.pipelines[voice[0]]
        vocabulary = pipeline.model.vocab
        results = [
            result
            for result in pipeline(
                text, voice=self.voice_packs[voice], speed=speed, split_pattern=None
            )
            if result.audio is not None
        ]
        if not results:
            yield np.zeros(0, dtype=np.float32)
            return
        fed = [fed_phonemes(result.phonemes, vocabulary) for result in results]
        # Each written word through the pipeline's own G2P (misaki, or espeak-ng) alone.
        timer = WordTimer.for_chunk(
            text, fed, lambda word: fed_phonemes(pipeline.g2p(word)[0] or "", vocabulary)
        )
        audio, offset, words = [], 0, []
        for result, phonemes in zip(results, fed, strict=True):
            durations = result.pred_dur.detach().cpu().numpy().ravel()
            words += timer.add_batch(phonemes, durations, offset)
            part = result.audio.detach().cpu().numpy()
            audio.append(part)
            offset += len(part)
        whole = np.concatenate(audio).astype(np.float32, copy=False)
        if words:
            yield ended_by_audio(words, whole)
        yield whole


def _choose_device(torch: Any, requested: str | None) -> str:
    """The device asked for, checked (``cuda`` must run a kernel: ``speech_server.gpu_check``),
    or, when none was asked for, CUDA if torch sees it and the CPU otherwise, said in the log."""
    if requested is not None and requested.startswith("cuda"):
        findings = require_cuda(torch, requested)
        logger.info("CUDA device: %s", findings.describe())
        return requested
    if requested is not None:
        return requested
    if torch.cuda.is_available():
        return "cuda"
    logger.warning("no CUDA device (%s): the torch engine runs on the CPU", find(torch).describe())
    return "cpu"


def _model_files(model_dir: Path) -> tuple[Path, Path, Path | dict[str, Path]]:
    """config.json, the weights, and the voices: ``voices.npz`` if present, else voices/*.pt."""
    config = model_dir / "config.json"
    weights = sorted(model_dir.glob("*.pth"))
    voices: Path | dict[str, Path] = model_dir / VOICES_FILE
    if not voices.is_file():
        voices = {path.stem: path for path in sorted((model_dir / "voices").glob("*.pt"))}
    missing = [
        what
        for what, absent in (
            ("config.json", not config.is_file()),
            ("a *.pth weights file", not weights),
            (f"{VOICES_FILE} or voices/*.pt", not voices),
        )
        if absent
    ]
    if missing:
        raise ModelAssetError(f"model directory {model_dir} lacks {', '.join(missing)}")
    return config, weights[0], voices


def _voice_packs(voices: Path | dict[str, Path], torch: Any) -> dict[str, Any]:
    """Every voice as a CPU float tensor: KPipeline takes a tensor as the voice itself (a CPU
    ``torch.FloatTensor``; the model moves the row it needs to its device)."""
    if isinstance(voices, Path):
        with np.load(voices) as archive:
            return {
                name: torch.from_numpy(np.array(archive[name], dtype=np.float32))
                for name in archive.files
            }
    return {name: torch.load(path, weights_only=True).float() for name, path in voices.items()}
