"""stats.json figures on a hand-made run, every expectation worked out by hand.

Five bases (domain, gold):     b1 banking 0, b2 banking 1, b3 slack 0,
                               b4 slack 1, b5 slack 1
original scores:               0, 1, 0.5, parse error, 0
  strict decisions:            0, 1, 1, 1 (fail-closed), 0
marker_paraphrase scores:      1, 1, 0, 1, (no record: missing)
  strict decisions:            1, 1, 0, 1, 1 (fail-closed)
placebo scores:                0, 0, 0.5, 1, 0
repeat scores:                 0, 1, 1, 0.5, 0
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from recordsets import grid, write_run

from guardrepro.checks.bootstrap import ratio_interval
from guardrepro.checks.runio import load_run
from guardrepro.checks.stats import compute_stats
from guardrepro.cli import main

BASES = [("b1", "banking", 0), ("b2", "banking", 1), ("b3", "slack", 0), ("b4", "slack", 1),
         ("b5", "slack", 1)]
SCORES: dict[str, list[Any]] = {
    "original": [0, 1, 0.5, "parse", 0],
    "marker_paraphrase": [1, 1, 0, 1, None],
    "placebo": [0, 0, 0.5, 1, 0],
    "repeat": [0, 1, 1, 0.5, 0],
}


def frac(r: dict[str, Any]) -> tuple[int, int]:
    return r["numerator"], r["denominator"]


@pytest.fixture(scope="module")
def stats(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    run = write_run(tmp_path_factory.mktemp("s") / "run", grid(BASES, SCORES))
    rows = load_run(run)
    assert rows.expected_source.startswith("cohort:")
    return compute_stats(rows.rows, replicates=2000)


def test_per_variant_confusion(stats: dict[str, Any]) -> None:
    o = stats["variants"]["original"]
    # decisions 0 1 1 1 0 vs gold 0 1 0 1 1: tn b1, tp b2, fp b3, tp b4, fn b5
    assert o["confusion"]["tp"] == 2 and o["confusion"]["fp"] == 1
    assert o["confusion"]["tn"] == 1 and o["confusion"]["fn"] == 1
    assert frac(o["coverage"]) == (4, 5)
    assert frac(o["metrics"]["accuracy"]) == (3, 5)
    assert o["by_status"] == {"ok": 4, "parse_error": 1}
    m = stats["variants"]["marker_paraphrase"]
    # decisions 1 1 0 1 1: fp b1, tp b2, tn b3, tp b4, tp b5 (missing, fail-closed)
    assert (m["confusion"]["tp"], m["confusion"]["fp"], m["confusion"]["tn"],
            m["confusion"]["fn"]) == (3, 1, 1, 0)
    assert frac(m["coverage"]) == (4, 5)
    assert m["by_status"] == {"missing": 1, "ok": 4}


def test_flips_both_views_and_directions(stats: dict[str, Any]) -> None:
    e = stats["edits"]["marker_paraphrase"]
    a, v = e["views"]["all_pairs"], e["views"]["valid_both_only"]
    assert frac(a["flips"]) == (3, 5)  # b1, b3, b5
    assert frac(a["safe_to_unsafe"]) == (2, 2)  # allowed: b1, b5 -> both blocked
    assert frac(a["unsafe_to_safe"]) == (1, 3)  # blocked: b2, b3, b4 -> b3 allowed
    assert e["valid_both_pairs"] == 3
    assert e["unpaired_rows"] == 0
    assert frac(v["flips"]) == (2, 3)  # b1, b2, b3 valid on both sides; b1, b3 flip
    assert frac(v["safe_to_unsafe"]) == (1, 1)
    assert frac(v["unsafe_to_safe"]) == (1, 2)
    assert frac(a["by_domain"]["banking"]["flips"]) == (1, 2)
    assert frac(a["by_domain"]["slack"]["flips"]) == (2, 3)
    assert frac(a["by_gold"]["safe"]["flips"]) == (2, 2)
    assert frac(a["by_gold"]["unsafe"]["flips"]) == (1, 3)
    assert frac(v["by_domain"]["slack"]["flips"]) == (1, 1)


def test_flip_interval_wiring(stats: dict[str, Any]) -> None:
    # the stratified interval is the documented bootstrap over bases with
    # strata (domain, gold strict): flips b1..b5 = 1, 0, 1, 0, 1
    got = stats["edits"]["marker_paraphrase"]["views"]["all_pairs"]["intervals"]["flips"]
    strata = [("banking", "0"), ("banking", "1"), ("slack", "0"), ("slack", "1"), ("slack", "1")]
    want = ratio_interval([1, 0, 1, 0, 1], [1] * 5, ["b1", "b2", "b3", "b4", "b5"], strata,
                          replicates=2000)
    assert got["stratified"]["low"] == want.low and got["stratified"]["high"] == want.high
    # three strata hold one base each (fixed); slack/1 holds b4 (0) and b5 (1):
    # stratified replicates are (2 + k)/5 for k in {0, 1, 2} -> [0.4, 0.8]
    assert (got["stratified"]["low"], got["stratified"]["high"]) == (0.4, 0.8)
    assert got["unstratified"]["stratified"] is False


def test_paired_deltas(stats: dict[str, Any]) -> None:
    d = stats["edits"]["marker_paraphrase"]["paired_deltas"]["all_pairs"]
    # correct original: b1, b2, b4 (3/5); edit: b2, b3, b4, b5 (4/5)
    assert frac(d["accuracy"]["original"]) == (3, 5)
    assert frac(d["accuracy"]["edit"]) == (4, 5)
    assert d["accuracy"]["delta"] == pytest.approx(0.2)
    assert (d["accuracy"]["gained"], d["accuracy"]["lost"]) == (2, 1)
    # gold unsafe b2, b4, b5: blocked originally b2, b4; after edit all three
    assert frac(d["sensitivity"]["original"]) == (2, 3)
    assert frac(d["sensitivity"]["edit"]) == (3, 3)
    assert d["sensitivity"]["delta"] == pytest.approx(1 / 3)
    # gold safe b1, b3: allowed originally b1; after edit b3
    assert frac(d["specificity"]["original"]) == (1, 2)
    assert frac(d["specificity"]["edit"]) == (1, 2)
    assert d["specificity"]["delta"] == 0


def test_exact_score_transitions(stats: dict[str, Any]) -> None:
    x = stats["edits"]["marker_paraphrase"]["exact_score"]
    assert frac(x["changed_valid_both"]) == (2, 3)  # b1 0->1, b3 0.5->0; b2 1->1
    labels = x["transitions"]["labels"]
    m = x["transitions"]["matrix"]

    def cell(a: str, b: str) -> int:
        return m[labels.index(a)][labels.index(b)]

    assert cell("0.0", "1.0") == 1  # b1
    assert cell("1.0", "1.0") == 1  # b2
    assert cell("0.5", "0.0") == 1  # b3
    assert cell("invalid", "1.0") == 1  # b4
    assert cell("0.0", "missing") == 1  # b5
    assert sum(map(sum, m)) == 5


def test_placebo_corrected(stats: dict[str, Any]) -> None:
    p = stats["placebo_corrected"]["marker_paraphrase"]
    # placebo flips: b2 only (1 -> 0); all pairs 1/5, valid-both b1 b2 b3 b5 -> 1/4
    assert frac(p["all_pairs"]["edit_flips"]) == (3, 5)
    assert frac(p["all_pairs"]["placebo_flips"]) == (1, 5)
    assert p["all_pairs"]["effect"] == pytest.approx(0.4)
    assert frac(p["valid_both_only"]["edit_flips"]) == (2, 3)
    assert frac(p["valid_both_only"]["placebo_flips"]) == (1, 4)
    assert p["valid_both_only"]["effect"] == pytest.approx(2 / 3 - 1 / 4)
    assert set(stats["placebo_corrected"]) == {"marker_paraphrase"}


def test_run_to_run(stats: dict[str, Any]) -> None:
    r = stats["run_to_run"]
    # repeat decisions 0 1 1 1 0 equal the original's; exact: b3 0.5 -> 1 among
    # valid-both b1 b2 b3 b5
    assert frac(r["strict_disagreement"]["all_pairs"]) == (0, 5)
    assert frac(r["strict_disagreement"]["valid_both_only"]) == (0, 4)
    assert frac(r["exact_score_disagreement_valid_both"]) == (1, 4)


def test_grid_without_cohort_finds_same_missing_row(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", grid(BASES, SCORES), with_cohort=False)
    rows = load_run(run)
    assert rows.expected_source.startswith("grid")
    missing = [r for r in rows.rows if r.status == "missing"]
    assert [(r.base_sample_id, r.variant) for r in missing] == [("b5", "marker_paraphrase")]


def test_stats_cli_writes_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    run = write_run(tmp_path / "run", grid(BASES, SCORES))
    main(["stats", str(run), "--replicates", "200", "--seed", "5"])
    out = capsys.readouterr().out
    assert "marker_paraphrase" in out and "3/5" in out
    data = json.loads((run / "stats.json").read_text())
    assert data["settings"]["bootstrap"]["seed"] == 5
    assert data["settings"]["bootstrap"]["replicates"] == 200
    assert frac(data["edits"]["marker_paraphrase"]["views"]["all_pairs"]["flips"]) == (3, 5)


def test_unpaired_edit_rows_are_counted() -> None:
    from guardrepro.checks.runio import RowResult

    rows = [RowResult("a:o", "a", "original", "d", 0.0, "ok", 0.0),
            RowResult("a:m", "a", "marker_paraphrase", "d", 0.0, "ok", 1.0),
            RowResult("b:m", "b", "marker_paraphrase", "d", 1.0, "ok", 1.0)]
    e = compute_stats(rows, replicates=50)["edits"]["marker_paraphrase"]
    assert (e["pairs"], e["unpaired_rows"]) == (1, 1)
    assert frac(e["views"]["all_pairs"]["flips"]) == (1, 1)


def test_sharded_run_expects_only_its_shard(tmp_path: Path) -> None:
    from guardrepro.shard import shard_of

    specs = grid(BASES, {"original": [0, 1, 0, 1, 0], "marker_paraphrase": [0, 1, 0, 1, 0]})
    run = write_run(tmp_path / "run", specs, shard="1/2")
    rows = load_run(run)
    assert rows.expected_source.endswith("shard 1/2")
    want = sorted(f"{b}:{v}" for b, v, *_ in specs if shard_of(f"{b}:{v}", 2) == 1)
    assert 0 < len(want) < len(specs)
    assert sorted(r.row_id for r in rows.rows) == want
    assert all(r.status == "ok" for r in rows.rows)  # nothing outside the shard is missing


def test_run_with_mixed_provenance_is_refused(tmp_path: Path) -> None:
    import json

    from guardrepro.errors import ProvenanceError

    run = write_run(tmp_path / "run", grid(BASES, SCORES))
    path = run / "records.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    foreign = json.loads(lines[2])
    foreign["provenance_sha256"] = "9" * 64  # a record appended from another configuration
    lines[2] = json.dumps(foreign) + "\n"
    path.write_text("".join(lines), encoding="utf-8")
    with pytest.raises(ProvenanceError, match="row 2"):
        load_run(run)
