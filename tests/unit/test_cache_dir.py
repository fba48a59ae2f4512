"""What voicewire writes into its cache lands whole or not at all."""

from __future__ import annotations

import pytest

from voicewire.cache_dir import written_atomically


def test_a_file_appears_only_once_written_whole(tmp_path):
    target = tmp_path / "model.onnx"
    with written_atomically(target) as partial:
        partial.write_bytes(b"half")
        assert not target.exists()  # nobody sees it while it is written
    assert target.read_bytes() == b"half"
    assert list(tmp_path.iterdir()) == [target]


def test_a_failed_write_leaves_neither_the_file_nor_its_partial(tmp_path):
    target = tmp_path / "voices.npz"
    with pytest.raises(ValueError), written_atomically(target, suffix=".npz") as partial:
        assert partial.name.endswith(".partial.npz")
        partial.write_bytes(b"corrupt")
        raise ValueError("the digest does not match")
    assert list(tmp_path.iterdir()) == []


def test_a_cache_that_does_not_exist_yet_is_made(tmp_path):
    """A fresh container: nothing has made ~/.cache/voicewire before the engine writes its split
    graph there (the CPU image's first start failed on exactly this)."""
    target = tmp_path / "home" / ".cache" / "voicewire" / "model.abc.text-side.onnx"
    with written_atomically(target) as partial:
        partial.write_bytes(b"graph")
    assert target.read_bytes() == b"graph"
