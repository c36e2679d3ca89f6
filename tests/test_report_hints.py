"""Every command the report suggests runs as printed.

A small run (recordsets, guard toy-guard) is gated against a second run's
records; its HTML report is built without an attribution and without
figures, so it prints the attribution hint, and a second run without a gate
prints the gate hint. Each hint is read back from the report's own text,
split as a shell would split it, and run with ``guardrepro.cli.main``.
"""

from __future__ import annotations

import html
import re
import shlex
from pathlib import Path

import pytest
from recordsets import grid, write_run

from guardrepro.checks.report.hints import attribution_hint, gate_hint, report_hint
from guardrepro.checks.report.html import build_html
from guardrepro.cli import main

BASES = [("b1", "banking", 1.0), ("b2", "slack", 0.0), ("b3", "travel", 1.0)]
LOCAL = {"original": [1, 0, None], "marker_paraphrase": [0, 0, 1]}
REFERENCE = {"original": [1, 1, 1], "marker_paraphrase": [0, 0, 1]}
CODE = re.compile(r"<code>(guardrepro [^<]*)</code>|`(guardrepro [^`]*)`")


def _hints(page: Path) -> list[str]:
    text = html.unescape(page.read_text(encoding="utf-8"))
    return [a or b for a, b in CODE.findall(text)]


def _gate_spec(tmp_path: Path, reference: Path) -> Path:
    spec = tmp_path / "gate.toml"
    spec.write_text(
        'name = "hint-gate"\nrows = "originals"\n[reference]\ntype = "records"\n'
        f'path = "{(reference / "records.jsonl").as_posix()}"\n[thresholds]\n'
        "expected_rows = 3\nmin_coverage = 0.5\nmin_strict_agreement = 0.1\n"
        "min_strict_agreement_gold_safe = 0.0\nmin_strict_agreement_gold_unsafe = 0.0\n",
        encoding="utf-8")
    return spec


def _run(argv: list[str]) -> int:
    assert argv[0] == "guardrepro"
    return main(argv[1:])


def test_the_attribution_and_report_hints_run_as_printed(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run with space", grid(BASES, LOCAL))
    reference = write_run(tmp_path / "ref", grid(BASES, REFERENCE), run_id="ref-run")
    assert main(["gate", str(run), "--spec", str(_gate_spec(tmp_path, reference))]) == 0
    page = build_html(run)
    printed = _hints(page)
    from guardrepro.checks.report.markdown import load_gate

    wanted = attribution_hint(run, load_gate(run)).text
    assert wanted in printed and "--reference" in wanted
    assert _run(shlex.split(wanted)) == 0
    assert (run / "attribution.json").is_file()
    again = build_html(run)  # the attribution it wrote is the one the report reads
    assert "no attribution" not in again.read_text(encoding="utf-8")
    assert _run(shlex.split(report_hint(run).text)) == 0


def test_the_gate_hint_runs_as_printed(tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    run = write_run(tmp_path / "run", grid(BASES, LOCAL))
    page = build_html(run)  # no gate.json: the verdict line names the gate command
    wanted = gate_hint(run, "toy-guard").text
    assert wanted in _hints(page)
    assert shlex.split(wanted)[-2:] == ["--spec", "toy-guard"]
    capsys.readouterr()
    # the shipped toy-guard spec gates the toy reference's rows: the command runs
    # and the gate itself refuses this 3-row run by name (no usage error)
    assert _run(shlex.split(wanted)) == 2
    err = capsys.readouterr().err
    assert "Usage:" not in err and "have no reference prediction" in err


def test_a_hint_without_a_command_says_why(tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert gate_hint(run, "no-such-guard").argv == ()
    assert "no shipped gate spec" in gate_hint(run, "no-such-guard").text
    assert attribution_hint(run, None).argv == ()


@pytest.mark.parametrize("name", ["plain", "with space", "quote's"])
def test_hint_paths_are_quoted_for_the_shell(tmp_path: Path, name: str) -> None:
    run = tmp_path / name
    assert shlex.split(report_hint(run).text) == ["guardrepro", "report", str(run.resolve())]
