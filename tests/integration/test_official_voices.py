"""Kokoro's official voices through the real npm: fetched once, checked, cached, re-checked; the
fallback to PyPI's Japanese voices when npm is missing; what the voice names say."""

from __future__ import annotations

import base64
import hashlib
import io
import logging
import os
import shutil
import tarfile
from pathlib import Path

import numpy as np
import pytest

from speech_server import official_voices
from speech_server.model_assets import ModelAssetError, bundled_voices_path
from speech_server.official_voices import (
    KOKORO_JS_VOICES,
    VOICE_SHAPE,
    VoicePackage,
    VoicesUnavailable,
    english_or_bundled_voices,
    official_voices_path,
)
from voicewire.voice_catalog import describe_voice, describe_voices

# The release's voices-v1.0.bin: np.savez of the 54 voices in name order is byte-identical to it.
RELEASE_VOICES_SHA256 = "bca610b8308e8d99f32e6fe4197e7ec01679264efed0cac9140fe9c29f1fbf7d"


@pytest.fixture(scope="module")
def fetched(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real `npm pack kokoro-js@1.2.1` for the module, through npm's configured registry."""
    if shutil.which("npm") is None:
        pytest.fail("npm is needed: Node.js is part of this project's environment (.ci/run)")
    return official_voices_path(tmp_path_factory.mktemp("voices"), progress=lambda _: None)


def test_the_official_set_arrives_whole_and_equals_the_release_file(fetched: Path):
    with np.load(fetched) as voices:
        assert sorted(voices.files) == sorted(KOKORO_JS_VOICES.voice_sha256)
        assert len(voices.files) == 54 and "af_heart" in voices.files
        assert all(voices[name].shape == VOICE_SHAPE for name in voices.files)
    assert hashlib.sha256(fetched.read_bytes()).hexdigest() == RELEASE_VOICES_SHA256


def test_a_second_start_uses_the_cache_without_npm(fetched: Path, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")  # npm cannot run: only the cache can answer
    messages: list[str] = []
    assert official_voices_path(fetched.parent, progress=messages.append) == fetched
    assert messages == []


def test_a_changed_cached_voice_is_fetched_again(fetched: Path, tmp_path: Path):
    with np.load(fetched) as voices:
        arrays = {name: voices[name] for name in voices.files}
    arrays["af_heart"] = arrays["af_heart"] * 1.01
    cached = tmp_path / fetched.name
    np.savez(cached, **arrays)
    messages: list[str] = []
    assert official_voices_path(tmp_path, progress=messages.append) == cached
    assert "has a changed af_heart" in messages[0]
    assert cached.read_bytes() == fetched.read_bytes()


def _tarball(directory: Path, voices: dict[str, bytes]) -> tuple[Path, str]:
    """A package tarball as npm packs them (``package/...``), and its npm integrity string."""
    path = directory / "voices-1.0.0.tgz"
    with tarfile.open(path, "w:gz") as archive:
        files = {"package/package.json": b'{"name": "voices", "version": "1.0.0"}'}
        files |= {f"package/voices/{name}.bin": data for name, data in voices.items()}
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    integrity = "sha512-" + base64.b64encode(hashlib.sha512(path.read_bytes()).digest()).decode()
    return path, integrity


def _voice_bytes(seed: int) -> bytes:
    return np.random.default_rng(seed).standard_normal(VOICE_SHAPE).astype("<f4").tobytes()


def test_a_voice_that_differs_from_its_pin_is_refused_by_name(tmp_path: Path):
    good, bad = _voice_bytes(1), _voice_bytes(2)
    tarball, integrity = _tarball(tmp_path, {"af_one": good, "af_two": bad})
    package = VoicePackage(
        spec=str(tarball),
        integrity=integrity,
        voice_sha256={
            "af_one": hashlib.sha256(good).hexdigest(),
            "af_two": hashlib.sha256(_voice_bytes(3)).hexdigest(),
        },
    )
    with pytest.raises(ModelAssetError, match="voice af_two does not match its pinned sha256"):
        official_voices_path(tmp_path / "cache", package, progress=lambda _: None)
    assert not list((tmp_path / "cache").glob("*.npz"))  # nothing half-checked is cached


def test_a_tarball_that_differs_from_its_integrity_is_refused(tmp_path: Path):
    voice = _voice_bytes(1)
    tarball, _ = _tarball(tmp_path, {"af_one": voice})
    package = VoicePackage(
        spec=str(tarball),
        integrity="sha512-" + base64.b64encode(b"\0" * 64).decode(),
        voice_sha256={"af_one": hashlib.sha256(voice).hexdigest()},
    )
    with pytest.raises(ModelAssetError, match="does not match its pinned integrity"):
        official_voices_path(tmp_path / "cache", package, progress=lambda _: None)


def test_a_local_package_with_matching_pins_is_assembled(tmp_path: Path):
    voices = {"af_one": _voice_bytes(1), "bm_two": _voice_bytes(2)}
    tarball, integrity = _tarball(tmp_path, voices)
    pins = {name: hashlib.sha256(data).hexdigest() for name, data in voices.items()}
    package = VoicePackage(spec=str(tarball), integrity=integrity, voice_sha256=pins)
    path = official_voices_path(tmp_path / "cache", package, progress=lambda _: None)
    with np.load(path) as cached:
        assert cached["bm_two"].tobytes() == voices["bm_two"]


def test_without_npm_the_voices_are_unavailable_and_the_server_falls_back(
    tmp_path: Path, monkeypatch, caplog
):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setenv("VOICEWIRE_CACHE_DIR", str(tmp_path))
    with pytest.raises(VoicesUnavailable, match="npm is not installed"):
        official_voices_path(tmp_path, progress=lambda _: None)
    with caplog.at_level(logging.WARNING, logger=official_voices.__name__):
        path, official = english_or_bundled_voices(progress=lambda _: None)
    assert (path, official) == (bundled_voices_path(), False)
    (warning,) = [record.getMessage() for record in caplog.records]
    assert "install Node.js" in warning and "\n" not in warning


def test_a_failing_npm_is_said_with_its_own_reason(tmp_path: Path):
    package = VoicePackage(str(tmp_path / "absent.tgz"), "sha512-x", {"af_one": "0" * 64})
    with pytest.raises(VoicesUnavailable, match=r"`npm pack .*absent\.tgz` failed: \S"):
        official_voices_path(tmp_path / "cache", package, progress=lambda _: None)


def test_voice_names_say_language_gender_and_phonemizer():
    heart, george, kumo = (describe_voice(n) for n in ("af_heart", "bm_george", "jm_kumo"))
    assert (heart.language, heart.gender, heart.espeak) == ("en-US", "female", "en-us")
    assert (george.language, george.gender, george.espeak) == ("en-GB", "male", "en-gb")
    assert (kumo.label, kumo.espeak) == ("Japanese", "ja")
    custom = describe_voice("my-voice")
    assert custom.gender is None and custom.espeak == "en-us"
    ordered = [v.name for v in describe_voices(frozenset({"jm_kumo", "bm_george", "af_heart"}))]
    assert ordered == ["af_heart", "bm_george", "jm_kumo"]


def test_every_official_voice_has_a_known_language():
    for name in KOKORO_JS_VOICES.voice_sha256:
        assert describe_voice(name).gender in {"female", "male"}, name
    assert os.path.basename(KOKORO_JS_VOICES.cache_name).startswith("voices-kokoro-js-1.2.1.")


def test_the_shared_list_of_official_voices_is_the_pinned_set():
    from voicewire.voice_catalog import OFFICIAL_VOICES

    assert sorted(OFFICIAL_VOICES) == sorted(KOKORO_JS_VOICES.voice_sha256)
