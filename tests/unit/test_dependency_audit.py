"""``voicewire audit``'s verdicts, on pip-audit's own JSON report: a vulnerability fails the run
unless a current, documented exception covers it; an audit that reached nothing says so."""

from __future__ import annotations

import datetime

import pytest

from voicewire_tools.commands.dependency_audit import (
    EXIT_NOT_AUDITED,
    EXIT_VULNERABLE,
    AuditException,
    load_exceptions,
    read_report,
    verdict,
)

TODAY = datetime.date(2026, 12, 1)
# pip-audit 2.x's ``-f json`` shape: audited packages carry "vulns", skipped ones "skip_reason".
REPORT = {
    "dependencies": [
        {
            "name": "jinja2",
            "version": "2.4.1",
            "vulns": [
                {
                    "id": "PYSEC-2014-8",
                    "fix_versions": ["2.7.2"],
                    "aliases": ["CVE-2014-1402"],
                    "description": "...",
                }
            ],
        },
        {"name": "starlette", "version": "0.50.0", "vulns": []},
        {
            "name": "private-thing",
            "skip_reason": "Dependency not found on PyPI and could not be "
            "audited: private-thing (1.0)",
        },
    ],
    "fixes": [],
}


def exception(review_by: datetime.date) -> AuditException:
    return AuditException("PYSEC-2014-8", "Jinja2", "templates are never user input", review_by)


def test_a_vulnerability_fails_the_audit_and_names_its_fix():
    code, lines = verdict(read_report(REPORT), [], TODAY, allow_unreachable=True)
    assert code == EXIT_VULNERABLE
    assert "VULNERABLE jinja2 2.4.1: PYSEC-2014-8 (fixed in 2.7.2)" in lines
    assert "2 packages audited, 1 not audited, 1 vulnerabilities" in lines[-1]


def test_a_documented_exception_lets_it_through_until_its_review_date():
    report = read_report(REPORT)
    assert verdict(report, [exception(TODAY)], TODAY, False)[0] == 0
    lapsed = exception(TODAY - datetime.timedelta(days=1))
    assert verdict(report, [lapsed], TODAY, False)[0] == EXIT_VULNERABLE


def test_nothing_audited_is_not_a_pass_unless_allowed():
    unreachable = {"dependencies": [d for d in REPORT["dependencies"] if "skip_reason" in d]}
    code, lines = verdict(read_report(unreachable), [], TODAY, allow_unreachable=False)
    assert code == EXIT_NOT_AUDITED and lines[-1].startswith("NOT AUDITED")
    assert verdict(read_report(unreachable), [], TODAY, allow_unreachable=True)[0] == 0


def test_an_exception_without_a_reason_or_date_is_an_error(tmp_path):
    path = tmp_path / "audit-exceptions.toml"
    path.write_text('[[exception]]\nid = "PYSEC-1"\npackage = "x"\nreview_by = 2027-01-01\n')
    with pytest.raises(ValueError, match="no reason"):
        load_exceptions(path)
    path.write_text('[[exception]]\nid = "P"\npackage = "x"\nreason = "r"\nreview_by = "soon"\n')
    with pytest.raises(ValueError, match="TOML date"):
        load_exceptions(path)


def test_the_committed_exceptions_file_is_valid():
    assert all(entry.reason for entry in load_exceptions())
