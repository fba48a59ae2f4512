"""How the int8 export's names map onto KModel's modules (voicewire_tools.derived_torch_model);
the whole derivation runs on the real graph in test_torch_engine_on_real_weights.py."""

from __future__ import annotations

import pytest

from speech_server.model_assets import ModelAssetError
from voicewire_tools.derived_torch_model import (
    _initializer_path,
    _module_path,
    kokoro_config,
)


@pytest.mark.parametrize(
    ("scope", "path"),
    [
        # A child's scope repeats its parent's name.
        ("/encoder/text_encoder/cnn.0/cnn.0.0", "text_encoder.cnn.0.0"),
        # The decoder's scope is doubled.
        ("/decoder/decoder/generator/conv_post", "decoder.generator.conv_post"),
        # The predictor's modules sit directly under the encoder's scope.
        ("/encoder/F0.1/conv1", "predictor.F0.1.conv1"),
        ("/encoder/shared", "predictor.shared"),
        ("/encoder/N.0/conv2", "predictor.N.0.conv2"),
        # A module called again carries a _N suffix.
        (
            "/encoder/bert/encoder/albert_layer_groups.0/attention_3",
            "bert.encoder.albert_layer_groups.0.attention",
        ),
    ],
)
def test_an_export_scope_names_kmodels_module(scope, path):
    assert _module_path(scope) == path


def test_named_initializers_take_kmodels_keys():
    assert _initializer_path("decoder.decoder.generator.conv_post.bias") == (
        "decoder.generator.conv_post.bias"
    )
    assert _initializer_path("encoder.bert_encoder.bias") == "bert_encoder.bias"
    with pytest.raises(ModelAssetError, match="outside the encoder and the decoder"):
        _initializer_path("onnx::Mul_1234")


def test_the_config_is_kokoro_v1s_with_kokoro_onnxs_vocabulary():
    config = kokoro_config()
    assert config["n_token"] == 178 and config["style_dim"] == 128
    assert len(config["vocab"]) == 114 and config["vocab"]["ə"] > 0
    assert max(config["vocab"].values()) < config["n_token"]
