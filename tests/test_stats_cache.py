"""The stats.json cache: reused only when its key (schema fingerprint, record,
manifest and cohort hashes, settings) matches; never trusted on mtime alone."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from recordsets import grid, write_run

from guardrepro.checks.report import markdown as report
from guardrepro.checks.report.markdown import load_or_compute_stats
from guardrepro.checks.stats import cache as stats_cache
from guardrepro.rundir.read import load_run_data

BASES = [("b1", "banking", 0), ("b2", "banking", 1), ("b3", "slack", 0), ("b4", "slack", 1)]
# original accuracy: b1 0=0 right, b2 1=1 right, b3 0=0 right, b4 0 vs 1 wrong -> 3/4
FIRST: dict[str, list[Any]] = {"original": [0, 1, 0, 0], "marker_paraphrase": [1, 1, 0, 0]}
# the same rows, b4 now right -> 4/4; the records file keeps its length per line
SECOND: dict[str, list[Any]] = {"original": [0, 1, 0, 1], "marker_paraphrase": [1, 1, 0, 0]}


@pytest.fixture
def computed(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the statistics computations behind ``load_or_compute_stats`` (the
    real computation runs; only its calls are counted)."""
    calls: list[int] = []
    real = report.compute_stats

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs["replicates"])
        return real(*args, **kwargs)

    monkeypatch.setattr(report, "compute_stats", counting)
    return calls


def accuracy(run: Path) -> tuple[int, int]:
    acc = json.loads((run / "stats.json").read_text())["variants"]["original"]["metrics"][
        "accuracy"]
    return acc["numerator"], acc["denominator"]


def test_fresh_cache_is_reused(tmp_path: Path, computed: list[int]) -> None:
    run = write_run(tmp_path / "run", grid(BASES, FIRST))
    first = load_or_compute_stats(run, replicates=40)
    again = load_or_compute_stats(run, replicates=40)
    unasked = load_or_compute_stats(run)  # no settings asked: whatever is current
    assert computed == [40] and again == first == unasked
    assert accuracy(run) == (3, 4)
    assert first.to_json() == (run / "stats.json").read_text(encoding="utf-8")  # its text
    key = first.extra["cache_key"]
    assert (key["replicates"], key["seed"], key["schema"]) == (40, 260828, "guardrepro.stats/2")


def test_records_rewritten_with_the_old_mtime_are_recomputed(tmp_path: Path,
                                                              computed: list[int]) -> None:
    run = write_run(tmp_path / "a" / "run", grid(BASES, FIRST))
    other = write_run(tmp_path / "b" / "run", grid(BASES, SECOND))
    load_or_compute_stats(run, replicates=40)
    records = run / "records.jsonl"
    before = records.stat()
    shutil.copyfile(other / "records.jsonl", records)
    os.utime(records, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert records.stat().st_mtime_ns == before.st_mtime_ns
    assert records.stat().st_mtime_ns <= (run / "stats.json").stat().st_mtime_ns
    result = load_or_compute_stats(run, replicates=40)
    assert computed == [40, 40]
    assert (result.variants["original"].accuracy.count, accuracy(run)) == (4, (4, 4))


def test_other_settings_are_recomputed(tmp_path: Path, computed: list[int]) -> None:
    run = write_run(tmp_path / "run", grid(BASES, FIRST))
    load_or_compute_stats(run, replicates=40)
    result = load_or_compute_stats(run, replicates=60)
    assert result.settings.replicates == 60 and computed == [40, 60]
    load_or_compute_stats(run, replicates=60, seed=7)
    assert computed == [40, 60, 60]
    assert json.loads((run / "stats.json").read_text())["settings"]["intervals"]["seed"] == 7


def test_the_cohort_bytes_are_part_of_the_key(tmp_path: Path, computed: list[int]) -> None:
    run = write_run(tmp_path / "run", grid(BASES, FIRST))
    cohort = tmp_path / "copy.jsonl"
    shutil.copyfile(tmp_path / "run-cohort.jsonl", cohort)
    load_or_compute_stats(run, replicates=40, cohort=cohort)
    load_or_compute_stats(run, replicates=40, cohort=cohort)
    assert computed == [40]
    key = stats_cache.cache_key(load_run_data(run, cohort), replicates=40, seed=None,
                                confidence=None)
    def sha(path: Path) -> str:
        return hashlib.sha256(path.read_bytes()).hexdigest()

    assert key["cohort_sha256"] == sha(cohort)
    assert key["records_sha256"] == sha(run / "records.jsonl")
    assert key["manifest_sha256"] == sha(run / "manifest.json")
    (tmp_path / "run-cohort.jsonl").unlink()  # no cohort on disk: the records' grid, no hash
    assert stats_cache.cache_key(load_run_data(run), replicates=40, seed=None,
                                 confidence=None)["cohort_sha256"] is None
    load_or_compute_stats(run, replicates=40)
    assert computed == [40, 40]

@pytest.mark.parametrize("stale", ["no key (an older stats.json)", "other fingerprint"])
def test_an_old_schema_is_recomputed(tmp_path: Path, computed: list[int], stale: str) -> None:
    run = write_run(tmp_path / "run", grid(BASES, FIRST))
    load_or_compute_stats(run, replicates=40)
    path = run / "stats.json"
    data = json.loads(path.read_text())
    if stale.startswith("no key"):
        del data["cache_key"]
    else:
        data["cache_key"]["fingerprint"] = "0" * 16
    del data["edits"]["marker_paraphrase"]["all_pairs"]["flip_rate"]  # what a KeyError needs
    path.write_text(json.dumps(data), encoding="utf-8")
    result = load_or_compute_stats(run, replicates=40)
    assert computed == [40, 40]
    assert result.edits["marker_paraphrase"].views["all_pairs"].flip_rate.count == 1


def test_adding_a_statistic_or_a_field_changes_the_fingerprint(
        monkeypatch: pytest.MonkeyPatch) -> None:
    before = stats_cache.fingerprint()
    monkeypatch.setattr(stats_cache, "STATISTICS", (*stats_cache.STATISTICS, "delta_f1"))
    assert stats_cache.fingerprint() != before
    monkeypatch.undo()
    assert stats_cache.fingerprint() == before

    @dataclasses.dataclass(frozen=True)
    class Small:
        a: int

    @dataclasses.dataclass(frozen=True)
    class Small2:
        a: int
        b: float

    Small2.__qualname__ = Small.__qualname__
    assert stats_cache._describe(Small, set()) != stats_cache._describe(Small2, set())
