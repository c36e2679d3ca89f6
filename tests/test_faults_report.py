"""Fault suite, reports: ``report --html`` on a rule-backend run, names from the
run's data escaped in report.md, and paths from the manifest or gate.json used
only when their bytes are the ones the run recorded.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from test_faults_input import _paired_cohort
from test_faults_weights import cli

pytestmark = pytest.mark.faults

ROOT = Path(__file__).resolve().parent.parent
RULE = ROOT / "runners/rule-nuisance.toml"


def _run(tmp_path: Path, capsys, profile: Path = RULE) -> Path:
    cohort = _paired_cohort(tmp_path / "cohort.jsonl", 6)
    run = tmp_path / "run"
    code, _, err = cli(capsys, "run", "--profile", str(profile), "--cohort", str(cohort),
                       "--out", str(run), "--no-progress")
    assert code == 0, err
    return run


def test_report_html_works_for_the_shipped_rule_profile(tmp_path, capsys):
    run = _run(tmp_path, capsys)
    code, _, err = cli(capsys, "report", str(run), "--html", "--replicates", "100")
    assert code == 0, err
    html = (run / "report.html").read_text(encoding="utf-8")
    assert "AssertionError" not in err
    # the rule guard renders its own prompt: no "template unavailable" fallback note
    assert "guard template unavailable" not in html and "not found" not in html


def test_report_does_not_use_a_profile_changed_since_the_run(tmp_path, capsys):
    profile = tmp_path / "rule.toml"
    shutil.copyfile(RULE, profile)
    run = _run(tmp_path, capsys, profile)
    profile.write_text(RULE.read_text() + "\n# edited after the run\n")
    code, _, err = cli(capsys, "report", str(run), "--html", "--replicates", "100")
    assert code == 0, err
    html = (run / "report.html").read_text(encoding="utf-8")
    assert "changed since the run (sha256 differs)" in html


def test_report_md_escapes_names_from_the_run(tmp_path, capsys):
    cohort = _paired_cohort(tmp_path / "cohort.jsonl", 6)
    rows = [json.loads(line) for line in cohort.read_text().splitlines()]
    payload = "<img src=x onerror=alert(1)>|[x](javascript:alert(2))"
    for row in rows:
        row["domain"] = row["sample"]["subset"] = "banking" + payload
    cohort.write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = tmp_path / "run<b>"
    code, _, err = cli(capsys, "run", "--profile", str(RULE), "--cohort", str(cohort),
                       "--out", str(run), "--no-progress")
    assert code == 0, err
    code, _, err = cli(capsys, "report", str(run), "--replicates", "100")
    assert code == 0, err
    text = (run / "report.md").read_text(encoding="utf-8")
    assert "<b>" not in text and "&lt;b&gt;" in text  # the run id
    assert "<img" not in text and "](javascript" not in text


def test_second_report_writes_the_same_bytes(tmp_path, capsys):
    run = _run(tmp_path, capsys)
    names = ("report.md", "stats.json", "report.html")
    assert cli(capsys, "report", str(run), "--html", "--replicates", "100")[0] == 0
    first = {n: (run / n).read_bytes() for n in names}
    assert cli(capsys, "report", str(run), "--html", "--replicates", "100")[0] == 0
    assert {n: (run / n).read_bytes() for n in names} == first
