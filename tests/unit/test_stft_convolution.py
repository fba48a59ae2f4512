"""The vocoder's STFT as a strided convolution: the DFT numpy computes, exactly real where a real
signal's DFT is, and the phase of those bins taken as torch.atan2 takes it.

Each graph here runs on onnxruntime: the operator the rewrite replaces, and what replaces it.
"""

from __future__ import annotations

import math

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from speech_server.stft_convolution import dft_weights, replace_stft

HOP, LENGTH = 5, 20  # Kokoro's generator: 20-sample Hann frames every 5 samples
WINDOW = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(LENGTH) / LENGTH)).astype(np.float32)
SAMPLES = 2_000


def stft_model(window_input: bool = False, phase: bool = False):
    """``signal [1, n]`` -> ``STFT`` -> ``Transpose`` to ``[1, bins, frames, 2]``, as in Kokoro's
    export; with ``phase``, also the export's atan2 of the bins (``Atan`` of imag/real, then plus
    or minus pi by the imaginary part's sign where the real part is negative)."""
    constants = [
        numpy_helper.from_array(np.array(HOP, np.int64), "hop"),
        numpy_helper.from_array(np.array(LENGTH, np.int64), "length"),
        numpy_helper.from_array(np.array(0, np.int64), "real_index"),
        numpy_helper.from_array(np.array(1, np.int64), "imag_index"),
        numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
        numpy_helper.from_array(np.array(math.pi, np.float32), "pi"),
    ]
    inputs = [helper.make_tensor_value_info("signal", TensorProto.FLOAT, [1, None])]
    if window_input:
        inputs.append(helper.make_tensor_value_info("window", TensorProto.FLOAT, [LENGTH]))
    else:
        constants.append(numpy_helper.from_array(WINDOW, "window"))
    nodes = [
        helper.make_node("STFT", ["signal", "hop", "window", "length"], ["stft"], onesided=1),
        helper.make_node("Transpose", ["stft"], ["spectrum"], perm=[0, 2, 1, 3]),
    ]
    outputs = [helper.make_tensor_value_info("spectrum", TensorProto.FLOAT, None)]
    if phase:
        nodes += [
            helper.make_node("Gather", ["spectrum", "real_index"], ["real"], axis=3),
            helper.make_node("Gather", ["spectrum", "imag_index"], ["imag"], axis=3),
            helper.make_node("Div", ["imag", "real"], ["ratio"]),
            helper.make_node("Atan", ["ratio"], ["atan"]),
            helper.make_node("Greater", ["imag", "zero"], ["upper"]),
            helper.make_node("Add", ["atan", "pi"], ["plus_pi"]),
            helper.make_node("Sub", ["atan", "pi"], ["minus_pi"]),
            helper.make_node("Where", ["upper", "plus_pi", "minus_pi"], ["turned"]),
            helper.make_node("Less", ["real", "zero"], ["left"]),
            helper.make_node("Where", ["left", "turned", "atan"], ["phase"]),
        ]
        outputs.append(helper.make_tensor_value_info("phase", TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "stft", inputs, outputs, initializer=constants)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def run(model, **feed: np.ndarray) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feed)


def numpy_stft(signal: np.ndarray) -> np.ndarray:
    """``[bins, frames]`` complex, in float64: the reference."""
    frames = np.lib.stride_tricks.sliding_window_view(signal.astype(np.float64), LENGTH)[::HOP]
    return np.fft.rfft(frames * WINDOW, axis=-1).T


@pytest.fixture
def signal() -> np.ndarray:
    return np.random.default_rng(7).standard_normal(SAMPLES).astype(np.float32)


def test_the_convolution_is_the_operators_dft(signal):
    model = stft_model()
    (expected,) = run(model, signal=signal[None])
    assert replace_stft(model) == 1
    assert "STFT" not in {node.op_type for node in model.graph.node}
    (spectrum,) = run(model, signal=signal[None])
    frames = (SAMPLES - LENGTH) // HOP + 1
    assert spectrum.shape == expected.shape == (1, LENGTH // 2 + 1, frames, 2)
    reference = numpy_stft(signal)
    assert np.abs(spectrum[0, ..., 0] - reference.real).max() < 1e-4
    assert np.abs(spectrum[0, ..., 1] - reference.imag).max() < 1e-4
    assert np.abs(spectrum - expected).max() < 1e-4  # and the operator agrees, to rounding


def test_a_real_signals_dc_and_nyquist_bins_are_exactly_real(signal):
    model = stft_model()
    replace_stft(model)
    (spectrum,) = run(model, signal=signal[None])
    assert np.all(spectrum[0, 0, :, 1] == 0.0)
    assert np.all(spectrum[0, LENGTH // 2, :, 1] == 0.0)
    weights = dft_weights(WINDOW, onesided=True)
    assert not np.signbit(weights[LENGTH // 2 + 1]).any()  # the DC row of sines: +0, not -0


def test_the_phase_of_an_exactly_real_bin_is_torchs_atan2():
    """A negative constant's DC bin is real and negative: torch.atan2(+0, x < 0) is +pi, where
    the export's own test (imag > 0) would give -pi."""
    model = stft_model(phase=True)
    replace_stft(model)
    signal = np.full(SAMPLES, -0.5, np.float32)
    _, phase = run(model, signal=signal[None])
    reference = numpy_stft(signal)
    assert np.allclose(phase[0, 0], np.arctan2(0.0, reference.real[0]), atol=1e-6)
    assert np.allclose(phase[0, 0], math.pi, atol=1e-6)


def test_the_phase_elsewhere_is_atan2(signal):
    model = stft_model(phase=True)
    replace_stft(model)
    spectrum, phase = run(model, signal=signal[None])
    inner = slice(1, LENGTH // 2)  # bins with a real imaginary part
    expected = np.arctan2(spectrum[0, inner, :, 1], spectrum[0, inner, :, 0])
    assert np.abs(phase[0, inner] - expected).max() < 1e-5


def test_an_stft_whose_window_comes_at_run_time_is_kept(signal):
    model = stft_model(window_input=True)
    assert replace_stft(model) == 0
    assert "STFT" in {node.op_type for node in model.graph.node}
    (spectrum,) = run(model, signal=signal[None], window=WINDOW)
    assert np.abs(spectrum[0, ..., 0] - numpy_stft(signal).real).max() < 1e-4


def test_the_operators_constants_go_with_it(signal):
    """The replaced STFT's window, hop and length are read by no node any more: they leave the
    graph (onnxruntime would warn at every session that it removes them); the atan2's constants,
    still read, stay."""
    model = stft_model(phase=True)
    replace_stft(model)
    left = {tensor.name for tensor in model.graph.initializer}
    assert not {"hop", "window", "length"} & left
    assert {"zero", "pi", "real_index", "imag_index"} <= left
    (phase,) = run(model, signal=signal[None])[1:]  # the graph still runs whole
    assert np.isfinite(phase).all()
