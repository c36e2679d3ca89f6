"""A predictions file that lacks some rows is scored like the run directory it
came from with those records removed: the absent rows are missing, invalid
and decision 1 in every statistic, never unpaired (docs/PROTOCOL.md, "Edge
rules")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from q8rows import base_id, q8_rows, write_predictions
from recordsets import write_run

from guardrepro.checks.io.predictions import load_rows
from guardrepro.checks.stats.compute import compute_stats
from guardrepro.cli import main
from guardrepro.errors import InputError

REPLICATES = 600
REMOVED = tuple(range(0, 250, 25))  # 10 rows; never all four rows of one base


def run_specs(rows: list[dict[str, Any]], removed: set[int]) -> list[tuple[Any, ...]]:
    """recordsets specs: a null score is a parse error, a removed row has no record."""
    return [(r["base_sample_id"], r["variant"], r["domain"], r["gold_label"],
             None if i in removed else ("parse" if r["score"] is None else r["score"]))
            for i, r in enumerate(rows)]


def figures(path: Path, cohort: Path | None = None) -> dict[str, Any]:
    """stats.json without the expected-rows source; a run's ``parse_error``
    status reads ``invalid`` (a predictions file can only say null)."""
    rows = load_rows(path, cohort)
    data = compute_stats(rows.rows, replicates=REPLICATES).to_dict()
    data["settings"].pop("expected_rows", None)
    for counts in [data["rows"]["by_status"], *(v["by_status"] for v in
                                                data["variants"].values())]:
        if "parse_error" in counts:
            counts["invalid"] = counts.pop("parse_error")
    return data


@pytest.mark.parametrize("with_cohort", [True, False])
def test_same_figures_as_the_run_directory(tmp_path: Path, with_cohort: bool) -> None:
    rows = q8_rows()
    run = write_run(tmp_path / "run", run_specs(rows, set(REMOVED)), with_cohort=with_cohort)
    kept = [r for i, r in enumerate(rows) if i not in REMOVED]
    preds = write_predictions(tmp_path / "preds.jsonl", kept)
    cohort = tmp_path / "run-cohort.jsonl" if with_cohort else None
    from_run, from_preds = figures(run), figures(preds, cohort)
    assert from_preds == from_run
    assert from_preds["rows"]["by_status"]["missing"] == 10
    removed_valid = sum(1 for i in REMOVED if rows[i]["score"] is not None)
    assert from_preds["rows"]["coverage"]["numerator"] == 255 - removed_valid
    for edit in ("marker_paraphrase", "tool_alias", "combined"):
        block = from_preds["edits"][edit]
        assert block["pairs"] == 64  # nothing drops out as unpaired
        assert (block["unpaired_edit_rows"], block["unpaired_original_rows"]) == (0, 0)


def test_a_missing_original_fails_closed_by_hand(tmp_path: Path) -> None:
    # banking s4 is gold safe and allowed (score 0) in all four variants. Without
    # its original row that row is decision 1: every edit gains a flip in
    # all_pairs (marker_paraphrase 3 -> 4 of 64), the pair leaves valid_both
    # (3 of 63), and original accuracy drops from 61 to 60 of 64.
    rows = [r for r in q8_rows()
            if (r["base_sample_id"], r["variant"]) != (base_id("banking", "s4"), "original")]
    preds = write_predictions(tmp_path / "preds.jsonl", rows)
    stats = figures(preds)
    mp = stats["edits"]["marker_paraphrase"]
    assert (mp["all_pairs"]["flip_rate"]["count"], mp["all_pairs"]["flip_rate"]["denominator"]) \
        == (4, 64)
    assert (mp["valid_both_only"]["flip_rate"]["count"],
            mp["valid_both_only"]["flip_rate"]["denominator"]) == (3, 63)
    acc = stats["variants"]["original"]["strict_accuracy"]
    assert (acc["count"], acc["denominator"]) == (60, 64)


def test_cli_prints_the_missing_count(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = q8_rows()
    write_run(tmp_path / "run", run_specs(rows, set()))
    preds = write_predictions(tmp_path / "preds.jsonl",
                              [r for i, r in enumerate(rows) if i not in REMOVED])
    assert main(["stats", str(preds), "--cohort", str(tmp_path / "run-cohort.jsonl"),
                 "--replicates", "20", "--out", str(tmp_path / "out")]) == 0
    assert "missing: 10 of 256 expected rows" in capsys.readouterr().out
    data = json.loads((tmp_path / "out" / "preds.stats.json").read_text())  # <stem>.stats.json
    assert data["rows"]["by_status"]["missing"] == 10


def test_predictions_outside_the_cohort_are_refused(tmp_path: Path) -> None:
    rows = q8_rows()
    write_run(tmp_path / "run", run_specs(rows[:8], set()))
    cohort = tmp_path / "run-cohort.jsonl"
    preds = write_predictions(tmp_path / "preds.jsonl", rows[:9])
    with pytest.raises(InputError) as info:
        load_rows(preds, cohort)
    assert (info.value.line, info.value.field) == (9, "base_sample_id")
    wrong = [dict(r) for r in rows[:8]]
    wrong[2]["domain"] = "slack"
    preds = write_predictions(tmp_path / "wrong.jsonl", wrong)
    with pytest.raises(InputError) as info:
        load_rows(preds, cohort)
    assert (info.value.line, info.value.field) == (3, "domain")
