"""Truncation, named: the shipped toy guard capped at 8 new tokens never reaches
its harmfulness rating (its answers open with a ``<Think>`` block of about 25
tokens), so every row is ``truncated``: a status of its own, counted and named
by ``run``, ``stats``, ``gate``, ``table`` and the report, and failing closed
like any invalid row. With the toy's own budget no row is truncated."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from guardrepro.cli import cli
from guardrepro.rundir.records import read_records

pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[1]
TOY_BENCH = ROOT / "guardrepro" / "data" / "toy_bench"
CAP = 8
ROWS = 4  # one base: original and its three edits


def _profile(path: Path, max_new_tokens: int) -> Path:
    text = (ROOT / "runners" / "toy-hf.toml").read_text(encoding="utf-8")
    text = text.replace("max_new_tokens = 256", f"max_new_tokens = {max_new_tokens}")
    text = text.replace("workers = 2 ", "workers = 1 ").replace('"../locks/', f'"{ROOT}/locks/')
    path.write_text(text, encoding="utf-8")
    return path


def _invoke(args: list[str]) -> Any:
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code in (0, 3), result.output
    return result


@pytest.fixture(scope="module")
def capped(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from guardrepro.bench.cohort.build import build_cohort_file

    tmp = tmp_path_factory.mktemp("truncated")
    cohort = tmp / "cohort.jsonl"
    build_cohort_file(ROOT / "cohorts" / "toy-64.toml", TOY_BENCH, cohort)
    run = tmp / "capped"
    result = _invoke(["run", "--profile", str(_profile(tmp / "capped.toml", CAP)), "--cohort",
                      str(cohort), "--out", str(run), "--limit", str(ROWS), "--no-progress"])
    return {"tmp": tmp, "cohort": cohort, "run": run, "result": result}


def test_a_row_capped_by_max_new_tokens_is_truncated(capped: dict[str, Any]) -> None:
    records = read_records(capped["run"])
    assert len(records) == ROWS
    for record in records:
        assert (record.status, record.finish_reason) == ("truncated", "length")
        assert len(record.output_token_ids) == CAP and record.score is None
        assert "<harmfulness_rating>" not in record.output_text.lower()
        assert record.strict_decision == 1  # fails closed
    result = capped["result"]
    assert f"status: ok 0, parse_error 0, truncated {ROWS}, inference_error 0" in result.stdout
    assert f"(parse_error 0, truncated {ROWS})" in result.stderr  # the unparsed-rows warning


def test_the_toy_budget_truncates_nothing(capped: dict[str, Any]) -> None:
    run = capped["tmp"] / "full"
    _invoke(["run", "--profile", str(_profile(capped["tmp"] / "full.toml", 256)), "--cohort",
             str(capped["cohort"]), "--out", str(run), "--limit", "2", "--no-progress"])
    records = read_records(run)
    assert [r.finish_reason for r in records] == ["stop", "stop"]
    assert {r.status for r in records} <= {"ok", "parse_error"}


def test_stats_gate_and_report_name_truncated_rows(capped: dict[str, Any]) -> None:
    run = capped["run"]
    originals = sum(1 for r in read_records(run) if r.variant == "original")
    assert originals == 1
    stats = json.loads(_invoke(["stats", str(run), "--json", "--replicates", "100"]).stdout)
    assert stats["rows"]["by_status"]["truncated"] == ROWS
    assert stats["rows"]["coverage"]["numerator"] == 0
    text = _invoke(["stats", str(run), "--replicates", "100"]).stdout
    assert f"truncated: {ROWS} rows reached max_new_tokens" in text
    from guardrepro.cli import main

    # 63 of the 64 gated originals are missing: the gate fails (exit 3) and writes gate.json
    assert main(["gate", str(run), "--spec", str(ROOT / "checks" / "toy-guard.toml")]) == 3
    gate = json.loads((run / "gate.json").read_text())
    assert gate["truncated_rows"] == originals
    reasons = {d["local_status"] for d in gate["disagreements"]}
    assert "truncated" in reasons
    _invoke(["report", str(run)])
    report = (run / "report.md").read_text()
    assert f"truncated {ROWS}" in report  # by status
    assert f"truncated {originals}" in report  # the gate table


def test_the_toolsafe_table_counts_truncated_rows(capped: dict[str, Any]) -> None:
    """Both views treat a truncated row as an unparsed one: dropped upstream (as
    the evaluator drops unparsed rows), unsafe fail-closed; its count is shown."""
    from guardrepro.bench.cohort.split import build_any_cohort_file

    tmp = capped["tmp"]
    cohort = tmp / "asb.jsonl"
    build_any_cohort_file(ROOT / "cohorts/toy-asb-all.toml", TOY_BENCH, cohort)
    run = tmp / "asb-capped"
    _invoke(["run", "--profile", str(_profile(tmp / "asb.toml", CAP)), "--cohort", str(cohort),
             "--out", str(run), "--limit", "3", "--no-progress"])
    out = _invoke(["table", str(run), "--benchmark", "asb", "--data-dir", str(TOY_BENCH),
                   "--replicates", "100", "--json"]).stdout
    up, fc = json.loads(out)["rows"]
    total = up["rows"]
    assert (up["truncated"], fc["truncated"]) == (3, 3)
    assert up["invalid"] == total  # 3 truncated + the rows never run
    assert (up["kept"], fc["kept"]) == (0, total)
    text = _invoke(["table", str(run), "--benchmark", "asb", "--data-dir", str(TOY_BENCH),
                    "--replicates", "100"]).stdout
    assert "(truncated 3)" in text
