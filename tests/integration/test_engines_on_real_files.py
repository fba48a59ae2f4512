"""The engines on real model files: user-given ONNX files; the torch engine on a model directory."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from speech_server import model_assets
from speech_server.engines import load_engine
from speech_server.model_assets import bundled_model_path
from speech_server.settings import EngineSettings


def test_user_given_onnx_files_are_loaded(tmp_path):
    """``--model-path``/``--voices-path``: here the same files, given as a user would."""
    model = bundled_model_path(tmp_path, progress=lambda _: None)
    voices = model_assets.bundled_voices_path()
    engine = load_engine(EngineSettings(model_path=model, voices_path=voices, voice="jf_alpha"))
    assert engine.default_voice == "jf_alpha"
    audio = engine.synthesize("Yes.", "jf_alpha", 1.0)
    assert audio.dtype == np.float32 and np.abs(audio).max() > 0.05


@pytest.mark.torch
def test_torch_engine_speaks_from_a_local_model_directory():
    """Runs where the torch extra is installed and VOICEWIRE_TEST_MODEL_DIR holds the weights."""
    pytest.importorskip("torch")
    pytest.importorskip("kokoro")
    model_dir = os.environ.get("VOICEWIRE_TEST_MODEL_DIR")
    if not model_dir:
        pytest.skip("set VOICEWIRE_TEST_MODEL_DIR to a Kokoro-82M model directory")
    engine = load_engine(EngineSettings(engine="torch", model_dir=Path(model_dir)))
    audio = engine.synthesize("Hello from the GPU engine.", engine.default_voice, 1.0)
    assert audio.dtype == np.float32 and np.abs(audio).max() > 0.05
