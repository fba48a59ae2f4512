"""Tests that need a tool outside Python (Chromium, Node.js's npx, util-linux's script) or an extra.

On a developer's machine a missing tool skips its tests, with the reason. Where the tools are
installed on purpose (``.ci/run`` sets ``VOICEWIRE_REQUIRE_TOOLS=1``), a missing one is an error
at collection: CI must not pass by skipping what it was meant to run.
"""

from __future__ import annotations

import os
import shutil

import pytest

REQUIRED = os.environ.get("VOICEWIRE_REQUIRE_TOOLS") == "1"


def needs(*commands: str) -> pytest.MarkDecorator:
    """A ``skipif`` mark for tests that run these commands, or an error where they are required."""
    missing = [command for command in commands if shutil.which(command) is None]
    if missing and REQUIRED:
        raise RuntimeError(
            f"VOICEWIRE_REQUIRE_TOOLS=1 but {', '.join(missing)} is not installed: "
            "these tests would be skipped"
        )
    return pytest.mark.skipif(bool(missing), reason=f"needs {', '.join(commands)}")


def needs_modules(*modules: str, install: str) -> pytest.MarkDecorator:
    """A ``skipif`` mark for tests that import these optional modules (an extra: ``install``
    says how to get them), or an error where tools are required (CI installs every extra the
    tests use)."""
    import importlib.util

    missing = [module for module in modules if importlib.util.find_spec(module) is None]
    if missing and REQUIRED:
        raise RuntimeError(
            f"VOICEWIRE_REQUIRE_TOOLS=1 but {', '.join(missing)} is not installed ({install}): "
            "these tests would be skipped"
        )
    return pytest.mark.skipif(bool(missing), reason=f"needs {', '.join(modules)} ({install})")
