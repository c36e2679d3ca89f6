"""A rule baseline's run directory: typed records that carry the cohort's gold score."""

from __future__ import annotations

from pathlib import Path

from recordsets import grid, write_cohort

from guardrepro.run.pipeline import run_cohort
from guardrepro.rundir.cohort import read_cohort
from guardrepro.rundir.manifest import read_manifest
from guardrepro.rundir.records import read_records, record_line

PROFILE = Path(__file__).resolve().parents[1] / "runners" / "rule-nuisance.toml"


def test_rule_records_carry_the_gold_score_and_read_back(tmp_path: Path) -> None:
    # gold 0.5 has strict label 1: the record must say 0.5, the cohort's gold score
    bases = [("b0", "banking", 0.0), ("b1", "banking", 0.5), ("b2", "slack", 1.0)]
    cohort = write_cohort(tmp_path / "cohort.jsonl", grid(bases, {"original": [0, 0, 0]}))
    summary = run_cohort(PROFILE, cohort, tmp_path / "run", progress=False)
    assert (summary.generated, summary.remaining) == (3, 0)
    records = read_records(tmp_path / "run")
    assert [r.gold_label for r in records] == [0.0, 0.5, 1.0]
    assert [r.gold_label for r in records] == [row.gold_label for row in read_cohort(cohort)]
    assert [row.gold_strict for row in read_cohort(cohort)] == [0, 1, 1]
    manifest = read_manifest(tmp_path / "run")
    assert manifest is not None and manifest.provenance.guard == "rule-nuisance"
    for rec in records:
        assert rec.provenance == manifest.provenance
        assert rec.provenance.sha256 == rec.provenance_sha256 == manifest.provenance_sha256
        assert len(rec.attempts) == 1 and rec.attempts[0].score == rec.score
        assert rec.timings.prefill_s == 0.0 and rec.timings.total_s >= 0.0
    lines = (tmp_path / "run" / "records.jsonl").read_text(encoding="utf-8").splitlines(True)
    assert [record_line(r) for r in records] == lines
    again = run_cohort(PROFILE, cohort, tmp_path / "run", progress=False)
    assert (again.already_done, again.generated) == (3, 0)  # resumed: nothing left
