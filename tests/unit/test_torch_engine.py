"""The torch engine (what the GPU image runs), everything but the weights: its code runs here
against stand-ins for ``torch`` and hexgrad's ``kokoro`` with the interfaces it uses (KModel,
KPipeline's call and results, ``torch.from_numpy``), so CI executes it without a GPU or torch.
The real thing runs under ``pytest -m torch`` where torch and the weights are installed.

When the image asks for CUDA and there is none it can use, the server refuses to start, saying
what it found (``speech_server.gpu_check``): a GPU endpoint must never quietly run on its CPU."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import numpy as np
import pytest
from torch_standin import Calls, Gpu, fake_modules, write_standin_checkpoint

from speech_server.engines import load_engine
from speech_server.gpu_check import GpuUnavailable, require_cuda
from speech_server.model_assets import ModelAssetError
from speech_server.settings import EngineSettings


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    (tmp_path / "config.json").write_text("{}")
    write_standin_checkpoint(tmp_path / "kokoro-v1_0.pth")
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
    segments = [r.audio.numpy() for r in engine.pipelines["b"].last_results if r.audio is not None]
    assert audio.dtype == np.float32 and np.array_equal(
        audio, np.concatenate(segments).astype(np.float32)
    )
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


# --- the device: CUDA asked for, CUDA given ---------------------------------------------------


def use_standins(monkeypatch: pytest.MonkeyPatch, gpu: Gpu) -> Calls:
    calls = Calls()
    torch, kokoro = fake_modules(calls, no_g2p={"j"}, gpu=gpu)
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "kokoro", kokoro)
    return calls


def test_asked_for_cuda_the_engine_loads_on_the_gpu_and_warms_up_there(
    model_dir, monkeypatch, caplog
):
    gpu = Gpu(name="NVIDIA A10G")
    calls = use_standins(monkeypatch, gpu)
    with caplog.at_level(logging.INFO, logger="speech_server"):
        engine = load_engine(EngineSettings(engine="torch", model_dir=model_dir, device="cuda"))
    assert engine.device == "cuda" and calls.models[0]["device"] == "cuda"
    assert gpu.kernels == ["cuda"]  # the start-up check ran a kernel on the device
    assert calls.spoken[0]["text"] == "Ready."  # the warm-up synthesis, before any request
    assert any("NVIDIA A10G" in r.getMessage() for r in caplog.records)
    (ready,) = [r.getMessage() for r in caplog.records if "model ready" in r.getMessage()]
    assert "on cuda (warm-up synthesis" in ready and " ms)" in ready


def test_without_a_request_for_cuda_a_missing_gpu_means_the_cpu_said_aloud(
    model_dir, monkeypatch, caplog
):
    use_standins(monkeypatch, Gpu())
    with caplog.at_level(logging.WARNING, logger="speech_server"):
        engine = load_engine(EngineSettings(engine="torch", model_dir=model_dir))
    assert engine.device == "cpu"
    assert any("runs on the CPU" in r.getMessage() for r in caplog.records)


def test_a_driver_too_old_is_named_with_what_torch_needs(tmp_path, monkeypatch):
    """SageMaker's default driver on ml.g5 (470, CUDA 11.4) under PyPI's CUDA 12.8 torch."""
    version_file = tmp_path / "version"
    version_file.write_text(
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  470.256.02  Thu May  2 14:37:44 UTC 2024\n"
    )
    too_old = "The NVIDIA driver on your system is too old (found version 11040). Please update"
    gpu = Gpu(init_error=too_old)
    use_standins(monkeypatch, gpu)
    with pytest.raises(GpuUnavailable) as refused:
        require_cuda(sys.modules["torch"], "cuda", version_file)
    message = str(refused.value)
    assert "\n" not in message
    for said in (
        "VOICEWIRE_DEVICE=cuda",
        "torch sees no CUDA device: The NVIDIA driver on your system is too old",
        "driver 470.256.02",
        "torch 2.10.0+cu128 built for CUDA 12.8",
        "needs NVIDIA driver >= 525.60.13",
        "al2-ami-sagemaker-inference-gpu-3-1",
    ):
        assert said in message


def test_a_gpu_whose_kernels_fail_is_refused_too(model_dir, monkeypatch):
    gpu = Gpu(name="Tesla K80", kernel_error="CUDA error: no kernel image is available")
    use_standins(monkeypatch, gpu)
    with pytest.raises(GpuUnavailable, match="a CUDA kernel failed: CUDA error: no kernel image"):
        load_engine(EngineSettings(engine="torch", model_dir=model_dir, device="cuda"))


# --- a model that loads but does not speak ------------------------------------------------------


def test_a_checkpoint_of_other_names_is_refused_not_loaded_at_initial_values(model_dir, calls):
    """KModel's loader retries with strict=False on any mismatch, loading nothing."""
    write_standin_checkpoint(model_dir / "kokoro-v1_0.pth", tops=("bert", "predictor"))
    with pytest.raises(ModelAssetError, match=r"does not fill Kokoro-82M's model: 3 of its 5"):
        load_engine(EngineSettings(engine="torch", model_dir=model_dir))


def test_a_warm_up_that_says_nothing_is_refused(model_dir, calls, monkeypatch):
    import torch_standin

    spoken = torch_standin.standin_result

    def silent(phonemes: str, speed: float) -> torch_standin.Result:
        result = spoken(phonemes, speed)
        result.audio.array[:] = 0.0
        return result

    monkeypatch.setattr(torch_standin, "standin_result", silent)
    with pytest.raises(ModelAssetError, match=r"warm-up synthesis of 'Ready\.' is silent"):
        load_engine(EngineSettings(engine="torch", model_dir=model_dir))


@pytest.mark.parametrize(
    ("audio", "problem"),
    [
        (np.full(14_400, np.nan, np.float32), "NaN"),
        (np.full(1_200, 0.3, np.float32), "lasts 0.05 s"),
        (np.full(240_000, 0.3, np.float32), "lasts 10.00 s"),
        (np.zeros(14_400, np.float32), "silent"),
    ],
)
def test_the_warm_ups_audio_must_be_speech_like(audio, problem):
    from speech_server.engines.torch_engine import require_speech

    with pytest.raises(ModelAssetError, match=problem):
        require_speech(audio, Path("kokoro-v1_0.pth"))
    require_speech(np.sin(np.arange(14_400) * 0.05).astype(np.float32) * 0.3, Path("w.pth"))


def test_written_words_take_the_phonemes_of_the_tokens_that_spell_them():
    """misaki's tokens: "don't" is two, "Smith." two; a word ends at a token with whitespace."""
    from types import SimpleNamespace as Token

    from speech_server.engines.torch_engine import phonemes_by_written_word

    tokens = [
        Token(text="Do", whitespace="", phonemes="dˈu"),
        Token(text="n't", whitespace=" ", phonemes="nt"),
        Token(text="go", whitespace=" ", phonemes="ɡˈO"),
        Token(text="$", whitespace="", phonemes=""),
        Token(text="5", whitespace="", phonemes="fˈIv dˈɑləɹz"),
        Token(text=",", whitespace=" ", phonemes=","),
        Token(text="Smith", whitespace="", phonemes="smˈɪθ"),
        Token(text=".", whitespace="", phonemes="."),
    ]
    results = [Token(tokens=tokens[:4]), Token(tokens=tokens[4:])]  # split across batches
    vocabulary = set("dˈuntɡOfIvɑləɹzsmɪθ,. ")
    assert phonemes_by_written_word("Don't go $5, Smith.", results, vocabulary) == [
        "dˈunt",
        "ɡˈO",
        "fˈIv dˈɑləɹz,",
        "smˈɪθ.",
    ]
    # Tokens that do not spell the text (a preprocessing step changed it), or none at all.
    assert phonemes_by_written_word("Don't go $5, Smythe.", results, vocabulary) is None
    assert phonemes_by_written_word("Hola.", [Token(tokens=None)], vocabulary) is None


def test_names_the_model_does_not_use_are_logged_not_refused(model_dir, calls, caplog):
    """An older library's checkpoint may carry a buffer no longer saved (``position_ids``)."""
    import json

    path = model_dir / "kokoro-v1_0.pth"
    checkpoint = json.loads(path.read_text())
    checkpoint["bert"]["module.embeddings.position_ids"] = [0]
    path.write_text(json.dumps(checkpoint))
    with caplog.at_level(logging.WARNING, logger="speech_server"):
        load_engine(EngineSettings(engine="torch", model_dir=model_dir))
    assert any("names KModel does not use" in r.getMessage() for r in caplog.records)
