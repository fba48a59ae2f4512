"""The graph split where Kokoro's vocoder begins, its windows, and a request's first chunk streamed.

The real model throughout: the split's halves against kokoro-onnx running the whole graph, the
windows against the whole decode, the synthesis layer's first frame against the engine's pieces.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import threading
from pathlib import Path

import numpy as np
import pytest
from conftest import PLANNED_SPEED
from hypothesis import given
from hypothesis import strategies as st
from kokoro_onnx import Kokoro

from speech_server.model_assets import bundled_model_path
from speech_server.model_rewrite import fast_model_path
from speech_server.official_voices import english_or_bundled_voices
from speech_server.streamed_vocoder import (
    FADE_SAMPLES,
    LOOKAHEAD_FRAMES,
    MIN_AFTER_CUT_FRAMES,
    MIN_FIRST_SPEECH_FRAMES,
    TYPICAL_LEAD_FRAMES,
    WORD_SNAP_FRAMES,
    SplitFailed,
    StreamedVocoder,
    VocoderSpeed,
    split_models,
    window_plan,
)
from speech_server.synthesis import EDGE_PAD_SECONDS, StreamedTrim, Synthesizer, trim_silence
from voicewire.voice_catalog import describe_voice
from voicewire_tools.bench.audio_similarity import heard_span, log_mel_correlation

FIVE_WORDS = "Your parcel arrives on Thursday."
CPU_SPEED = VocoderSpeed(0.003, 0.005)  # a 2-core CPU's vocoder
GPU_SPEED = VocoderSpeed(0.0001)
# The plan of ``planned_engine``: a quiet 2-core CPU's vocoder (1.6-2.0 ms a frame measured on
# an AMD EPYC). Five words (202-204 frames) get two windows, cut at the word start 28 frames
# before the latest cut (CPU_SPEED leaves 4).


@pytest.fixture(scope="module")
def whole_graph_path(onnx_engine) -> Path:
    """The unsplit graph the engine splits (the one this machine's tuning record chose)."""
    original = bundled_model_path()
    return fast_model_path(original) if onnx_engine.graph == "fast" else original


@pytest.fixture(scope="module")
def whole_graph(whole_graph_path) -> Kokoro:
    """kokoro-onnx on the unsplit graph the engine splits: the reference."""
    voices, _ = english_or_bundled_voices()
    return Kokoro(str(whole_graph_path), str(voices))


SPLIT_TEXTS = (FIVE_WORDS, "Hello! We fixed the billing error, and the refund arrives soon.")


def test_the_split_halves_give_the_whole_graphs_samples_exactly(
    onnx_engine, whole_graph, whole_graph_path, tmp_path
):
    """With the vocoder's STFT kept as the operator, the two halves are the whole graph cut in
    two: the same samples, bit for bit."""
    import onnx
    from kokoro_onnx.session import create_session

    text_side, vocoder = split_models(whole_graph_path, stft_as_convolution=False)
    for model, name in ((text_side, "text-side.onnx"), (vocoder, "vocoder.onnx")):
        onnx.save(model, str(tmp_path / name))
    kept = dataclasses.replace(
        onnx_engine,
        vocoder=StreamedVocoder(
            create_session(str(tmp_path / "text-side.onnx")),
            create_session(str(tmp_path / "vocoder.onnx")),
            onnx_engine.vocoder.speed,
        ),
    )
    for text in SPLIT_TEXTS:
        reference, _ = whole_graph.create(text, voice="af_heart", lang="en-us", trim=False)
        split = kept.synthesize(text, "af_heart", 1.0)
        assert split.shape == reference.shape
        assert np.array_equal(split, reference)


@pytest.mark.parametrize("voice", ["af_heart", "bm_george"])
def test_the_engines_split_sounds_as_the_whole_graph(onnx_engine, whole_graph, voice):
    """The engine's vocoder runs its STFT as a convolution (stft_convolution): the same length,
    and a spectrogram within float rounding and the exactly-real bins' phase of the whole
    graph's (measured 0.997 at worst over 16 text-voice pairs)."""
    assert onnx_engine.vocoder is not None, "the default engine runs the split graph"
    for text in SPLIT_TEXTS:
        lang = describe_voice(voice).espeak  # the engine's: en-gb for a British voice
        reference, _ = whole_graph.create(text, voice=voice, lang=lang, trim=False)
        split = onnx_engine.synthesize(text, voice, 1.0)
        assert split.shape == reference.shape
        assert log_mel_correlation(split, reference) > 0.99


def test_a_graph_the_split_does_not_know_is_refused_by_name(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Identity", ["tokens"], ["audio"])],
        "not-kokoro",
        [helper.make_tensor_value_info("tokens", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("audio", TensorProto.FLOAT, [1])],
    )
    path = tmp_path / "other.onnx"
    onnx.save(helper.make_model(graph), str(path))
    with pytest.raises(SplitFailed, match=r"other\.onnx is not Kokoro-82M"):
        split_models(path)


@pytest.mark.parametrize("speed", [CPU_SPEED, GPU_SPEED], ids=["cpu", "gpu"])
def test_the_windows_are_the_whole_decode_with_one_seam(onnx_engine, speed):
    vocoder = onnx_engine.vocoder
    reference = onnx_engine.synthesize(FIVE_WORDS, "af_heart", 1.0)
    measured, vocoder.speed = vocoder.speed, speed
    try:
        pieces = list(onnx_engine.synthesize_stream(FIVE_WORDS, "af_heart", 1.0))
    finally:
        vocoder.speed = measured
    assert len(pieces) == 2
    streamed = np.concatenate(pieces)
    assert streamed.shape == reference.shape
    heard = heard_span(reference)  # what a listener hears: the synthesis layer trims the rest
    assert log_mel_correlation(streamed[heard], reference[heard]) > 0.97
    # After the crossfade, the second piece is the whole decode's audio, bit for bit.
    after_fade = len(pieces[0]) + FADE_SAMPLES
    assert np.array_equal(streamed[after_fade:], reference[after_fade:])
    assert not np.array_equal(streamed[: len(pieces[0])], reference[: len(pieces[0])])
    # The faster the vocoder, the shorter the first window.
    if speed == GPU_SPEED:
        assert len(pieces[0]) < len(pieces[1])


def test_the_seam_carries_the_harmonic_phase(onnx_engine):
    """Without the carried phase a window's harmonics restart at zero: further from the whole
    decode than with it."""
    vocoder = onnx_engine.vocoder
    text_side, style = next(onnx_engine.text_sides(FIVE_WORDS, "af_heart", 1.0))
    reference = vocoder.whole(text_side, style)
    context = 48  # frames decoded before the window and dropped
    start = text_side.leading_silence_frames + 40
    lo, hi = start - context, text_side.frames
    restarted_phase = dataclasses.replace(text_side, phase=np.zeros_like(text_side.phase))
    wanted = reference[start * 300 : (hi - context) * 300]

    def error(side) -> float:
        window = vocoder.decode(side, style, lo, hi)
        kept = window[(start - lo) * 300 : (hi - context - lo) * 300]
        return float(np.abs(kept - wanted).mean())

    assert error(text_side) < error(restarted_phase) / 2


@given(
    frames=st.integers(1, 2000),
    lead=st.integers(0, 80),
    seconds_per_frame=st.floats(0.00001, 0.02),
    seconds_per_call=st.floats(0.0, 0.05),
    starts=st.lists(st.integers(0, 2000), max_size=40),
    data=st.data(),
)
def test_window_plan_covers_every_frame_once(
    frames, lead, seconds_per_frame, seconds_per_call, starts, data
):
    phonemes = sorted(set(starts))
    words = sorted(data.draw(st.sets(st.sampled_from(phonemes))) if phonemes else [])
    speed = VocoderSpeed(seconds_per_frame, seconds_per_call)
    plan = window_plan(frames, lead, speed, phonemes, words)
    assert plan[0][0] == 0 and plan[-1][1] == frames
    assert all(end == start for (_, end), (start, _) in itertools.pairwise(plan))
    assert 1 <= len(plan) <= 2
    if len(plan) == 2:
        cut, _ = plan[1]
        unsnapped, _ = window_plan(frames, lead, speed)[1]
        assert cut >= unsnapped >= min(frames, lead + MIN_FIRST_SPEECH_FRAMES)
        assert frames - cut >= MIN_AFTER_CUT_FRAMES  # a second window worth its seam
        # The cut moves to the first word start within reach, else the next phoneme start.
        near_words = [w for w in words if unsnapped <= w <= unsnapped + WORD_SNAP_FRAMES]
        if near_words and near_words[0] <= frames - MIN_AFTER_CUT_FRAMES:
            assert cut == near_words[0]
        elif cut != unsnapped:
            assert cut in phonemes and not [p for p in phonemes if unsnapped <= p < cut]


def test_a_slower_vocoder_gets_a_longer_first_window():
    fast = window_plan(400, 28, VocoderSpeed(0.001))
    slow = window_plan(400, 28, VocoderSpeed(0.004))
    costly_calls = window_plan(400, 28, VocoderSpeed(0.001, 0.1))
    assert fast[0][1] < slow[0][1] and fast[0][1] < costly_calls[0][1]


def test_the_first_audio_share_follows_the_plan_this_machines_speed_makes(planned_engine):
    vocoder = planned_engine.vocoder
    measured = vocoder.speed
    try:
        vocoder.speed = VocoderSpeed(0.0018, 0.005)  # this 2-core AMD EPYC, quiet
        (_, cut), _ = window_plan(202, TYPICAL_LEAD_FRAMES, vocoder.speed)
        quick = vocoder.first_audio_share(202)  # a 5-word chunk
        assert quick == pytest.approx(
            vocoder.speed.seconds(cut + LOOKAHEAD_FRAMES) / vocoder.speed.seconds(202)
        )
        assert quick < 0.7
        # Twice as slow (measured with a CPU hog on each core): one window, no gain streamed.
        vocoder.speed = VocoderSpeed(0.00364, 0.004)
        assert vocoder.first_audio_share(202) == 1.0
        assert vocoder.first_audio_share(594) < 1.0  # 24 words still gain
    finally:
        vocoder.speed = measured


def test_the_seam_falls_between_words(planned_engine):
    text_side, _ = next(planned_engine.text_sides(FIVE_WORDS, "af_heart", 1.0))
    assert int(text_side.durations.sum()) * 2 == text_side.frames  # durations count two frames
    phonemes, words = text_side.boundaries()
    assert set(words) <= set(phonemes) and len(words) >= 4  # the spaces between five words
    plan = planned_engine.vocoder.plan(text_side)
    assert len(plan) == 2, f"{text_side.frames} frames, one window: {plan}"
    (_, cut), _ = plan
    assert cut in words or cut in phonemes


@given(
    audio=st.lists(
        st.sampled_from([0.0, 0.004, -0.005, 0.02, -0.3, 0.5]), min_size=0, max_size=300
    ),
    cuts=st.lists(st.integers(0, 300), max_size=6),
)
def test_streamed_trim_keeps_what_the_whole_trim_keeps(audio, cuts):
    samples = np.array(audio, dtype=np.float32)
    rate = int(10 / EDGE_PAD_SECONDS)  # a 10-sample pad, so short lists exercise it
    bounds = [0, *sorted(min(cut, len(samples)) for cut in cuts), len(samples)]
    trim = StreamedTrim(rate)
    kept = [trim.push(samples[lo:hi]) for lo, hi in itertools.pairwise(bounds)]
    streamed = np.concatenate([*kept, trim.finish()])
    assert np.array_equal(streamed, trim_silence(samples, rate))


class RecordingEngine:
    """The real engine, noting when each streamed piece is made."""

    def __init__(self, engine):
        self._engine = engine
        self.name, self.sample_rate = engine.name, engine.sample_rate
        self.voices, self.default_voice = engine.voices, engine.default_voice
        self.events: list[str] = []
        self.lock = threading.Lock()

    def synthesize(self, text, voice, speed):
        audio = self._engine.synthesize(text, voice, speed)
        self._note("whole")
        return audio

    def synthesize_stream(self, text, voice, speed):
        for piece in self._engine.synthesize_stream(text, voice, speed):
            self._note("piece")
            yield piece

    def _note(self, event: str) -> None:
        with self.lock:
            self.events.append(event)


def test_a_requests_first_frame_leaves_before_its_first_chunk_is_decoded(planned_engine):
    """With the engine's own plan: two windows for the first chunk, and a schedule that takes
    the engine as keeping up (a machine's measured speed would stream the second chunk too where
    the first chunk's audio ahead of it looked short, which is the schedule's call, tested in
    test_chunk_schedule, not this test's)."""
    recording = RecordingEngine(planned_engine)
    synthesizer = Synthesizer(recording)

    async def speak() -> bytes:
        audio = b""
        async for frame in synthesizer.pcm_frames(
            FIVE_WORDS + " Then it goes to your door.", "af_heart", 1.0
        ):
            if not audio:
                recording._note("first frame")
            audio += frame.pcm
        return audio

    try:
        audio = asyncio.run(speak())
    finally:
        synthesizer.close()
    # The first chunk comes in pieces, its first frame sent before the second is decoded; the
    # second chunk is decoded whole while the first plays.
    assert recording.events == ["piece", "first frame", "piece", "whole"]
    assert len(audio) > 24000 * 2 * 2  # over two seconds of speech


def test_the_streamed_audio_is_the_same_bytes_on_every_run(planned_engine, whole_graph_path):
    """The window plan comes from the speed the engine was given (in the server, its tuning
    record's), not from live timings: a second engine, loaded afresh with the same speed, and
    the first engine after a slow whole decode give the same bytes. (A fresh engine from the
    settings may legitimately measure again, when its warm-up disagrees with the record:
    test_engine_tuning.)"""
    from speech_server.engines.onnx_engine import KokoroOnnxEngine

    def streamed(engine) -> tuple[int, bytes]:
        """How many windows, and their bytes."""
        pieces = list(engine.synthesize_stream(FIVE_WORDS, "am_michael", 1.0))
        return len(pieces), np.concatenate(pieces).tobytes()

    first = streamed(planned_engine)
    assert first[0] == 2  # a seam to move, had a timing decided it
    planned_engine.synthesize("A longer text decoded whole in between, " * 3, "am_michael", 1.0)
    again = streamed(planned_engine)
    voices, _ = english_or_bundled_voices()
    fresh = KokoroOnnxEngine.load(
        whole_graph_path, voices, graph=planned_engine.graph, speed=PLANNED_SPEED
    )
    assert fresh.vocoder.speed == planned_engine.vocoder.speed  # the given one, not a timing
    assert first == again == streamed(fresh)


def test_only_the_vocoder_keeps_its_threads_spinning_between_runs(onnx_engine):
    """The engine's two sessions each have a thread pool on the same cores: the text side's
    threads sleep once it is done, so they take nothing from the vocoder window that follows at
    once (measured: 10-15% of a 5-word first audio); the vocoder's windows follow each other,
    so its threads keep spinning, onnxruntime's default."""
    spinning = "session.intra_op.allow_spinning"
    text_side = onnx_engine.vocoder.text_side_session.get_session_options()
    vocoder = onnx_engine.vocoder.vocoder_session.get_session_options()
    assert text_side.get_session_config_entry(spinning) == "0"
    with pytest.raises(Exception, match="does not have configuration"):
        vocoder.get_session_config_entry(spinning)  # unset: onnxruntime's default, spinning
