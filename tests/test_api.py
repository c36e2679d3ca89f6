"""The Python API (``import guardrepro as gr``) on hand-made runs.

Expectations are worked out by hand from the specs below; the statistics
themselves are those of ``guardrepro.checks.stats.compute`` (tested there), so here
the API must pass the same rows through unchanged.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from extras import needs_pyarrow
from recordsets import grid, write_run

import guardrepro as gr
from guardrepro.checks.stats.compute import compute_stats
from guardrepro.cli import main
from guardrepro.errors import InputError
from guardrepro.rundir.read import load_run as load_rows

BASES = [("b1", "banking", 0), ("b2", "banking", 1), ("b3", "slack", 0)]
# cohort order: tool_alias before the original, to check "original first"
SCORES = {"tool_alias": [1, 1, None], "original": [0, 1, "parse"], "combined": [0, 0.5, 0]}


@pytest.fixture()
def run(tmp_path: Path) -> Path:
    return write_run(tmp_path / "run", grid(BASES, SCORES), margins={"b1:original": 0.5})


def test_load_run_rows_and_types(run: Path) -> None:
    df = gr.load_run(run)
    assert len(df) == 9  # b3:tool_alias has no record but is an expected row
    missing = df.set_index("row_id").loc["b3:tool_alias"]
    assert missing["status"] == "missing" and pd.isna(missing["score"])
    assert missing["strict_decision"] == 1  # fail-closed
    assert list(df["variant"].cat.categories) == ["original", "tool_alias", "combined"]
    assert str(df["score"].dtype) == "Float64" and str(df["decision_margin"].dtype) == "Float64"
    assert str(df["strict_decision"].dtype) == "Int8"
    row = df.set_index("row_id").loc["b1:original"]
    assert (row["score"], row["decision_margin"], row["valid"]) == (0.0, 0.5, True)
    parse = df.set_index("row_id").loc["b3:original"]
    assert parse["status"] == "parse_error" and parse["strict_decision"] == 1
    assert df.set_index("row_id").loc["b2:combined", "strict_decision"] == 1  # 0.5 is unsafe


def test_load_cohort(run: Path) -> None:
    df = gr.load_cohort(run.parent / "run-cohort.jsonl")
    assert len(df) == 9 and df.columns[0] == "row_id"
    assert "sample.sample_id" in df.columns
    assert df["variant"].cat.categories[0] == "original"


def test_stats_from_frame_equals_stats_from_rows(run: Path) -> None:
    from_df = gr.stats(gr.load_run(run), replicates=300, seed=7).to_dict()
    rows = load_rows(run)
    direct = compute_stats(rows.rows, replicates=300, seed=7,
                           expected_source=rows.expected_source).to_dict()
    assert from_df["edits"] == direct["edits"]
    assert from_df["variants"] == direct["variants"]
    table = gr.stats(gr.load_run(run), replicates=300).to_frame()
    flips = table.set_index("path").loc["edits.tool_alias.all_pairs.flip_rate"]
    # b1 0->1 flips; b2 1->1 no; b3 parse (1) -> missing (1) no
    assert (flips["count"], flips["denominator"]) == (1, 3)


@needs_pyarrow
def test_compare_and_export(run: Path, tmp_path: Path) -> None:
    other = write_run(tmp_path / "other", grid(BASES, {**SCORES, "original": [1, 1, 0]}))
    df = gr.compare(run, other)
    assert len(df) == 8  # rows in both (b3:tool_alias is in neither)
    moved = df[~df["strict_agree"]]["row_id"].tolist()
    assert sorted(moved) == ["b1:original", "b3:original"]
    assert df.attrs["summary"]["strict_agreement"]["count"] == 6
    for suffix in (".csv", ".parquet"):
        path = gr.export(df, tmp_path / f"cmp{suffix}")
        back = pd.read_csv(path) if suffix == ".csv" else pd.read_parquet(path)
        assert back["row_id"].tolist() == df["row_id"].tolist()
        assert back["strict_agree"].tolist() == df["strict_agree"].tolist()
    with pytest.raises(InputError, match=r"\.csv or \.parquet"):
        gr.export(df, tmp_path / "cmp.xlsx")


@needs_pyarrow
def test_cli_exports(run: Path, tmp_path: Path) -> None:
    out = tmp_path / "stats.parquet"
    assert main(["stats", str(run), "--replicates", "200", "--export", str(out)]) == 0
    table = pd.read_parquet(out).set_index("path")
    assert table.loc["edits.tool_alias.all_pairs.flip_rate", "count"] == 1
    csv = tmp_path / "cmp.csv"
    assert main(["compare", str(run), str(run), "--export", str(csv)]) == 0
    back = pd.read_csv(csv).set_index("row_id")
    # a run against itself: every row agrees except b3's parse error, which is
    # invalid on both sides and so, under the gate's rule, not an agreement
    assert not back.loc["b3:original", "strict_agree"]
    assert back.drop(index="b3:original")["strict_agree"].all()


def test_gate_and_load_gate(run: Path, tmp_path: Path) -> None:
    ref = write_run(tmp_path / "ref", grid(BASES, {"original": [0, 1, 1]}))
    spec = tmp_path / "gate.toml"
    spec.write_text(
        f'name = "api-gate"\nrows = "originals"\n[reference]\ntype = "records"\n'
        f'path = "{(ref / "records.jsonl").as_posix()}"\n[thresholds]\nexpected_rows = 3\n'
        "min_coverage = 0.5\nmin_strict_agreement = 0.5\nmin_strict_agreement_gold_safe = 0.5\n"
        "min_strict_agreement_gold_unsafe = 0.5\n", encoding="utf-8")
    result = gr.gate(run, spec)
    assert result.passed  # 2/3 agree, above the 0.5 thresholds
    # b3's parse error is invalid: a disagreement under the gate's rule
    assert result.to_frame()["strict_agree"].tolist() == [True, True, False]
    assert gr.load_gate(run) is None  # gr.gate writes nothing
    # one GateResult type: the API returns the checks' own result, and a
    # gate.json written by the CLI reads back as an equal one
    from guardrepro.checks.parity.gate import GateResult
    from guardrepro.checks.stats.compute import StatsResult

    assert gr.GateResult is GateResult and isinstance(result, GateResult)
    assert gr.StatsResult is StatsResult and isinstance(gr.stats(run, replicates=50), StatsResult)
    main(["gate", str(run), "--spec", str(spec)])
    loaded = gr.load_gate(run)
    assert loaded is not None and loaded.passed
    assert loaded.to_frame().equals(result.to_frame())
    assert loaded.disagreements()["row_id"].tolist() == ["b3:original"]
    assert not hasattr(gr, "frontier")
