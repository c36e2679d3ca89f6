"""The one run reader, ``rundir.read.load_run_data`` (``gr.read_run``), on hand-made runs.

What it holds is checked against the files themselves, read here on their own
(JSON lines parsed with ``json``, hashes taken with ``hashlib``); the checks
that take it must give what they give for the run's path.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from recordsets import grid, write_run

import guardrepro as gr
from guardrepro.errors import InputError, IntegrityError
from guardrepro.rundir.read import RunData, load_run_data

BASES = [("b1", "banking", 0), ("b2", "banking", 1), ("b3", "slack", 0)]
SCORES = {"original": [0, 1, "parse"], "tool_alias": [1, 1, None]}


@pytest.fixture()
def run(tmp_path: Path) -> Path:
    return write_run(tmp_path / "run", grid(BASES, SCORES))


def test_run_data_holds_the_files(run: Path) -> None:
    data = gr.read_run(run)
    assert isinstance(data, RunData) and data.run_dir == run
    lines = (run / "records.jsonl").read_bytes().splitlines()
    assert [r.row_id for r in data.records] == [json.loads(x)["row_id"] for x in lines]
    assert len(data.records) == 5  # b3:tool_alias has no record
    assert data.records_sha256 == hashlib.sha256((run / "records.jsonl").read_bytes()).hexdigest()
    cohort = run.parent / "run-cohort.jsonl"
    assert data.cohort is not None and data.cohort_path == cohort
    assert data.cohort.sha256 == hashlib.sha256(cohort.read_bytes()).hexdigest()
    assert data.cohort.sha256 == data.manifest.cohort["sha256"]
    assert [c.row_id for c in data.cohort.rows] == [
        json.loads(x)["sample"]["sample_id"] for x in cohort.read_text().splitlines()]
    # six expected rows in cohort order; the one without a record is missing
    assert [(r.row_id, r.status) for r in data.rows] == [
        ("b1:original", "ok"), ("b1:tool_alias", "ok"), ("b2:original", "ok"),
        ("b2:tool_alias", "ok"), ("b3:original", "parse_error"), ("b3:tool_alias", "missing")]
    assert data.expected_source == f"cohort:{cohort}"
    assert data.by_id["b2:original"].score == 1.0
    assert data.variants == ["original", "tool_alias"]


def test_without_the_cohort_the_rows_are_the_grid(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", grid(BASES, SCORES), with_cohort=False)
    data = load_run_data(run)
    assert data.cohort is None and data.cohort_path is None
    assert data.expected_source.startswith("grid (cohort ")
    assert len(data.rows) == 6 and sum(not r.present for r in data.rows) == 1


def test_a_cohort_file_changed_on_disk_or_given_wrong_is_refused(run: Path,
                                                                 tmp_path: Path) -> None:
    other = write_run(tmp_path / "other", grid(BASES[:2], SCORES))
    with pytest.raises(InputError, match="refusing to analyse a run against another cohort"):
        load_run_data(run, tmp_path / "other-cohort.jsonl")
    cohort = run.parent / "run-cohort.jsonl"
    cohort.write_bytes((other.parent / "other-cohort.jsonl").read_bytes())
    with pytest.raises(IntegrityError, match="the run's manifest pins"):
        load_run_data(run)


def test_the_api_takes_run_data_as_it_takes_a_path(run: Path, tmp_path: Path) -> None:
    data = gr.read_run(run)
    by_path, by_data = gr.load_run(run), gr.load_run(data)
    assert by_data.equals(by_path) and by_data.attrs == by_path.attrs
    ref = write_run(tmp_path / "ref", grid(BASES, {"original": [0, 1, 1]}))
    spec = tmp_path / "gate.toml"
    spec.write_text(
        f'name = "rundata-gate"\nrows = "originals"\n[reference]\ntype = "records"\n'
        f'path = "{(ref / "records.jsonl").as_posix()}"\n[thresholds]\nexpected_rows = 3\n'
        "min_coverage = 0.5\nmin_strict_agreement = 0.5\nmin_strict_agreement_gold_safe = 0.5\n"
        "min_strict_agreement_gold_unsafe = 0.5\n", encoding="utf-8")
    assert gr.gate(data, spec).to_json() == gr.gate(run, spec).to_json()
    assert gr.gate(data, spec).to_frame()["strict_agree"].tolist() == [True, True, False]
    other = write_run(tmp_path / "other", grid(BASES, {**SCORES, "original": [1, 1, 0]}))
    compared = gr.compare(data, gr.read_run(other))
    assert compared.equals(gr.compare(run, other))
    assert compared.attrs == gr.compare(run, other).attrs
    assert len(compared) == 5  # the rows both runs hold (b3:tool_alias: neither)
    stats = gr.stats(data, replicates=50, seed=3)
    assert stats.to_json() == gr.stats(run, replicates=50, seed=3).to_json()  # stats.json
    assert stats.rows.expected == 6
