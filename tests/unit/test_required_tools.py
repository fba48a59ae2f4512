"""CI must not pass by skipping: a required tool that is missing is an error, not a skip."""

from __future__ import annotations

import pytest
import required_tools


def test_a_missing_tool_skips_on_a_developers_machine(monkeypatch):
    monkeypatch.setattr(required_tools, "REQUIRED", False)
    mark = required_tools.needs("voicewire-no-such-tool")
    assert mark.args == (True,) and "voicewire-no-such-tool" in mark.kwargs["reason"]
    assert required_tools.needs("python3").args == (False,)


def test_a_missing_tool_is_an_error_where_ci_installs_it(monkeypatch):
    monkeypatch.setattr(required_tools, "REQUIRED", True)
    with pytest.raises(RuntimeError, match="voicewire-no-such-tool is not installed"):
        required_tools.needs("python3", "voicewire-no-such-tool")
