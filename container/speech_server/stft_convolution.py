"""The vocoder's STFT as the strided convolution it is, because onnxruntime's CPU ``STFT`` kernel
is slow for the generator's short frames.

Kokoro's generator takes the STFT of its harmonic source (20-sample Hann frames every 5 samples,
onesided: 11 bins) before the noise convolutions. onnxruntime runs its ``STFT`` operator on one
thread, frame by frame: 11.7 ms for a 114-frame window's 34,220 samples on an AMD EPYC (2 cores,
2026-12-04), ~6% of that window's vocoder time, on every vocoder call. The same transform is a
``Conv`` with one output channel per bin's real and imaginary part (the window times the DFT's
cosines and minus its sines as weights, the hop as stride), which MLAS runs in 0.1 ms.

``replace_stft`` swaps each ``STFT`` node whose hop, window and frame length are constants for
``Reshape`` (the signal as one channel) -> ``Conv`` -> ``Reshape`` -> ``Transpose`` into the
operator's own output layout ``[batch, frames, bins, 2]``, so the nodes after it are untouched.
The values are the same DFT summed in another order: they agree to float rounding, except where
the DFT is exactly real.

**Exactly real bins.** A real signal's DC and Nyquist bins have no imaginary part. torch.stft, as
Kokoro was trained, gives exactly 0 there; onnxruntime's STFT leaves ~1e-6 of either sign. The
convolution's weights are exact zeros there too (``dft_weights``), so the graph's phase of those
bins is decided by how it takes ``atan2(0, x)`` for ``x < 0``. The export writes atan2 as
``Atan(imag / real)`` plus or minus pi by ``imag > 0``, which gives -pi for a zero imaginary part
where ``torch.atan2(+0, x)`` gives +pi. ``replace_stft`` makes that test ``imag >= 0``:
torch's answer. Measured over 4 texts and 4 voices (2026-12-04), the log-mel correlation of the
whole decode with onnxruntime's STFT is 0.997 at worst with that convention, 0.978 without it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray


def dft_weights(window: NDArray[np.float32], onesided: bool) -> NDArray[np.float32]:
    """``Conv`` weights ``[2 * bins, 1, frame_length]``: the real parts' rows, then the
    imaginary parts', as ONNX's STFT defines them (``X[k] = sum x[n] w[n] e^(-2 pi i k n / N)``)."""
    length = len(window)
    bins = length // 2 + 1 if onesided else length
    # k * n reduced modulo N first, so the angles are exact fractions of a turn; the cosines and
    # sines that are zero in the DFT are then made exactly +0 (float64's sin(pi) is 1.2e-16).
    # That keeps a real signal's DC and Nyquist bins exactly real, as torch.stft gives them when
    # Kokoro is trained, and the phase the graph takes of them (an atan2 of the imaginary part)
    # the same on every frame: onnxruntime's STFT leaves ~1e-6 there, of either sign.
    turns = np.outer(np.arange(bins), np.arange(length)) % length
    angle = 2 * np.pi * turns / length
    cosine, sine = np.cos(angle), np.sin(angle)
    cosine[np.abs(cosine) < 1e-9] = 0.0
    sine[np.abs(sine) < 1e-9] = 0.0
    real = window * cosine
    imaginary = 0.0 - window * sine  # 0 - (+0) is +0, where -(+0) would be -0
    return np.concatenate([real, imaginary]).astype(np.float32)[:, None, :]


def replace_stft(model: Any) -> int:
    """Replace, in place, each ``STFT`` node of ``model`` (an onnx ``ModelProto``) that has
    constant parameters by its convolution; returns how many were replaced. Others stay."""
    from onnx import helper, numpy_helper

    graph = model.graph
    constants = {tensor.name: tensor for tensor in graph.initializer}

    def constant(name: str) -> NDArray[Any] | None:
        tensor = constants.get(name)
        return None if tensor is None else numpy_helper.to_array(tensor)

    replaced = 0
    freed: set[str] = set()  # the replaced operators' constant inputs
    nodes = list(graph.node)
    for node in nodes:
        if node.op_type != "STFT":
            continue
        inputs = [*node.input, "", "", ""][:4]
        signal, step_name, window_name, length_name = inputs
        step = constant(step_name)
        window = constant(window_name) if window_name else None
        length = constant(length_name) if length_name else None
        if not window_name and length is not None:
            window = np.ones(int(length), np.float32)  # no window: a rectangular one
        if step is None or window is None or (length is not None and int(length) != len(window)):
            continue  # parameters known only at run time: keep the operator
        onesided = next((a.i for a in node.attribute if a.name == "onesided"), 1) == 1
        weights = dft_weights(np.asarray(window, np.float32), onesided)
        bins = weights.shape[0] // 2
        prefix = f"{node.name or node.output[0]}/as_convolution"
        graph.initializer.extend(
            [
                numpy_helper.from_array(weights, f"{prefix}/weights"),
                numpy_helper.from_array(np.array([0, 1, -1], np.int64), f"{prefix}/one_channel"),
                numpy_helper.from_array(np.array([0, 2, bins, -1], np.int64), f"{prefix}/parts"),
            ]
        )
        replacement = [
            # [batch, samples] or [batch, samples, 1] -> [batch, 1, samples]
            helper.make_node("Reshape", [signal, f"{prefix}/one_channel"], [f"{prefix}/signal"]),
            # -> [batch, 2 * bins, frames]: real parts, then imaginary parts
            helper.make_node(
                "Conv",
                [f"{prefix}/signal", f"{prefix}/weights"],
                [f"{prefix}/spectrum"],
                kernel_shape=[len(window)],
                strides=[int(step)],
            ),
            # -> [batch, 2, bins, frames] -> [batch, frames, bins, 2], the STFT's own layout
            helper.make_node(
                "Reshape", [f"{prefix}/spectrum", f"{prefix}/parts"], [f"{prefix}/parts_out"]
            ),
            helper.make_node(
                "Transpose", [f"{prefix}/parts_out"], [node.output[0]], perm=[0, 3, 2, 1]
            ),
        ]
        freed.update(name for name in (step_name, window_name, length_name) if name in constants)
        position = list(graph.node).index(node)
        graph.node.remove(node)
        for offset, new_node in enumerate(replacement):
            graph.node.insert(position + offset, new_node)
        replaced += 1
    if replaced:
        _atan2_of_zero_as_torch(graph)
        _drop_unread(graph, freed)
    return replaced


def _drop_unread(graph: Any, names: set[str]) -> None:
    """Remove the initializers among ``names`` that no node reads any more (at any depth: a
    subgraph may read its outer graph's constants), so onnxruntime does not warn, once per
    session, that it removes them."""
    read = _inputs_read(graph)
    unread = [tensor for tensor in graph.initializer if tensor.name in names - read]
    for tensor in unread:
        graph.initializer.remove(tensor)


def _inputs_read(graph: Any) -> set[str]:
    from onnx import AttributeProto

    read: set[str] = set()
    for node in graph.node:
        read.update(node.input)
        for attribute in node.attribute:
            if attribute.type == AttributeProto.GRAPH:
                read |= _inputs_read(attribute.g)
            elif attribute.type == AttributeProto.GRAPHS:
                for subgraph in attribute.graphs:
                    read |= _inputs_read(subgraph)
    read.update(output.name for output in graph.output)
    return read


def _atan2_of_zero_as_torch(graph: Any) -> None:
    """The export's atan2, ``Where(imag > 0, Atan(imag/real) + pi, Atan(imag/real) - pi)`` where
    the real part is negative, takes ``imag >= 0`` instead: ``torch.atan2(+0, x < 0)`` is +pi."""
    producer = {output: node for node in graph.node for output in node.output}

    def made_by(name: str, op_type: str) -> Any | None:
        node = producer.get(name)
        return node if node is not None and node.op_type == op_type else None

    def from_atan(node: Any | None) -> bool:
        return node is not None and any(made_by(name, "Atan") for name in node.input)

    for node in graph.node:
        if node.op_type != "Where":
            continue
        condition = made_by(node.input[0], "Greater")
        plus_pi, minus_pi = made_by(node.input[1], "Add"), made_by(node.input[2], "Sub")
        if condition is not None and from_atan(plus_pi) and from_atan(minus_pi):
            condition.op_type = "GreaterOrEqual"
