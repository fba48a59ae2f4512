"""The int8 graph's rewrite: the same computation in float, 1-D convolutions as 2-D ones.

A small graph in the exact shape of Kokoro's dynamic quantization (DynamicQuantizeLinear ->
ConvInteger -> Add(quantized bias) -> Cast -> Mul, and the MatMulInteger chain) is run through
onnxruntime before and after; then the real model, as the server loads it.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from speech_server import model_rewrite
from speech_server.model_rewrite import convolutions_as_2d, dequantize, fast_model_path

RNG = np.random.default_rng(7)


def quantized_graph() -> onnx.ModelProto:
    """x [1, 4, 16] -> quantized Conv (k=3, bias) -> y; y^T [1, 16, 4] -> quantized MatMul."""
    rng = np.random.default_rng(11)  # the same graph every call
    weights = rng.integers(-100, 100, size=(6, 4, 3), dtype=np.int8)
    matrix = rng.integers(-100, 100, size=(6, 5), dtype=np.int8)
    bias = rng.standard_normal(6).astype(np.float32)
    inits = [
        numpy_helper.from_array(weights, "w_q"),
        numpy_helper.from_array(np.array(3, dtype=np.int8), "w_zp"),
        numpy_helper.from_array(np.array(0.02, dtype=np.float32), "w_scale"),
        numpy_helper.from_array(bias, "b"),
        numpy_helper.from_array(np.array([1, 6, 1], dtype=np.int64), "b_shape"),
        numpy_helper.from_array(matrix, "m_q"),
        numpy_helper.from_array(np.array(-2, dtype=np.int8), "m_zp"),
        numpy_helper.from_array(np.array(0.01, dtype=np.float32), "m_scale"),
    ]
    nodes = [
        helper.make_node("DynamicQuantizeLinear", ["x"], ["x_q", "x_s", "x_zp"]),
        helper.make_node(
            "ConvInteger",
            ["x_q", "w_q", "x_zp", "w_zp"],
            ["c_i"],
            name="conv_quant",
            kernel_shape=[3],
            pads=[1, 1],
            strides=[1],
            dilations=[1],
            group=1,
        ),
        helper.make_node("Mul", ["x_s", "w_scale"], ["b_scale"]),
        helper.make_node("Div", ["b", "b_scale"], ["b_div"]),
        helper.make_node("Floor", ["b_div"], ["b_floor"]),
        helper.make_node("Cast", ["b_floor"], ["b_int"], to=TensorProto.INT32),
        helper.make_node("Reshape", ["b_int", "b_shape"], ["b_q"]),
        helper.make_node("Add", ["c_i", "b_q"], ["c_b"]),
        helper.make_node("Cast", ["c_b"], ["c_f"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["c_f", "b_scale"], ["conv"]),
        helper.make_node("Transpose", ["conv"], ["t"], perm=[0, 2, 1]),
        helper.make_node("DynamicQuantizeLinear", ["t"], ["t_q", "t_s", "t_zp"]),
        helper.make_node("MatMulInteger", ["t_q", "m_q", "t_zp", "m_zp"], ["m_i"], name="mm_quant"),
        helper.make_node("Cast", ["m_i"], ["m_f"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["t_s", "m_scale"], ["m_s"]),
        helper.make_node("Mul", ["m_f", "m_s"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "quantized",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 5])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])


def quantize(values: np.ndarray) -> tuple[np.ndarray, np.float32, np.int64]:
    """ONNX's DynamicQuantizeLinear: uint8 over [min(0, x), max(0, x)], zero point rounded."""
    low, high = min(0.0, float(values.min())), max(0.0, float(values.max()))
    scale = np.float32((high - low) / 255)
    zero = np.int64(np.clip(np.rint(-low / scale), 0, 255))
    return np.clip(np.rint(values / scale) + zero, 0, 255).astype(np.int64), scale, zero


def quantized_reference(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    """The quantized graph's arithmetic exactly (integer sums in int64): what its int8 nodes
    mean, whatever a CPU's integer kernels do with them."""
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    x_q, x_s, x_zp = quantize(x[0])
    w = inits["w_q"].astype(np.int64) - int(inits["w_zp"])
    padded = np.pad(x_q - x_zp, ((0, 0), (1, 1)))
    conv = np.stack([[(w[o] * padded[:, t : t + 3]).sum() for t in range(16)] for o in range(6)])
    b_scale = np.float32(x_s * inits["w_scale"])
    conv = (conv + np.floor(inits["b"] / b_scale).astype(np.int64)[:, None]) * b_scale
    t_q, t_s, t_zp = quantize(conv.T.astype(np.float32))
    product = (t_q - t_zp) @ (inits["m_q"].astype(np.int64) - int(inits["m_zp"]))
    return (product * (t_s * inits["m_scale"]))[None].astype(np.float32)


def run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(["y"], {"x": x})[0]


def test_the_rewrite_is_the_same_computation_in_float():
    x = RNG.standard_normal((1, 4, 16)).astype(np.float32)
    original = quantized_graph()
    rewritten = quantized_graph()
    assert dequantize(rewritten) == (1, 1)
    assert convolutions_as_2d(rewritten) == 1
    onnx.checker.check_model(rewritten)
    ops = [node.op_type for node in rewritten.graph.node]
    assert not {"ConvInteger", "MatMulInteger", "DynamicQuantizeLinear", "Floor"} & set(ops)
    assert ops.count("Conv") == 1 and ops.count("MatMul") == 1
    (conv,) = [node for node in rewritten.graph.node if node.op_type == "Conv"]
    kernel = next(i for i in rewritten.graph.initializer if i.name == conv.input[1])
    assert list(kernel.dims) == [6, 4, 1, 3]  # a 1x3 2-D convolution
    before, after = quantized_reference(original, x), run(rewritten, x)
    # The int8 graph quantizes x on every call; the float one does not: they differ by that
    # rounding, a few percent of the signal, not more. The int8 graph's result is its exact
    # integer arithmetic, not onnxruntime's int8 kernels: on CPUs without VNNI (this project's
    # AMD EPYC machines) they pair u8 x s8 products in saturating 16-bit sums, which put
    # onnxruntime's own answer 7.6% from the exact arithmetic (0.9% separates that from float).
    assert before.shape == after.shape == run(original, x).shape
    relative = np.linalg.norm(before - after) / np.linalg.norm(before)
    assert relative < 0.05, relative
    # And the float graph is exactly what float math gives.
    w = (
        numpy_helper.to_array(quantized_graph().graph.initializer[0]).astype(np.float32) - 3
    ) * 0.02
    b = numpy_helper.to_array(quantized_graph().graph.initializer[3])
    padded = np.pad(x[0], ((0, 0), (1, 1)))
    conv = np.stack([[(w[o] * padded[:, t : t + 3]).sum() for t in range(16)] for o in range(6)])
    conv += b[:, None]
    m = (
        numpy_helper.to_array(quantized_graph().graph.initializer[5]).astype(np.float32) + 2
    ) * 0.01
    np.testing.assert_allclose(after[0], conv.T @ m, rtol=1e-4, atol=1e-4)


def test_the_rewrite_is_deterministic():
    first, second = quantized_graph(), quantized_graph()
    for model in (first, second):
        dequantize(model)
        convolutions_as_2d(model)
    assert first.SerializeToString() == second.SerializeToString()


@pytest.mark.model
def test_the_real_model_is_rewritten_as_pinned_once(onnx_engine, tmp_path: Path):
    """The session's engine found the rewritten graph in the default cache (it runs it if this
    machine's tuning record chose it); this makes it again in an empty directory and checks the
    pin, then the cache."""
    from speech_server.model_assets import bundled_model_path

    lines: list[str] = []
    fast = fast_model_path(bundled_model_path(), tmp_path, lines.append)
    assert fast.name == f"kokoro-v1.0.fast.{model_rewrite.REWRITTEN_SHA256[:12]}.onnx"
    digest = hashlib.sha256(fast.read_bytes()).hexdigest()
    assert digest == model_rewrite.REWRITTEN_SHA256
    assert "rewriting" in lines[0] and "verified" in lines[-1]
    assert fast_model_path(bundled_model_path(), tmp_path, lines.append) == fast
    assert len(lines) == 2  # the second call found it cached
    # The engine every other model test uses speaks from the graph its tuning record chose.
    assert onnx_engine.graph in onnx_engine.tuning.candidates
    running = Path(onnx_engine.kokoro.sess._model_path).name
    assert ("fast" in running) == (onnx_engine.graph == "fast")


@pytest.mark.model
def test_a_rewrite_that_differs_from_its_pin_keeps_the_original(tmp_path, monkeypatch, caplog):
    from speech_server.model_assets import bundled_model_path

    monkeypatch.setattr(model_rewrite, "REWRITTEN_SHA256", "0" * 64)
    with caplog.at_level(logging.WARNING, logger=model_rewrite.__name__):
        path = fast_model_path(bundled_model_path(), tmp_path, lambda _: None)
    assert path == bundled_model_path()
    assert not list(tmp_path.glob("*.onnx"))
    (warning,) = [record.getMessage() for record in caplog.records]
    assert "using the original int8 graph" in warning and "another onnx release" in warning
