"""``merge`` (and ``run --workers``'s merge) reads its sources a line at a time
(``run/merge_index.py``): the merged file is still ``record_line`` of every
source record in cohort order, errors keep their precedence, and a source that
changes during the merge is refused. Memory at scale: docs/SCALE.md."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_merge import cohort, shard_runs  # noqa: F401 (a fixture)

import guardrepro.run.merge_index as merge_index
from guardrepro.errors import InputError, IntegrityError, ProvenanceError
from guardrepro.run.merge import merge_runs
from guardrepro.rundir.cohort import read_cohort
from guardrepro.rundir.records import read_records, record_line


def _expected(runs: list[Path], cohort_file: Path) -> bytes:
    """The merged file by the old rule: every record parsed, serialised, cohort order."""
    by_id = {r.row_id: r for run in runs for r in read_records(run)}
    return "".join(record_line(by_id[row.row_id]) for row in read_cohort(cohort_file)
                   if row.row_id in by_id).encode("utf-8")


def test_merged_bytes_are_the_records_serialised_even_from_a_foreign_spelling(
        tmp_path: Path, cohort: Path) -> None:  # noqa: F811
    runs = shard_runs(tmp_path, cohort)
    records = runs[1] / "records.jsonl"
    lines = records.read_bytes().splitlines()
    # the same record, spelled otherwise: compact separators, other key order
    lines[0] = json.dumps(json.loads(lines[0]), separators=(",", ":")).encode()
    records.write_bytes(b"\n".join(lines) + b"\n")
    expected = _expected(runs, cohort)
    assert lines[0] + b"\n" not in expected  # the line is not copied as it is
    merge_runs(runs, tmp_path / "merged")
    assert (tmp_path / "merged" / "records.jsonl").read_bytes() == expected
    merge_runs(runs, tmp_path / "partial", allow_partial=True)
    assert (tmp_path / "partial" / "records.jsonl").read_bytes() == expected


def test_a_source_changed_during_the_merge_is_refused_and_nothing_is_written(
        tmp_path: Path, cohort: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    runs = shard_runs(tmp_path, cohort)
    real = merge_index.RecordIndex.line
    edited: list[Path] = []

    def editing(self: merge_index.RecordIndex, row_id: str, parsers: object) -> bytes:
        if not edited:
            data = bytearray(self.path.read_bytes())
            data[-3] = ord("X") if data[-3] != ord("X") else ord("Y")
            with open(self.path, "r+b") as fh:  # in place: the same inode
                fh.write(bytes(data))
            edited.append(self.path)
        return real(self, row_id, parsers)  # type: ignore[arg-type]

    monkeypatch.setattr(merge_index.RecordIndex, "line", editing)
    with pytest.raises(IntegrityError, match="changed while it was being merged"):
        merge_runs(runs, tmp_path / "merged")
    assert edited and not (tmp_path / "merged").exists()
    assert not [p for p in tmp_path.iterdir() if ".merge-" in p.name]


def test_a_line_that_does_not_parse_is_named_before_a_foreign_provenance(
        tmp_path: Path, cohort: Path) -> None:  # noqa: F811
    runs = shard_runs(tmp_path, cohort, n=2)
    records = runs[0] / "records.jsonl"
    lines = records.read_bytes().splitlines()
    first = json.loads(lines[0])
    first["provenance_sha256"] = "f" * 64  # line 1: another run's provenance
    lines[0] = json.dumps(first, sort_keys=True).encode()
    lines[-1] = b"{not json"  # the last line: no record at all
    records.write_bytes(b"\n".join(lines) + b"\n")
    with pytest.raises(InputError, match=f"line {len(lines)}") as caught:
        merge_runs(runs, tmp_path / "merged")
    assert not isinstance(caught.value, ProvenanceError)
    lines[-1] = lines[1]  # now a duplicate of line 2: named with its first line
    records.write_bytes(b"\n".join(lines) + b"\n")
    with pytest.raises(InputError, match="first at line 2"):
        merge_runs(runs, tmp_path / "merged")
    lines.pop()
    records.write_bytes(b"\n".join(lines) + b"\n")
    with pytest.raises(ProvenanceError, match="line 1 "):
        merge_runs(runs, tmp_path / "merged")
    records.write_bytes(b"\n".join(lines) + b"\n{\"torn")
    with pytest.raises(InputError, match="final line is incomplete") as torn:
        merge_runs(runs, tmp_path / "merged")
    assert torn.value.line == len(lines) + 1

