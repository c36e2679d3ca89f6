"""Fault suite, records: a run directory whose records.jsonl was edited by hand or
damaged. ``compare`` and ``stats`` (CLI) must exit 2 naming the file, the row and
the field, never a traceback and never a silently trusted value."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from recordsets import grid, guard_text, write_run

from guardrepro.cli import main

pytestmark = pytest.mark.faults


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def run_with(tmp_path: Path, row: int, change: Callable[[dict[str, Any]], None]) -> Path:
    bases = [(f"b{i}", "banking", float(i % 2)) for i in range(4)]
    run = write_run(tmp_path / "run", grid(bases, {"original": [0, 1, 0, 1]}))
    path = run / "records.jsonl"
    lines = path.read_text().splitlines()
    data = json.loads(lines[row])
    change(data)
    lines[row] = json.dumps(data)
    path.write_text("\n".join(lines) + "\n")
    return run


def expect_exit_2(code: int, err: str, *parts: str) -> None:
    assert code == 2, err
    assert "Traceback" not in err
    for part in parts:
        assert part in err, (part, err)


CASES: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    ("decision_margin", lambda d: d.update(decision_margin="big"), "finite number"),
    ("decision_margin", lambda d: d.update(decision_margin=float("nan")), "finite number"),
    ("output_token_ids", lambda d: d.update(output_token_ids=[1, "2"]), "token id 1"),
    ("output_token_ids", lambda d: d.update(output_token_ids=[-3]), "non-negative"),
    ("prompt_tokens", lambda d: d.update(prompt_tokens=True), "non-negative integer"),
    ("prompt_tokens", lambda d: d.update(prompt_tokens=-1), "non-negative integer"),
    ("gold_label", lambda d: d.update(gold_label="1"), "0.5"),
]


@pytest.mark.parametrize(("field", "change", "says"), CASES)
def test_bad_field_on_read_names_file_row_field(tmp_path, capsys, field, change, says):
    run = run_with(tmp_path, 2, change)
    code, _, err = cli(capsys, "compare", str(run), str(run))
    expect_exit_2(code, err, str(run / "records.jsonl"), "line 3", f"field '{field}'", says)


def test_compare_non_numeric_margin_is_not_a_type_error(tmp_path, capsys):
    good = run_with(tmp_path / "a", 0, lambda d: None)
    bad = run_with(tmp_path / "b", 1, lambda d: d.update(decision_margin="0.5"))
    code, _, err = cli(capsys, "compare", str(good), str(bad))
    expect_exit_2(code, err, str(bad / "records.jsonl"), "line 2", "field 'decision_margin'")
    assert "TypeError" not in err


def test_bad_attempt_score_names_the_attempt(tmp_path, capsys):
    def change(d: dict[str, Any]) -> None:
        d["attempts"] = [
            {"text": guard_text(1.0), "token_ids": [1], "finish_reason": "stop",
             "status": "ok", "score": 7, "error_type": None, "decision_margin": 1.0,
             "seed": None}
        ]  # fmt: skip

    run = run_with(tmp_path, 3, change)
    code, _, err = cli(capsys, "stats", str(run), "--replicates", "10")
    expect_exit_2(code, err, "line 4", "field 'attempts[0].score'")


def test_score_contradicting_the_output_text_is_an_integrity_error(tmp_path, capsys):
    # row 0 parses to 0.0; the record claims 1.0 (a hand edit of the score)
    run = run_with(tmp_path, 0, lambda d: d.update(score=1.0))
    code, _, err = cli(capsys, "stats", str(run), "--replicates", "10")
    expect_exit_2(code, err, str(run / "records.jsonl"), "line 1", "contradicts its own output")
    assert "score 1.0" in err and "score 0.0" in err


def test_record_error_names_its_field_once(tmp_path, capsys):
    run = run_with(tmp_path, 1, lambda d: d.update(score=0.7))
    code, _, err = cli(capsys, "compare", str(run), str(run))
    expect_exit_2(code, err, "line 2", "0.7")
    assert err.count("field 'score'") == 1, err


def test_gold_label_mismatch_names_records_file_row_and_cohort_row(tmp_path, capsys):
    # the record of row 1 (gold 1) says gold 0; its output still parses to its score
    run = run_with(tmp_path, 1, lambda d: d.update(gold_label=0.0))
    code, _, err = cli(capsys, "stats", str(run), "--replicates", "10")
    cohort = tmp_path / "run-cohort.jsonl"
    expect_exit_2(
        code, err, str(run / "records.jsonl"), "line 2", "field 'gold_label'", str(cohort)
    )
    assert "line 2)" in err  # the cohort row
