"""``stats`` reads a run a line at a time (rundir.stream): the same rows, hashes,
refusals and stats.json as the whole-run reader (rundir.read.load_run_data), in a
fraction of the memory.

The whole-run reader is the independent implementation: every case is read by
both and compared field by field, or error by error."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from recordsets import grid, write_cohort, write_run

from guardrepro.cli import main as cli_main
from guardrepro.errors import GuardreproError
from guardrepro.run.pipeline import run_cohort
from guardrepro.rundir.read import load_run_data
from guardrepro.rundir.stream import stream_run_rows

ROOT = Path(__file__).resolve().parents[1]
RULE = ROOT / "runners" / "rule-nuisance.toml"
BASES = [(f"b{i:02d}", ("banking", "slack", "travel")[i % 3], (0.0, 0.5, 1.0)[i % 3])
         for i in range(12)]


def _specs() -> list[Any]:
    scores = {"original": [0, 1, None, 0.5, 0, 1, 0, 0, 1, None, 0, 1],
              "marker": [1, 1, 0, None, 0, 1, 0, 1, 1, 0, 0, 0],
              "alias": [0, 0, 0, 1, None, 1, 0, 0, 1, 1, 0.5, 0]}
    return grid(BASES, scores)


def _same(run: Path, cohort: Path | None = None) -> None:
    whole = load_run_data(run, cohort)
    lean = stream_run_rows(run, cohort)
    assert lean.rows == whole.rows
    assert lean.expected_source == whole.expected_source
    assert lean.expected.records == whole.expected.records
    assert (lean.records_sha256, lean.manifest_sha256) == (whole.records_sha256,
                                                           whole.manifest_sha256)
    assert (lean.cohort is None) == (whole.cohort is None)
    if lean.cohort is not None and whole.cohort is not None:
        assert (lean.cohort.path, lean.cohort.sha256) == (whole.cohort.path, whole.cohort.sha256)


@pytest.mark.parametrize("case", ["manifest-cohort", "given-cohort", "grid", "shard", "split",
                                  "scored"])
def test_the_streamed_rows_are_the_whole_readers(tmp_path: Path, case: str) -> None:
    specs = _specs()
    if case == "grid":
        run = write_run(tmp_path / "run", specs, with_cohort=False)
    elif case == "shard":
        run = write_run(tmp_path / "run", specs, shard="2/3")
    elif case == "split":
        run = write_run(tmp_path / "run", [s for s in specs if s[1] == "original"], split=True)
    else:
        run = write_run(tmp_path / "run", specs)
    if case == "scored":  # records carrying p_unsafe: the rows carry it too
        lines = (run / "records.jsonl").read_text(encoding="utf-8").splitlines()
        for i in range(0, len(lines), 2):
            _edit_line(run / "records.jsonl", i, p_unsafe=round(i / len(lines), 3))
        assert [r.p_unsafe for r in stream_run_rows(run).rows][:3] == [0.0, None,
                                                                       round(2 / len(lines), 3)]
    cohort = tmp_path / "run-cohort.jsonl" if case == "given-cohort" else None
    _same(run, cohort)


def _error(call: Any) -> str:
    with pytest.raises(GuardreproError) as info:
        call()
    return f"{type(info.value).__name__}: {info.value}"


def _edit_line(path: Path, index: int, **changes: Any) -> None:
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    data = json.loads(lines[index])
    data.update(changes)
    lines[index] = json.dumps(data) + "\n"
    path.write_text("".join(lines), encoding="utf-8")


def _damage(run: Path, tmp_path: Path, case: str) -> Path | None:
    records = run / "records.jsonl"
    cohort = tmp_path / "run-cohort.jsonl"
    if case == "torn":
        records.write_bytes(records.read_bytes()[:-9])
    elif case == "duplicate":
        lines = records.read_bytes().splitlines(keepends=True)
        records.write_bytes(b"".join([*lines, lines[3]]))
    elif case == "foreign-provenance":
        _edit_line(records, 5, provenance_sha256="9" * 64)
    elif case == "no-records":
        records.write_bytes(b"")
    elif case == "no-manifest":
        (run / "manifest.json").unlink()
    elif case == "bad-record":
        _edit_line(records, 2, gold_label=7)
    elif case == "domain-differs":
        _edit_line(records, 4, domain="elsewhere")
    elif case == "not-in-cohort":
        _edit_line(records, 6, row_id="zz:original")
    elif case == "cohort-changed":
        lines = cohort.read_bytes().splitlines(keepends=True)
        cohort.write_bytes(b"".join(lines[:-1]))  # still a valid cohort, not the run's
    elif case == "given-other-cohort":
        other = tmp_path / "other.jsonl"
        write_cohort(other, _specs()[:-1])
        return other
    elif case == "duplicate-cohort-row":
        lines = cohort.read_bytes().splitlines(keepends=True)
        cohort.write_bytes(b"".join([*lines, lines[0]]))
        return cohort
    return None


@pytest.mark.parametrize("case", [
    "torn", "duplicate", "foreign-provenance", "no-records", "no-manifest", "bad-record",
    "domain-differs", "not-in-cohort", "cohort-changed", "given-other-cohort",
    "duplicate-cohort-row"])
def test_a_bad_run_is_refused_with_the_whole_readers_error(tmp_path: Path, case: str) -> None:
    run = write_run(tmp_path / "run", _specs())
    cohort = _damage(run, tmp_path, case)
    whole = _error(lambda: load_run_data(run, cohort))
    assert _error(lambda: stream_run_rows(run, cohort)) == whole


@pytest.fixture(scope="module")
def rule_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("stream")
    bases = [(f"s{i:04d}", ("banking", "slack")[i % 2], (0.0, 0.5, 1.0)[i % 3])
             for i in range(3000)]
    cohort = write_cohort(base / "cohort.jsonl", grid(bases, {"original": [0] * 3000}),
                          split=True)
    run_cohort(RULE, cohort, base / "run", progress=False)
    return base / "run"


def test_stats_json_holds_the_whole_readers_figures_and_cache_key(
        rule_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from guardrepro.checks.stats.cache import keyed
    from guardrepro.checks.stats.compute import compute_stats

    assert cli_main(["stats", str(rule_run), "--no-progress"]) == 0
    written = json.loads((rule_run / "stats.json").read_text())
    whole = load_run_data(rule_run)
    expected = keyed(compute_stats(whole.rows, expected_source=whole.expected_source), whole)
    assert written["cache_key"] == expected.to_dict()["cache_key"]
    for key in ("rows", "variants", "edits", "extras", "settings", "schema"):
        assert written[key] == expected.to_dict()[key]


def test_stats_holds_rows_not_records(rule_run: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    """Peak traced memory over 3,000 rule rows: the whole reader keeps every
    record and cohort row; ``stats`` (the streamed read, then the statistics)
    a small row each."""
    def peak(call: Any) -> int:
        tracemalloc.start()
        try:
            call()
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    whole = peak(lambda: load_run_data(rule_run))
    stats = peak(lambda: cli_main(["stats", str(rule_run), "--no-progress"]))
    assert stats * 3 < whole, (stats, whole)
    assert peak(lambda: stream_run_rows(rule_run)) < 3000 * 2048  # under 2 KB a row
