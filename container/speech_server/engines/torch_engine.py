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
from collections.abc import Container, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from speech_server.engines.default_voice import choose_default_voice
from speech_server.gpu_check import find, require_cuda
from speech_server.model_assets import ModelAssetError
from speech_server.settings import EngineSettings
from speech_server.word_timings import (
    SpokenWord,
    WordTimer,
    ended_by_audio,
    fed_phonemes,
    written_words,
)

logger = logging.getLogger(__name__)

SAMPLE_RATE = 24_000
_REPO_ID = "hexgrad/Kokoro-82M"  # names the architecture variant; nothing is downloaded
VOICES_FILE = "voices.npz"
MODEL_TOPS = ("bert", "bert_encoder", "predictor", "text_encoder", "decoder")
# Tensors Kokoro's release leaves at KModel's initial values: ALBERT's pooler (never called) and
# AdaIN's InstanceNorm affine weights (1 and 0).
LEFT_AT_INITIAL_VALUES = ("bert.pooler.", ".norm.weight", ".norm.bias")
# The warm-up, checked: Kokoro says "Ready." in about 0.6 s (af_heart, speed 1); a model that
# loaded other weights gives silence, NaN, or audio of another length.
WARM_UP_TEXT = "Ready."
WARM_UP_SECONDS = (0.25, 2.5)
WARM_UP_MIN_RMS = 0.005


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
        try:
            model = KModel(repo_id=_REPO_ID, config=str(config), model=str(weights))
        except (RuntimeError, KeyError, AssertionError, ValueError) as error:
            raise ModelAssetError(f"{weights} is not Kokoro-82M's weights: {error}") from None
        require_filled(model, torch.load(weights, map_location="cpu", weights_only=True), weights)
        model = model.to(device).eval()
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
        # Each voice on the model's device once, in its pipeline's own cache (KPipeline looks a
        # voice's name up there): a pack handed in as a tensor would be copied to the device
        # on every request, and KPipeline takes only a CPU tensor as a voice.
        for name, pack in packs.items():
            pipelines[name[0]].voices[name] = pack.to(device)
        engine = cls(pipelines, packs, choose_default_voice(frozenset(packs), voice), device=device)
        loaded = time.perf_counter()
        # CUDA loads its kernels and cuDNN picks its algorithms on first use: a short synthesis
        # now, so that the first person to ask does not pay for it. Its audio is checked: a
        # model that loaded but says nothing, or noise, must not answer /ping as ready.
        require_speech(engine.synthesize(WARM_UP_TEXT, engine.default_voice, 1.0), weights)
        logger.info(
            "model ready in %.1f s on %s (warm-up synthesis %.0f ms): %d voices, default %s",
            time.perf_counter() - started,
            device,
            (time.perf_counter() - loaded) * 1000,
            len(packs),
            engine.default_voice,
        )
        return engine

    def _pipeline_for(self, voice: str) -> Any:
        """The pipeline that speaks ``voice``, which it holds on the device: a name it does not
        hold would send KPipeline to the model's hub for it."""
        if voice not in self.voice_packs:
            raise ValueError(f"voice {voice!r} is not loaded on {self.device}")
        return self.pipelines[voice[0]]

    def synthesize_stream(
        self, text: str, voice: str, speed: float
    ) -> Iterator[NDArray[np.float32]]:
        # On a GPU the whole chunk takes a few tens of milliseconds: one piece.
        yield self.synthesize(text, voice, speed)

    def synthesize(self, text: str, voice: str, speed: float) -> NDArray[np.float32]:
        # split_pattern=None: the synthesis layer already chose the chunk; KPipeline still splits
        # inside it at 510 phonemes, which is the model's own limit.
        parts = [
            result.audio.detach().cpu().numpy()
            for result in self._pipeline_for(voice)(
                text, voice=voice, speed=speed, split_pattern=None
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
        pipeline = self._pipeline_for(voice)
        vocabulary = pipeline.model.vocab
        results = [
            result
            for result in pipeline(text, voice=voice, speed=speed, split_pattern=None)
            if result.audio is not None
        ]
        if not results:
            yield np.zeros(0, dtype=np.float32)
            return
        fed = [fed_phonemes(result.phonemes, vocabulary) for result in results]
        by_word = phonemes_by_written_word(text, results, vocabulary)
        if by_word is not None:
            timer = WordTimer.for_phonemized_words(written_words(text), by_word, fed)
        else:
            # No tokens to read (espeak-ng's languages), or tokens that do not spell the
            # written words: each written word through the pipeline's own G2P alone.
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


def require_filled(model: Any, checkpoint: dict[str, Any], weights: Path) -> None:
    """``ModelAssetError`` unless ``checkpoint`` fills every tensor of ``model`` that Kokoro's
    release fills. KModel's own loader falls back to ``strict=False`` on any key mismatch, so a
    file of other weights (or none of the right names) would load as a model at its initial
    values, silently. Names the model does not have are only logged: a checkpoint saved by an
    older library may carry a buffer that is no longer saved (ALBERT's ``position_ids``), which
    the loader rightly ignores."""
    expected: set[str] = set()
    for top in MODEL_TOPS:
        for key in getattr(model, top).state_dict():
            if not any(part in f"{top}.{key}" for part in LEFT_AT_INITIAL_VALUES):
                expected.add(f"{top}.{key}")
    held: set[str] = set()
    for top, state in checkpoint.items() if isinstance(checkpoint, dict) else ():
        if isinstance(state, dict):
            held.update(f"{top}.{key.removeprefix('module.')}" for key in state)
    missing = sorted(expected - held)
    unknown = sorted(
        key for key in held - expected if not any(part in key for part in LEFT_AT_INITIAL_VALUES)
    )
    if missing:
        raise ModelAssetError(
            f"{weights} does not fill Kokoro-82M's model: {len(missing)} of its "
            f"{len(expected)} tensors missing ({', '.join(missing[:3])}...)"
        )
    if unknown:
        logger.warning(
            "%s holds %d names KModel does not use: %s", weights, len(unknown), unknown[:3]
        )


def require_speech(audio: NDArray[np.float32], weights: Path) -> None:
    """``ModelAssetError`` unless the warm-up's audio is speech-like: finite, not silent, and
    about as long as ``WARM_UP_TEXT`` takes to say."""
    seconds = len(audio) / SAMPLE_RATE
    problem = None
    if not np.all(np.isfinite(audio)):
        problem = "holds NaN or infinite samples"
    elif not WARM_UP_SECONDS[0] <= seconds <= WARM_UP_SECONDS[1]:
        problem = f"lasts {seconds:.2f} s, not {WARM_UP_SECONDS[0]}-{WARM_UP_SECONDS[1]} s"
    elif float(np.sqrt(np.mean(np.square(audio)))) < WARM_UP_MIN_RMS:
        problem = "is silent"
    if problem:
        raise ModelAssetError(
            f"the warm-up synthesis of {WARM_UP_TEXT!r} {problem}: {weights} does not speak"
        )


def phonemes_by_written_word(
    text: str, results: Sequence[Any], vocabulary: Container[str]
) -> list[str] | None:
    """Each written word's phonemes as the model was fed them, read from the tokens misaki
    already made in context (``KPipeline.Result.tokens``: text, trailing whitespace, phonemes),
    so word timings cost no G2P pass of their own before the chunk's first audio (one per word
    cost 15.7 ms for 13 words, 47 ms for 40, on a 2-core CPU). A written word is the tokens up to
    one followed by whitespace. None when the results carry no tokens (espeak-ng's languages)
    or their tokens do not spell ``text``'s words."""
    tokens = [token for result in results for token in (getattr(result, "tokens", None) or [])]
    if not tokens:
        return None
    words, spelled, phonemes = [], "", ""
    for token in tokens:
        spelled += token.text
        phonemes += token.phonemes or ""
        if token.whitespace:
            words.append((spelled, phonemes))
            spelled, phonemes = "", ""
    if spelled:
        words.append((spelled, phonemes))
    if [spelling for spelling, _ in words] != written_words(text):
        return None
    return [fed_phonemes(word_phonemes, vocabulary) for _, word_phonemes in words]


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
