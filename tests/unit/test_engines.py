"""Engine selection, model assembly from the PyPI parts, and the torch engine where it can run."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from speech_server import model_assets
from speech_server.engines import load_engine
from speech_server.engines.default_voice import choose_default_voice
from speech_server.engines.torch_engine import _model_files
from speech_server.model_assets import ModelAssetError, bundled_model_path, expected_model_sha256
from speech_server.settings import EngineSettings


def test_model_is_assembled_once_and_verified(tmp_path):
    messages: list[str] = []
    path = bundled_model_path(tmp_path, progress=messages.append)
    assert path.parent == tmp_path
    assert expected_model_sha256()[:12] in path.name
    assert model_assets.sha256_of(path) == expected_model_sha256()
    assert any("assembling" in message for message in messages)
    assert path.stat().st_size > 80_000_000
    messages.clear()
    assert bundled_model_path(tmp_path, progress=messages.append) == path
    assert messages == []  # the second start reuses the verified file silently


def test_a_corrupted_cache_is_rebuilt(tmp_path):
    path = bundled_model_path(tmp_path, progress=lambda _: None)
    with path.open("r+b") as model:
        model.seek(1000)
        model.write(b"\x00" * 64)
    messages: list[str] = []
    assert bundled_model_path(tmp_path, progress=messages.append) == path
    assert model_assets.sha256_of(path) == expected_model_sha256()
    assert any("does not match" in message for message in messages)


def test_parts_that_do_not_match_the_shipped_sha256_are_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(model_assets, "_part_bytes", lambda package: b"not the model")
    with pytest.raises(ModelAssetError, match="sha256"):
        bundled_model_path(tmp_path, progress=lambda _: None)
    assert list(tmp_path.iterdir()) == []  # no half-written model is left behind


def test_settings_come_from_the_environment_and_flags_win(monkeypatch, tmp_path):
    monkeypatch.setenv("VOICEWIRE_ENGINE", "torch")
    monkeypatch.setenv("VOICEWIRE_VOICE", "af_heart")
    monkeypatch.setenv("VOICEWIRE_MODEL_DIR", str(tmp_path))
    settings = EngineSettings.from_env(voice="am_adam")
    assert settings.engine == "torch" and settings.voice == "am_adam"
    assert settings.model_dir == tmp_path


def test_bad_settings_are_refused_with_a_sentence():
    with pytest.raises(ValueError, match="engine must be one of"):
        EngineSettings(engine="tensorflow")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="both a model path and a voices path"):
        EngineSettings(model_path=Path("model.onnx"))


def test_default_voice_prefers_the_most_intelligible_english():
    assert choose_default_voice(frozenset({"jf_alpha", "jm_kumo"}), None) == "jm_kumo"
    assert choose_default_voice(frozenset({"af_heart", "jm_kumo"}), None) == "af_heart"
    assert choose_default_voice(frozenset({"zz", "aa"}), None) == "aa"
    with pytest.raises(ValueError, match="not in this voice pack"):
        choose_default_voice(frozenset({"jm_kumo"}), "af_heart")


def test_missing_user_files_are_a_clear_error(tmp_path):
    settings = EngineSettings(model_path=tmp_path / "none.onnx", voices_path=tmp_path / "v.bin")
    with pytest.raises(ModelAssetError, match="does not exist"):
        load_engine(settings)


def test_torch_model_directory_must_hold_the_release_layout(tmp_path):
    with pytest.raises(ModelAssetError, match=r"config\.json.*\.pth.*voices"):
        _model_files(tmp_path)


def test_torch_engine_without_its_extra_says_how_to_install_it(tmp_path):
    # Found, not imported: importing torch takes 7 s, a quarter of the unit loop.
    if importlib.util.find_spec("kokoro") and importlib.util.find_spec("torch"):
        pytest.skip("torch and kokoro are installed here")
    with pytest.raises(ModelAssetError, match="--extra torch"):
        load_engine(EngineSettings(engine="torch", model_dir=tmp_path))
