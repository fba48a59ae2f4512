"""The torch engine (what the GPU image runs), everything but the weights: its code runs here
against stand-ins for ``torch`` and hexgrad's ``kokoro`` with the interfaces it uses (KModel,
KPipeline's call and results, ``torch.from_numpy``), so CI executes it without a GPU or torch.
The real thing runs under ``pytest -m torch`` where torch and the weights are installed."""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from speech_server.engines import load_engine
from speech_server.model_assets import ModelAssetError
from speech_server.settings import EngineSettings


class Tensor:
    """What the engine calls on torch tensors."""

    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    def float(self) -> Tensor:
        return Tensor(self.array.astype(np.float32))

    def detach(self) -> Tensor:
        return self

    def cpu(self) -> Tensor:
        return self

    def numpy(self) -> np.ndarray:
        return self.array


@dataclass
class Result:
    """KPipeline yields results whose ``audio`` is a tensor, or None for an empty segment."""

    audio: Tensor | None


@dataclass
class Calls:
    models: list[dict] = field(default_factory=list)
    pipelines: list[str] = field(default_factory=list)
    spoken: list[dict] = field(default_factory=list)


def fake_modules(calls: Calls, no_g2p: set[str]) -> tuple[types.ModuleType, types.ModuleType]:
    torch = types.ModuleType("torch")
    torch.cuda = types.SimpleNamespace(is_available=lambda: False)
    torch.from_numpy = Tensor
    torch.load = lambda path, weights_only: Tensor(np.load(path))

    class KModel:
        def __init__(self, repo_id: str, config: str, model: str) -> None:
            calls.models.append({"repo_id": repo_id, "config": config, "model": model})

        def to(self, device: str) -> KModel:
            calls.models[-1]["device"] = device
            return self

        def eval(self) -> KModel:
            return self

    class KPipeline:
        def __init__(self, lang_code: str, repo_id: str, model: KModel) -> None:
            if lang_code in no_g2p:
                raise ImportError(f"misaki[{lang_code}] is not installed")
            self.lang_code = lang_code
            calls.pipelines.append(lang_code)

        def __call__(self, text: str, voice: Tensor, speed: float, split_pattern: object):
            calls.spoken.append(
                {"lang": self.lang_code, "text": text, "voice": voice, "speed": speed,
                 "split_pattern": split_pattern}
            )  # fmt: skip
            # Two segments and an empty one, as KPipeline yields past 510 phonemes.
            samples = int(0.05 * len(text) * 24000 / speed)
            tone = np.sin(np.arange(samples) * 0.05).astype(np.float64) * 0.3
            yield Result(Tensor(tone))
            yield Result(None)
            yield Result(Tensor(tone[: samples // 2]))

    kokoro = types.ModuleType("kokoro")
    kokoro.KModel, kokoro.KPipeline = KModel, KPipeline
    return torch, kokoro


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "kokoro-v1_0.pth").write_bytes(b"weights")
    rng = np.random.default_rng(3)
    packs = {
        name: rng.standard_normal((510, 1, 256)) for name in ("af_heart", "bf_emma", "jf_alpha")
    }
    np.savez(tmp_path / "voices.npz", **packs)
    return tmp_path


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Calls:
    calls = Calls()
    torch, kokoro = fake_modules(calls, no_g2p={"j"})
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "kokoro", kokoro)
    return calls


def test_the_torch_engine_loads_a_model_directory_and_speaks_each_voice_in_its_language(
    model_dir, calls
):
    engine = load_engine(EngineSettings(engine="torch", model_dir=model_dir))
    assert calls.models == [
        {
            "repo_id": "hexgrad/Kokoro-82M",
            "config": str(model_dir / "config.json"),
            "model": str(model_dir / "kokoro-v1_0.pth"),
            "device": "cpu",
        }
    ]
    # Japanese has no G2P in this image: its voice is left out, the others stay.
    assert calls.pipelines == ["a", "b"]
    assert engine.voices == frozenset({"af_heart", "bf_emma"})
    assert engine.default_voice == "af_heart"
    warm_up = calls.spoken.pop(0)
    assert warm_up["text"] == "Ready." and warm_up["lang"] == "a"

    audio = engine.synthesize("Good evening from London.", "bf_emma", 1.25)
    (call,) = calls.spoken
    assert call["lang"] == "b" and call["speed"] == 1.25
    assert call["split_pattern"] is None  # the synthesis layer already chose the chunk
    with np.load(model_dir / "voices.npz") as packs:  # the voice is handed over, never fetched
        assert np.array_equal(call["voice"].numpy(), packs["bf_emma"].astype(np.float32))
    full = int(0.05 * len("Good evening from London.") * 24000 / 1.25)
    assert audio.dtype == np.float32 and len(audio) == full + full // 2  # None segment skipped
    (piece,) = list(engine.synthesize_stream("Good evening from London.", "bf_emma", 1.25))
    assert np.array_equal(piece, audio)


def test_the_torch_engine_refuses_an_incomplete_model_directory(model_dir, calls):
    (model_dir / "kokoro-v1_0.pth").unlink()
    with pytest.raises(ModelAssetError, match=r"lacks a \*\.pth weights file"):
        load_engine(EngineSettings(engine="torch", model_dir=model_dir))


def test_the_torch_engine_refuses_a_voice_pack_it_cannot_speak(model_dir, monkeypatch):
    calls = Calls()
    torch, kokoro = fake_modules(calls, no_g2p={"a", "b", "j"})
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "kokoro", kokoro)
    with pytest.raises(ModelAssetError, match="has a language this image speaks"):
        load_engine(EngineSettings(engine="torch", model_dir=model_dir))


def test_the_torch_engine_reads_hexgrads_voices_directory_too(model_dir, calls):
    (model_dir / "voices.npz").unlink()
    (model_dir / "voices").mkdir()
    np.save(model_dir / "voices" / "am_adam.pt", np.ones((510, 1, 256)))
    (model_dir / "voices" / "am_adam.pt.npy").rename(model_dir / "voices" / "am_adam.pt")
    engine = load_engine(EngineSettings(engine="torch", model_dir=model_dir, voice="am_adam"))
    assert engine.voices == frozenset({"am_adam"}) and engine.default_voice == "am_adam"
