"""A rule baseline's run directory: typed records that carry the cohort's gold score."""

from __future__ import annotations

from pathlib import Path

from recordsets import grid, write_cohort

from guardrepro.experiments.rule_runs import run_rule
from guardrepro.run.records import read_manifest, read_records, record_line
from guardrepro.schema import read_cohort


def test_rule_records_carry_the_gold_score_and_read_back(tmp_path: Path) -> None:
    # gold 0.5 has strict label 1: the record must say 0.5, the cohort's gold score
    bases = [("b0", "banking", 0.0), ("b1", "banking", 0.5), ("b2", "slack", 1.0)]
    cohort = write_cohort(tmp_path / "cohort.jsonl", grid(bases, {"original": [0, 0, 0]}))
    assert run_rule("nuisance", cohort, tmp_path / "run") == 3
    records = read_records(tmp_path / "run")
    assert [r.gold_label for r in records] == [0.0, 0.5, 1.0]
    assert [r.gold_label for r in records] == [row.gold_label for row in read_cohort(cohort)]
    assert [row.gold_strict for row in read_cohort(cohort)] == [0, 1, 1]
    manifest = read_manifest(tmp_path / "run")
    assert manifest is not None and manifest.provenance.guard == "rule-nuisance"
    for rec in records:
        assert rec.provenance == manifest.provenance
        assert rec.provenance.sha256 == rec.provenance_sha256 == manifest.provenance_sha256
        assert rec.attempts == () and rec.timings.prefill_s == rec.timings.decode_s == 0.0
        assert rec.timings.total_s >= 0.0
    lines = (tmp_path / "run" / "records.jsonl").read_text(encoding="utf-8").splitlines(True)
    assert [record_line(r) for r in records] == lines
    assert run_rule("nuisance", cohort, tmp_path / "run") == 0  # resumed: nothing left
