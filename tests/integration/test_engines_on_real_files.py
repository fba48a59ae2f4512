"""The ONNX engine on user-given model files (the torch engine on real weights:
test_torch_engine_on_real_weights.py)."""

from __future__ import annotations

import numpy as np

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
