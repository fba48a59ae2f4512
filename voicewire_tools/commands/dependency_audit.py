"""``voicewire audit``: known vulnerabilities in the locked dependencies, checked by pip-audit.

    uv run --group audit voicewire audit [--allow-unreachable]

Every package of ``uv.lock`` is checked (every group and extra: the CPU image's onnxruntime and
the GPU image's torch too), exported with its hashes so pip-audit resolves nothing itself. A
vulnerability fails the run unless ``audit-exceptions.toml`` documents it: its id, the package,
why it does not apply or cannot be fixed yet, and a date to look again, after which it fails
again.

pip-audit asks PyPI's JSON API (``/pypi/<name>/<version>/json``) about each package. A mirror
that serves packages but not that API answers 404 for every one: nothing was audited, and the
run says so and fails (exit 2), unless ``--allow-unreachable`` is given, as ``.ci/run`` does on a
machine that reaches only a package mirror. A vulnerability that *was* reported always fails.
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stacks.uv_lock import exported_requirements

ROOT = Path(__file__).resolve().parents[2]
EXCEPTIONS_FILE = ROOT / "audit-exceptions.toml"

EXIT_VULNERABLE = 1
EXIT_NOT_AUDITED = 2


@dataclass(frozen=True)
class Finding:
    package: str
    version: str
    vulnerability: str
    fixed_in: tuple[str, ...]


@dataclass(frozen=True)
class AuditException:
    vulnerability: str
    package: str
    reason: str
    review_by: datetime.date


@dataclass(frozen=True)
class AuditReport:
    findings: list[Finding]
    audited: int
    skipped: dict[str, str]  # package -> why pip-audit could not check it


def read_report(report: dict[str, Any]) -> AuditReport:
    """pip-audit's ``-f json`` output: ``{"dependencies": [{"name", "version", "vulns": [{"id",
    "fix_versions", ...}]} | {"name", "skip_reason"}], "fixes": [...]}``."""
    findings: list[Finding] = []
    skipped: dict[str, str] = {}
    audited = 0
    for dependency in report.get("dependencies", []):
        if "skip_reason" in dependency:
            skipped[dependency["name"]] = dependency["skip_reason"]
            continue
        audited += 1
        for vulnerability in dependency.get("vulns", []):
            findings.append(
                Finding(
                    dependency["name"],
                    dependency.get("version", "?"),
                    vulnerability["id"],
                    tuple(vulnerability.get("fix_versions", [])),
                )
            )
    return AuditReport(findings, audited, skipped)


def load_exceptions(path: Path = EXCEPTIONS_FILE) -> list[AuditException]:
    """The documented exceptions; a malformed one (no reason, no date) is an error, so that an
    exception is never a silent one."""
    if not path.is_file():
        return []
    entries = tomllib.loads(path.read_text(encoding="utf-8")).get("exception", [])
    exceptions = []
    for number, entry in enumerate(entries, 1):
        missing = [key for key in ("id", "package", "reason", "review_by") if not entry.get(key)]
        if missing:
            raise ValueError(f"{path.name}: exception {number} has no {', '.join(missing)}")
        review_by = entry["review_by"]
        if not isinstance(review_by, datetime.date):
            raise ValueError(f"{path.name}: exception {number}: review_by must be a TOML date")
        exceptions.append(AuditException(entry["id"], entry["package"], entry["reason"], review_by))
    return exceptions


def unexcused(
    findings: list[Finding], exceptions: list[AuditException], today: datetime.date
) -> list[Finding]:
    """The findings no current exception covers (an exception past its review date lapses)."""
    covered = {
        (exception.vulnerability, exception.package.lower())
        for exception in exceptions
        if exception.review_by >= today
    }
    return [
        finding
        for finding in findings
        if (finding.vulnerability, finding.package.lower()) not in covered
    ]


def verdict(
    report: AuditReport,
    exceptions: list[AuditException],
    today: datetime.date,
    allow_unreachable: bool,
) -> tuple[int, list[str]]:
    """The exit code and the lines to print."""
    lines = []
    open_findings = unexcused(report.findings, exceptions, today)
    for finding in open_findings:
        fix = f"fixed in {', '.join(finding.fixed_in)}" if finding.fixed_in else "no fix yet"
        lines.append(
            f"VULNERABLE {finding.package} {finding.version}: {finding.vulnerability} ({fix})"
        )
    excused = len(report.findings) - len(open_findings)
    lines.append(
        f"{report.audited} packages audited, {len(report.skipped)} not audited, "
        f"{len(report.findings)} vulnerabilities ({excused} with a documented exception)"
    )
    if open_findings:
        return EXIT_VULNERABLE, lines
    if report.audited == 0 and report.skipped:
        reason = next(iter(report.skipped.values()))
        lines.append(
            "NOT AUDITED: no package could be checked (the vulnerability service did not "
            f"answer; e.g. {reason})"
        )
        return (0 if allow_unreachable else EXIT_NOT_AUDITED), lines
    return 0, lines


def locked_requirements(directory: Path) -> Path:
    """Every locked package with its hashes, as a requirements file."""
    path = directory / "requirements.txt"
    path.write_text(exported_requirements(ROOT, hashes=True, everything=True))
    return path


def run_pip_audit(requirements: Path) -> dict[str, Any]:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip_audit",
            "--requirement",
            str(requirements),
            "--disable-pip",
            "--format",
            "json",
            "--progress-spinner",
            "off",
        ],
        capture_output=True,
        text=True,
    )
    # pip-audit exits 1 when it found something; its JSON report is on stdout either way.
    try:
        return json.loads(result.stdout)
    except json.JSONDecodeError:
        raise RuntimeError(f"pip-audit failed: {result.stderr.strip()[-2000:]}") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--allow-unreachable",
        action="store_true",
        help="do not fail when the vulnerability service cannot be reached at all "
        "(a reported vulnerability still fails)",
    )


def run(args: argparse.Namespace) -> None:
    try:
        import pip_audit  # noqa: F401
    except ImportError:
        sys.exit("voicewire audit needs pip-audit: uv run --group audit voicewire audit")
    with tempfile.TemporaryDirectory(prefix="voicewire-audit-") as directory:
        report = read_report(run_pip_audit(locked_requirements(Path(directory))))
    code, lines = verdict(report, load_exceptions(), datetime.date.today(), args.allow_unreachable)
    print("\n".join(lines), flush=True)
    sys.exit(code)
