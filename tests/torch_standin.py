"""Stand-ins for ``torch`` and hexgrad's ``kokoro`` with the interfaces the torch engine and its
start-up check use (KModel, KPipeline's call and results, ``torch.from_numpy``, ``torch.cuda``),
so CI runs that code without a GPU or torch. A test that starts the server as a process writes
``torch_module_source()`` as ``torch.py`` into a folder on the process's ``PYTHONPATH``."""

from __future__ import annotations

import json
import types
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np


class Tensor:
    """What the engine calls on torch tensors."""

    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    def add_(self, value: float) -> Tensor:
        self.array += value
        return self

    def float(self) -> Tensor:
        return Tensor(self.array.astype(np.float32))

    def detach(self) -> Tensor:
        return self

    def cpu(self) -> Tensor:
        return self

    def numpy(self) -> np.ndarray:
        return self.array

    def to(self, device: str) -> Tensor:
        self.device = device
        return self


@dataclass
class Result:
    """As KPipeline's results: the segment's phonemes, its ``audio`` (a tensor, or None for an
    empty segment) and ``pred_dur``, the duration predictor's frames of 600 samples per token
    fed, the two boundary pads included (``speed`` applied), which the audio's length follows."""

    phonemes: str
    audio: Tensor | None
    pred_dur: Tensor | None = None


# The stand-in's phonemes: a text's letters, spaces and Kokoro's punctuation, lower-cased; the
# model's vocabulary is those characters (a digit or "$" is dropped, as a character outside
# Kokoro's vocabulary is).
VOCAB = {character: index for index, character in enumerate(" ;:,.!?abcdefghijklmnopqrstuvwxyz", 1)}
LEADING_PAD, TRAILING_PAD, PHONEME_FRAMES = 4, 6, 3


def standin_phonemes(text: str) -> str:
    return " ".join("".join(c for c in text.lower() if c in VOCAB or c.isspace()).split())


def standin_result(phonemes: str, speed: float) -> Result:
    fed = [c for c in phonemes if c in VOCAB]
    frames = [LEADING_PAD, *[max(1, round(PHONEME_FRAMES / speed))] * len(fed), TRAILING_PAD]
    samples = sum(frames) * 600
    tone = np.sin(np.arange(samples) * 0.05).astype(np.float64) * 0.3
    return Result(phonemes, Tensor(tone), Tensor(np.array(frames, dtype=np.int64)))


@dataclass
class Calls:
    models: list[dict] = field(default_factory=list)
    pipelines: list[str] = field(default_factory=list)
    spoken: list[dict] = field(default_factory=list)


NO_DRIVER = "Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU"


@dataclass
class Gpu:
    """What the stand-in's CUDA does: a device (``name``) or none (``init_error``, what
    ``torch.cuda.init()`` raises), and whether a kernel on it fails (``kernel_error``)."""

    name: str | None = None
    init_error: str = NO_DRIVER
    kernel_error: str | None = None
    kernels: list[str] = field(default_factory=list)  # the devices kernels ran on


def fake_torch(gpu: Gpu) -> types.ModuleType:
    """torch as the engine and its start-up check use it: PyPI's 2.10.0 CUDA 12.8 build."""
    torch = types.ModuleType("torch")
    torch.__version__ = "2.10.0+cu128"
    torch.version = types.SimpleNamespace(cuda="12.8")

    def init() -> None:
        if gpu.name is None:
            raise RuntimeError(gpu.init_error)

    def ones(size: int, device: str) -> Tensor:
        if gpu.kernel_error is not None:
            raise RuntimeError(gpu.kernel_error)
        gpu.kernels.append(device)
        return Tensor(np.ones(size, dtype=np.float32))

    torch.cuda = types.SimpleNamespace(
        is_available=lambda: gpu.name is not None,
        init=init,
        get_device_name=lambda index: gpu.name,
    )
    torch.device = lambda spec: types.SimpleNamespace(index=None)
    torch.ones = ones
    torch.from_numpy = Tensor
    torch.load = load
    return torch


# The stand-in KModel's tensors, one per top-level module, as a checkpoint names them.
STANDIN_TOPS = ("bert", "bert_encoder", "predictor", "text_encoder", "decoder")


def write_standin_checkpoint(path: Path, tops: tuple[str, ...] = STANDIN_TOPS) -> None:
    """A ``.pth`` the stand-in's ``torch.load`` reads: each top's tensors under ``module.``."""
    path.write_text(json.dumps({top: {"module.weight": [0.0]} for top in tops}))


def load(path: str | Path, map_location: str | None = None, weights_only: bool = True) -> object:
    """``torch.load``: a checkpoint (``write_standin_checkpoint``), or a voice's ``.pt``."""
    if str(path).endswith(".pth"):
        return json.loads(Path(path).read_text())
    return Tensor(np.load(path))


def fake_modules(
    calls: Calls, no_g2p: set[str], gpu: Gpu | None = None
) -> tuple[types.ModuleType, types.ModuleType]:
    torch = fake_torch(gpu or Gpu())

    class KModel:
        def __init__(self, repo_id: str, config: str, model: str) -> None:
            calls.models.append({"repo_id": repo_id, "config": config, "model": model})

        def to(self, device: str) -> KModel:
            calls.models[-1]["device"] = device
            return self

        def eval(self) -> KModel:
            return self

        vocab = VOCAB

        def __getattr__(self, top: str) -> types.SimpleNamespace:
            if top not in STANDIN_TOPS:
                raise AttributeError(top)
            return types.SimpleNamespace(state_dict=lambda: {"weight": [0.0]})

    class KPipeline:
        def __init__(self, lang_code: str, repo_id: str, model: KModel) -> None:
            if lang_code in no_g2p:
                raise ImportError(f"misaki[{lang_code}] is not installed")
            self.lang_code = lang_code
            self.model = model
            self.voices: dict[str, Tensor] = {}  # KPipeline's own cache of loaded voices
            self.last_results: list[Result] = []
            calls.pipelines.append(lang_code)

        def g2p(self, text: str) -> tuple[str, None]:
            return standin_phonemes(text), None

        def __call__(self, text: str, voice: str, speed: float, split_pattern: object):
            # KPipeline looks a voice's name up in its cache and fetches it from the hub
            # otherwise: the stand-in has no hub.
            calls.spoken.append(
                {
                    "lang": self.lang_code,
                    "text": text,
                    "voice": self.voices[voice],
                    "speed": speed,
                    "split_pattern": split_pattern,
                }
            )
            # Two segments and an empty one, as KPipeline yields past 510 phonemes: cut after
            # the first sentence when there are two.
            first, _, rest = text.partition(". ")
            segments = [first + "." if rest else first, rest] if rest else [text]
            results = [standin_result(standin_phonemes(segments[0]), speed), Result("", None)]
            results += [standin_result(standin_phonemes(part), speed) for part in segments[1:]]
            self.last_results = results
            yield from results

    kokoro = types.ModuleType("kokoro")
    kokoro.KModel, kokoro.KPipeline = KModel, KPipeline
    return torch, kokoro


def torch_module_source(gpu: Gpu) -> str:
    """A ``torch.py`` for another process: this stand-in, with ``gpu``'s CUDA."""
    return (
        "import sys\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from torch_standin import Gpu, fake_torch\n"
        f"gpu = Gpu(name={gpu.name!r}, init_error={gpu.init_error!r})\n"
        "sys.modules[__name__] = fake_torch(gpu)\n"
    )
