"""Kokoro's ONNX graph split where its vocoder begins, so a chunk's first audio leaves after the
text side and one window of the vocoder instead of after the whole chunk.

On a CPU the vocoder (the iSTFTNet generator) is ~90% of a chunk's engine time and runs at ~0.2x
real time: a 5-word chunk's 2.5 s of audio cost ~530 ms of it. Everything before it (phonemes to
features: text encoder, durations, prosody, the decoder's low-rate blocks) costs ~65 ms. Split
there, the generator can decode the chunk's frames in windows, each sent as soon as it exists.

**The split** (``split_graph``, once per model, cached next to it, like ``model_rewrite``):

- the *text side*: ``tokens, style, speed`` -> ``durations`` (frames per token), ``features``
  (the generator's input, ``[1, 512, F]`` at 80 frames/s, 300 samples each), ``f0`` (the pitch
  curve at the same rate) and ``phase`` (the harmonic source's cumulative phase per frame, the
  ``CumSum`` inside its sine generator, ``[1, F, 9]``);
- the *vocoder*: ``features, f0, style, phase_offset`` -> ``audio``, where ``phase_offset`` is
  added to the sine generator's cumulative phase.

The vocoder's STFT runs as a strided convolution (``stft_convolution``: onnxruntime's own
kernel cost ~12 ms a call). Decoded whole, the two halves give the one-shot graph's samples to
float rounding (a test bounds it); the text side's, bit for bit.

**Windows** (``window_plan``, ``StreamedVocoder.windows``): a chunk is decoded in two calls
when that brings its first audio forward. The first decodes the chunk's beginning, up to the cut
plus ``LOOKAHEAD_FRAMES`` (so the convolutions before the cut see the frames after it), and its
audio up to the cut leaves at once. The second, made as the first plays, is the whole chunk's
decode, and the audio from the cut on is taken from it: the same samples as a chunk decoded whole,
bit for bit. The first window ends as early as it can while the second is still ready, with
``SPEED_MARGIN`` to spare, before the first has played out. The vocoder's speed that decides it
is the machine's measured one (``VocoderSpeed``, from the engine's tuning record,
``speech_server.engine_tuning``), never a live timing, so a text gets the same windows and the
same audio bytes on every run. The cut is then moved to the next word boundary (a space or a
punctuation token's start, from the text side's durations) when one comes within
``WORD_SNAP_FRAMES``, else to the next phoneme boundary: the join falls where the speech itself
changes, not inside a vowel. The two overlap by ``FADE_SAMPLES`` at the seam, crossfaded
linearly.

Why the whole chunk for the second call, not the frames after the cut with some context before
them: the generator's instance normalizations take their statistics over the frames they are
given. A window that starts part-way has other statistics than the chunk, so its audio differs
from the whole decode a little everywhere, and the seam joined two such differences (measured on
an AMD EPYC, 2026-12-04, 3 texts x 4 voices, ``voicewire bench engine --part streamed``: 3 of 12
seams over the check's limit, the worst 1.08, with 48 frames of context). Decoded from frame 0,
the second part is exact, and only the first window's side of the seam differs; with a 40 ms
crossfade into the exact audio, the worst seam was 0.94 and none failed. It costs the second
call the frames before the cut, made while the first window plays: a streamed chunk's vocoder
work is 1.26-1.56x its whole decode (it was 1.06-1.35x); a chunk decoded whole pays nothing.

``decode`` still takes any frame range with the harmonic source's phase carried in
(``phase_offset``: the cumulative phase the text side computed for the whole chunk), so a window
that does not start at frame 0 does not reset the harmonics.

On a CPU twice as slow as this project's (a vocoder real-time factor near 0.3) the whole decode
cannot hide behind a short chunk's first window, and a 5-word chunk is planned as one window;
what streaming gains there is the chunk schedule's to weigh (``first_audio_share``), and the
alternatives measured are in docs/decisions.md ("The streamed vocoder on a slower CPU").

A third window would bring the first audio forward by little: the second call must still be
ready before the first window has played, so the first cannot shrink much, and every seam costs
correlation. So there are at most two. A request's first chunk is streamed, and so is any chunk
the listener would otherwise wait for (``speech_server.synthesis``); the others are decoded whole
while the audio before them plays.
"""

from __future__ import annotations

import hashlib
import logging
import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from speech_server.model_assets import Progress, cache_dir
from speech_server.stft_convolution import replace_stft
from voicewire.cache_dir import written_atomically

logger = logging.getLogger(__name__)

SAMPLES_PER_FRAME = 300  # the generator's frames: 24 kHz / 80 frames per second
SAMPLE_RATE = 24_000
# Decoded after the first window's cut and dropped (0.5 s): what the listener waits for, so that
# the frames before the cut see what follows them; measured (voicewire bench engine --part
# streamed), 40 frames is the least that keeps the seam's frames no farther from the whole decode
# than the frames around them (32 did not, for two voices of four).
LOOKAHEAD_FRAMES = 40
# A cut closer than this to the chunk's end (1.2 s) saves too little of the whole decode to be
# worth a seam: the chunk is decoded in one call.
MIN_AFTER_CUT_FRAMES = 96
# 40 ms crossfade at the seam, from the first window's audio into the exact audio: measured, the
# worst seam over 12 text-voice pairs was 1.01 with 10 ms (over the check's limit), 0.99 with
# 20 ms, 0.94 with 40 ms, 0.98-0.99 with 60-150 ms.
FADE_SAMPLES = 960
MIN_FIRST_SPEECH_FRAMES = 16  # 0.2 s: the first window holds at least this much speech
SPEED_MARGIN = 1.5  # the second call must be ready with this much time to spare
WORD_SNAP_FRAMES = 6  # the seam moves up to 75 ms later to fall between words
DURATION_FRAMES = 2  # the text side's durations count 40 ms: two generator frames
# The leading pad token's frames, typically (24-36 over 3 texts x 4 voices): what a plan made
# before the text side has run assumes (``first_audio_share``).
TYPICAL_LEAD_FRAMES = 28
# Kokoro's vocabulary: punctuation marks are ids 1-15, the space 16 (kokoro_onnx's DEFAULT_VOCAB).
WORD_BOUNDARY_TOKENS = frozenset(range(1, 17))

# Tensor names in Kokoro-82M v1.0's ONNX export (the int8 graph from PyPI and its rewrite alike).
_FEATURES = "/decoder/decoder/decode.3/Div_4_output_0"  # last decoder block: the generator's input
_F0 = "/decoder/decoder/Unsqueeze_output_0"  # the pitch curve the generator's source follows
_DURATIONS = "/encoder/Cast_output_0"  # frames per token, after rounding
_SINE_PHASE_OP = "/decoder/decoder/generator/m_source/l_sin_gen/CumSum"
PHASE_OFFSET = "phase_offset"
# In the vocoder's cached file name: a new way of making it makes a new file. v2: its STFT is a
# convolution (stft_convolution); v3: without the STFT's constants it no longer reads.
SPLIT_VERSION = "v3"


class SplitFailed(RuntimeError):
    """The graph is not the export this split knows; the engine decodes chunks whole."""


@dataclass(frozen=True)
class SplitGraph:
    text_side: Path
    vocoder: Path


def split_graph(
    source: Path, directory: Path | None = None, progress: Progress = logger.info
) -> SplitGraph:
    """The two halves of ``source``, made once and cached by its sha256."""
    directory = directory or cache_dir()
    with source.open("rb") as handle:
        digest = hashlib.file_digest(handle, "sha256").hexdigest()[:12]
    split = SplitGraph(
        directory / f"{source.stem}.{digest}.text-side.onnx",
        directory / f"{source.stem}.{digest}.vocoder.{SPLIT_VERSION}.onnx",
    )
    if split.text_side.exists() and split.vocoder.exists():
        return split
    progress(f"splitting {source.name} where its vocoder begins (once)")
    text_side, vocoder = split_models(source)
    for model, target in ((text_side, split.text_side), (vocoder, split.vocoder)):
        with written_atomically(target) as partial:
            partial.write_bytes(model.SerializeToString())
    return split


def split_models(source: Path, *, stft_as_convolution: bool = True) -> tuple[Any, Any]:
    """The text side and the vocoder of ``source`` as onnx models; ``stft_as_convolution=False``
    keeps the vocoder's STFT operator (the halves then give the whole graph's samples exactly)."""
    import onnx
    from onnx import helper
    from onnx.utils import Extractor

    model = onnx.load(str(source))
    produced = {output for node in model.graph.node for output in node.output}
    phase = next((n.output[0] for n in model.graph.node if n.name == _SINE_PHASE_OP), None)
    missing = [name for name in (_FEATURES, _F0, _DURATIONS) if name not in produced]
    if phase is None or missing:
        raise SplitFailed(f"{source.name} is not Kokoro-82M v1.0's export (no {missing or phase})")
    inputs = [tensor.name for tensor in model.graph.input]
    audio = model.graph.output[0].name
    extractor = Extractor(model)
    text_side = extractor.extract_model(inputs, [_DURATIONS, _FEATURES, _F0, phase])
    vocoder = extractor.extract_model([_FEATURES, _F0, "style"], [audio])
    # The sine generator's cumulative phase, plus the phase the frames before this window reached.
    carried = f"{phase}_carried"
    for node in vocoder.graph.node:
        node.input[:] = [carried if name == phase else name for name in node.input]
    vocoder.graph.node.append(helper.make_node("Add", [phase, PHASE_OFFSET], [carried]))
    vocoder.graph.input.append(
        helper.make_tensor_value_info(PHASE_OFFSET, onnx.TensorProto.FLOAT, [1, 1, None])
    )
    if stft_as_convolution:
        replace_stft(vocoder)  # onnxruntime's STFT kernel: 12 ms a call, ~6% of a whole decode
    return text_side, vocoder


def open_sessions(split: SplitGraph) -> tuple[Any, Any]:
    """onnxruntime sessions for the text side and the vocoder, on the providers kokoro-onnx
    would use.

    Each session has its own intra-op thread pool, and by default a pool's threads spin for a
    while after a run, waiting for the next. The text side's spinning threads then compete with
    the vocoder's window that follows at once (and the vocoder's with the next chunk's text
    side): two pools on two cores. Measured on an AMD EPYC, 2 cores (2026-12-04, 5 words, 12
    runs interleaved over 4 processes each, ``bench/README.md``): with both pools spinning, text
    side 55-62 ms and first window 225-251 ms; the text side not spinning, 45 and 200-210 ms:
    first audio 244-258 ms against 280-322. The vocoder keeps its spinning: its windows follow
    each other, and with it off its whole decode was 3-5% slower. Neither half spinning made
    the text side 36 ms but the vocoder's second window 5-10% slower; one shared pool
    (``use_per_session_threads`` off) was slower than both.
    """
    import onnxruntime as ort
    from kokoro_onnx.session import resolve_providers

    providers = resolve_providers()
    text_side_options = ort.SessionOptions()
    text_side_options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    text_side = ort.InferenceSession(str(split.text_side), text_side_options, providers=providers)
    vocoder = ort.InferenceSession(str(split.vocoder), providers=providers)
    return text_side, vocoder


@dataclass(frozen=True)
class VocoderSpeed:
    """What one vocoder call costs on this machine: the window plan's cost model."""

    seconds_per_frame: float
    seconds_per_call: float = 0.0

    def seconds(self, frames: int) -> float:
        return self.seconds_per_call + self.seconds_per_frame * frames


# What a 2-core CPU's vocoder costs (AMD EPYC and Intel Xeon, 2026-12): a graph loaded without
# this machine's measured figures (engine_tuning) plans its windows with these.
DEFAULT_VOCODER_SPEED = VocoderSpeed(seconds_per_frame=0.003, seconds_per_call=0.005)


def text_side_inputs(
    tokens: Sequence[int], pack: NDArray[np.float32], speed: float
) -> tuple[dict[str, NDArray[Any]], NDArray[np.float32]]:
    """The text side's feed for one batch of token ids, and its style row: the voice pack's row
    for that many tokens, and the boundary pads around them (as kokoro-onnx builds them)."""
    style = np.asarray(pack[min(len(tokens), len(pack)) - 1], dtype=np.float32)
    inputs = {
        "tokens": np.array([[0, *tokens, 0]], dtype=np.int64),
        "style": style,
        "speed": np.array([speed], dtype=np.float32),
    }
    return inputs, style


@dataclass(frozen=True)
class TextSide:
    """What the text side gives for one batch of tokens."""

    durations: NDArray[np.int64]  # 40 ms units per token, the boundary pads included
    features: NDArray[np.float32]
    f0: NDArray[np.float32]
    phase: NDArray[np.float32]
    tokens: NDArray[np.int64] | None = None  # the ids the durations belong to, pads included

    @property
    def frames(self) -> int:
        return int(self.features.shape[-1])

    @property
    def leading_silence_frames(self) -> int:
        """The leading pad token's frames."""
        return int(self.durations.ravel()[0]) * DURATION_FRAMES

    def boundaries(self) -> tuple[list[int], list[int]]:
        """Frames where a token begins, inside the chunk: ``(phoneme, word)`` boundaries, the
        second those where a space or a punctuation token begins."""
        starts = np.cumsum(self.durations.ravel()) * DURATION_FRAMES
        starts = [int(s) for s in starts[:-1]]  # token i+1 begins where token i ends
        tokens = self.tokens.ravel()[1:] if self.tokens is not None else None
        phonemes = [s for s in starts if 0 < s < self.frames]
        words = [
            s
            for index, s in enumerate(starts)
            if 0 < s < self.frames
            and tokens is not None
            and index < len(tokens)
            and int(tokens[index]) in WORD_BOUNDARY_TOKENS
        ]
        return phonemes, words


def window_plan(
    frames: int,
    lead: int,
    speed: VocoderSpeed,
    phoneme_starts: Sequence[int] = (),
    word_starts: Sequence[int] = (),
) -> list[tuple[int, int]]:
    """Consecutive ``(start, end)`` frame ranges covering ``[0, frames)``: two, or one when two
    would not bring the first audio forward.

    The first window is as short as it can be while the second call (the whole chunk's decode),
    made as the first plays, is ready before it has played out: the first window's speech lasts
    ``first`` frames of 12.5 ms after the ``lead`` frames of silence the synthesis layer trims,
    and the whole decode costs ``speed`` for every frame, with ``SPEED_MARGIN`` to spare. The cut
    then moves to the next word start within ``WORD_SNAP_FRAMES``, else to the next phoneme
    start (later is safe: the first window only grows), as long as ``MIN_AFTER_CUT_FRAMES`` are
    left after it.
    """
    audio_per_frame = SAMPLES_PER_FRAME / SAMPLE_RATE
    first = math.ceil(SPEED_MARGIN * speed.seconds(frames) / audio_per_frame)
    cut = lead + max(first, MIN_FIRST_SPEECH_FRAMES)
    latest = frames - MIN_AFTER_CUT_FRAMES
    if cut > latest:
        return [(0, frames)]
    words = [s for s in word_starts if cut <= s <= min(latest, cut + WORD_SNAP_FRAMES)]
    phonemes = [s for s in phoneme_starts if cut <= s <= latest]
    cut = words[0] if words else phonemes[0] if phonemes else cut
    return [(0, cut), (cut, frames)]


class StreamedVocoder:
    """Runs the two halves of the split: the text side whole, the vocoder whole or in windows."""

    def __init__(self, text_side: Any, vocoder: Any, speed: VocoderSpeed) -> None:
        self.text_side_session = text_side
        self.vocoder_session = vocoder
        self.speed = speed  # the machine's, from the engine's tuning record: fixed for its life
        # While a list: each decode's frames and seconds are added to it (the engine's warm-up,
        # which checks its tuning record by them: engine_tuning.disagreement).
        self.timings: list[tuple[int, float]] | None = None

    def text_side(self, inputs: dict[str, NDArray[Any]]) -> TextSide:
        durations, features, f0, phase = self.text_side_session.run(None, inputs)
        return TextSide(durations, features, f0, phase, inputs.get("tokens"))

    def first_audio_share(self, frames: int) -> float:
        """A streamed chunk of ``frames``: its first window's decode over its whole decode, by
        the plan this machine's speed makes (1.0 when that plan is one window). What the chunk
        schedule expects of a streamed chunk before its text side exists: on a CPU twice as slow
        as this one, a 5-word chunk is decoded in one window, and its first audio comes no
        sooner streamed than whole."""
        plan = window_plan(frames, TYPICAL_LEAD_FRAMES, self.speed)
        if len(plan) == 1:
            return 1.0
        (_, cut), _ = plan
        return self.speed.seconds(min(frames, cut + LOOKAHEAD_FRAMES)) / self.speed.seconds(frames)

    def plan(self, text: TextSide) -> list[tuple[int, int]]:
        phonemes, words = text.boundaries()
        return window_plan(text.frames, text.leading_silence_frames, self.speed, phonemes, words)

    def whole(self, text: TextSide, style: NDArray[np.float32]) -> NDArray[np.float32]:
        """The chunk decoded in one call: the one-shot graph's samples exactly."""
        return self.decode(text, style, 0, text.frames)

    def windows(self, text: TextSide, style: NDArray[np.float32]) -> Iterator[NDArray[np.float32]]:
        """The chunk's audio, a window at a time; concatenated, as long as ``whole``'s."""
        for piece, _ in self.windows_and_ahead(text, style):
            yield piece

    def windows_and_ahead(
        self, text: TextSide, style: NDArray[np.float32]
    ) -> Iterator[tuple[NDArray[np.float32], NDArray[np.float32]]]:
        """Each window with the audio its decode made past it (the lookahead, and the fade the
        next window will blend): a close preview of the samples that follow the window, free
        since it was decoded anyway; what word timings read a word's end from before the next
        window exists (``onnx_engine``). Empty after the last window."""
        plan = self.plan(text)
        if len(plan) == 1:
            yield self.whole(text, style), np.zeros(0, np.float32)
            return
        (_, cut), _ = plan
        half_fade = FADE_SAMPLES // 2
        seam = cut * SAMPLES_PER_FRAME
        # The first window: its frames and half a fade, decoded with the lookahead after them.
        first = self.decode(text, style, 0, min(text.frames, cut + LOOKAHEAD_FRAMES))
        yield first[: seam - half_fade], first[seam - half_fade :]
        # The rest from the whole decode (exact), faded in from the first window's audio.
        rest = self.whole(text, style)[seam - half_fade :].copy()
        fade = np.linspace(0.0, 1.0, FADE_SAMPLES, dtype=np.float32)
        held = first[seam - half_fade : seam + half_fade]
        rest[:FADE_SAMPLES] = held * (1.0 - fade) + rest[:FADE_SAMPLES] * fade
        yield rest, np.zeros(0, np.float32)

    def decode(
        self, text: TextSide, style: NDArray[np.float32], lo: int, hi: int
    ) -> NDArray[np.float32]:
        """The vocoder over frames ``[lo, hi)`` of the chunk, its harmonic phase carried in."""
        offset = text.phase[:, lo - 1 : lo, :] if lo > 0 else np.zeros_like(text.phase[:, :1, :])
        feed = {
            _FEATURES: text.features[..., lo:hi],
            _F0: text.f0[..., lo:hi],
            "style": style,
            PHASE_OFFSET: offset,
        }
        started = time.perf_counter()
        audio = self.vocoder_session.run(None, feed)[0]
        if self.timings is not None:
            self.timings.append((hi - lo, time.perf_counter() - started))
        return np.asarray(audio, dtype=np.float32).ravel()
