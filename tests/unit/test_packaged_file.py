"""A data file found inside an installed distribution (voicewire_tools.local_stack.packaged_file),
against real installed distributions: found, at the wrong version, missing, without the file."""

from __future__ import annotations

import importlib.metadata

import pytest

from voicewire_tools.local_stack.packaged_file import installed_file


class Missing(RuntimeError):
    pass


def find(distribution: str, path: str, version: str | None):
    return installed_file(
        distribution, path, version, what="the test's file", install_hint="uv sync", error=Missing
    )


def test_a_file_of_an_installed_distribution_at_its_version_is_found():
    version = importlib.metadata.version("pydantic")
    assert find("pydantic", "pydantic/__init__.py", version).read_text()
    assert find("pydantic", "pydantic/__init__.py", None).is_file()  # any version


@pytest.mark.parametrize(
    ("distribution", "path", "version", "said"),
    [
        ("voicewire-no-such-distribution", "x.bin", None, "is not installed: uv sync"),
        ("pydantic", "pydantic/__init__.py", "0.0.1", "voicewire pins 0.0.1: uv sync"),
        ("pydantic", "pydantic/no-such-weights.onnx", None, "--reinstall-package pydantic"),
    ],
    ids=["not installed", "other version", "file missing"],
)
def test_what_cannot_be_found_says_how_to_install_it(distribution, path, version, said):
    with pytest.raises(Missing, match=said):
        find(distribution, path, version)
