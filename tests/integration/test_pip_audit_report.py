"""pip-audit itself: its real report on one hashed requirement reads back."""

from __future__ import annotations

import json
import subprocess
import sys

from voicewire_tools.commands.dependency_audit import (
    read_report,
)


def test_real_pip_audit_output_reads_back(tmp_path):
    """pip-audit itself, on one hashed requirement: whatever this machine can reach, its report
    parses into audited or skipped packages, never an error."""
    requirements = tmp_path / "requirements.txt"
    exported = subprocess.run(
        [sys.executable, "-c", "import importlib.metadata as m; print(m.version('idna'))"],
        capture_output=True,
        text=True,
        check=True,
    )
    requirements.write_text(f"idna=={exported.stdout.strip()}\n")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip_audit",
            "-r",
            str(requirements),
            "--no-deps",
            "--disable-pip",
            "--format",
            "json",
            "--progress-spinner",
            "off",
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    report = read_report(json.loads(result.stdout))
    assert report.audited + len(report.skipped) == 1
