"""``stacks.uv_lock``: the lock exported as a requirements file pip can read, whatever terminal
settings its caller runs under."""

from __future__ import annotations

import pytest

from stacks.uv_lock import exported_requirements


@pytest.mark.parametrize("force_color", ["0", "1"])
def test_the_export_is_plain_text_even_where_color_is_forced(monkeypatch, force_color):
    """The CDK CLI runs the app with ``FORCE_COLOR=0``, which uv reads as forced: colored comment
    lines made the bundle's constraints file unreadable to ``uv pip install``."""
    monkeypatch.setenv("FORCE_COLOR", force_color)
    exported = exported_requirements()
    assert "\x1b" not in exported
    pins = [line for line in exported.splitlines() if line and not line.lstrip().startswith("#")]
    assert pins and all("==" in pin for pin in pins)
    assert any(pin.startswith("boto3==") for pin in pins)
