"""The torch weights at a pinned hub revision, against a local stand-in that speaks the hub's
download route (redirects included): checked, cached, refused when they differ."""

from __future__ import annotations

import hashlib
import json
import os
import socket

import numpy as np
import pytest
from hub_standin import HubStandIn, running_hub

from voicewire_tools.commands import hub_weights, speech_infra
from voicewire_tools.commands.cdk_runner import InfraError
from voicewire_tools.commands.hub_weights import PinnedHubFiles, fetch_pinned, hub_endpoint

REVISION = "0123456789abcdef0123456789abcdef01234567"
WEIGHTS = os.urandom(300_000)  # large enough for the stand-in to redirect it to its "CDN"
CONFIG = json.dumps({"vocab": {"a": 1}, "n_token": 178, "plbert": {}, "istftnet": {}}).encode()


def pins(weights: bytes = WEIGHTS) -> PinnedHubFiles:
    return PinnedHubFiles(
        repo="hexgrad/Kokoro-82M",
        revision=REVISION,
        sha256={"kokoro-v1_0.pth": hashlib.sha256(weights).hexdigest(), "config.json": None},
        checks=hub_weights.KOKORO_82M.checks,
    )


@pytest.fixture
def hub():
    served = {"kokoro-v1_0.pth": WEIGHTS, "config.json": CONFIG}
    with running_hub(HubStandIn("hexgrad/Kokoro-82M", REVISION, served)) as running:
        yield running


def test_the_pinned_files_arrive_checked_through_the_redirect_and_are_cached(hub, tmp_path):
    lines: list[str] = []
    files = fetch_pinned(pins(), hub.url, tmp_path, lines.append)
    assert files["kokoro-v1_0.pth"].read_bytes() == WEIGHTS
    assert files["config.json"].read_bytes() == CONFIG
    assert files["kokoro-v1_0.pth"].parent == tmp_path / "hexgrad/Kokoro-82M" / REVISION
    assert any(path.startswith("/cdn/") for path in hub.requests)  # followed the 302
    assert any("kokoro-v1_0.pth: fetching 0.3 MB" in line for line in lines)
    asked = len(hub.requests)
    again: list[str] = []
    assert fetch_pinned(pins(), hub.url, tmp_path, again.append) == files
    assert len(hub.requests) == asked  # nothing fetched twice
    assert all("cached" in line for line in again)


def test_weights_that_differ_from_the_pin_are_refused_and_not_kept(hub, tmp_path):
    hub.served["kokoro-v1_0.pth"] = os.urandom(300_000)
    with pytest.raises(InfraError, match=r"kokoro-v1_0\.pth .* does not match its pinned sha256"):
        fetch_pinned(pins(), hub.url, tmp_path, lambda _: None)
    assert not list(tmp_path.rglob("kokoro-v1_0.pth*"))


def test_a_corrupted_cache_is_fetched_again(hub, tmp_path):
    files = fetch_pinned(pins(), hub.url, tmp_path, lambda _: None)
    files["kokoro-v1_0.pth"].write_bytes(b"truncated")
    fetch_pinned(pins(), hub.url, tmp_path, lambda _: None)
    assert files["kokoro-v1_0.pth"].read_bytes() == WEIGHTS


def test_a_config_that_is_not_kokoros_is_refused(hub, tmp_path):
    hub.served["config.json"] = b'{"model_type": "bert"}'
    with pytest.raises(InfraError, match=r"config\.json .* lacks vocab, n_token"):
        fetch_pinned(pins(), hub.url, tmp_path, lambda _: None)


def test_an_unknown_revision_is_the_hubs_404_in_one_line(hub, tmp_path):
    wrong = PinnedHubFiles("hexgrad/Kokoro-82M", "f" * 40, {"config.json": None}, {})
    with pytest.raises(InfraError, match="answered 404"):
        fetch_pinned(wrong, hub.url, tmp_path, lambda _: None)


def test_an_unreachable_hub_is_one_line(tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}"
    with pytest.raises(InfraError, match="cannot fetch"):
        fetch_pinned(pins(), closed, tmp_path, lambda _: None)


def test_the_hub_is_the_users_to_name(monkeypatch):
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    with pytest.raises(InfraError, match=r"--weights DIR.*--hub-url or set HF_ENDPOINT"):
        hub_endpoint(None)
    monkeypatch.setenv("HF_ENDPOINT", "http://hub.example/")
    assert hub_endpoint(None) == "http://hub.example"
    assert hub_endpoint("http://other.example") == "http://other.example"


def test_the_pins_name_a_commit_and_the_weights_sha256():
    assert len(hub_weights.KOKORO_82M.revision) == 40
    int(hub_weights.KOKORO_82M.revision, 16)
    (weights,) = [h for h in hub_weights.KOKORO_82M.sha256.values() if h]
    assert len(weights) == 64


def test_speech_infra_gathers_the_torch_files_from_the_hub_with_the_official_voices(
    hub, tmp_path, monkeypatch
):
    """`speech-infra deploy` without --weights: the hub's files and npm's voices, staged."""
    monkeypatch.setattr(hub_weights, "KOKORO_82M", pins())
    monkeypatch.setenv("VOICEWIRE_CACHE_DIR", str(tmp_path / "cache"))
    args = speech_infra.build_parser().parse_args(["deploy", "kokoro-82m", "--hub-url", hub.url])
    staged = tmp_path / "staged"
    speech_infra.gather(args, staged)
    manifest = json.loads((staged / "MANIFEST.json").read_text())
    assert set(manifest["sha256"]) == {"config.json", "kokoro-v1_0.pth", "voices.npz"}
    assert manifest["sha256"]["kokoro-v1_0.pth"] == hashlib.sha256(WEIGHTS).hexdigest()
    with np.load(staged / "voices.npz") as voices:
        assert "af_heart" in voices.files and len(voices.files) == 54
