"""A run directory read for its rows only, a line at a time: ``stats`` at any size.

Input: a run directory (``records.jsonl``, ``manifest.json``) and the cohort
file, given or the one the manifest names (``rundir.cohort`` looks it up the same way).
Output: ``RunRowsRead``: the manifest, the sha256 of each file, and the
expected rows joined with the records (``rundir.read.RunRows``), what ``stats``
needs and nothing else.

Why: ``rundir.read.load_run_data`` keeps every ``Record`` (provenance, attempts,
output text) and every cohort row (its whole sample) for the checks that need
them (gate, report, compare); ``stats`` needs eight fields a row. On 100,000
rule rows that was 1.0 GB of RSS. Here each file is read line by line, hashed
as it is read, each record parsed and checked as ``read_records_file`` checks
it (``rundir.records.parse_record_line``, the guard's parser included) and kept
only as a ``RowResult``; each cohort row is parsed and checked as ``read_cohort``
checks it and kept as its expected ``RowResult`` only when no record answers
it. Memory grows with the rows (a ``RowResult`` each, with shared variant and
domain strings), not with their text.

Invariants: the same refusals, in the same order, with the same messages as
``load_run_data`` (a torn or invalid record line, a duplicate row id, a
record of another provenance, 0 records, a cohort that is not the run's, a
record that is not a cohort row or that disagrees with its cohort row), and
the same ``RunRows`` and hashes, so ``stats.json`` (its cache key included)
is byte-identical to one computed from ``load_run_data``. One difference: a
cohort file that changed since the run and is also malformed is named for its
bad line rather than its hash (each file is read once, parsed and hashed
together)
(``tests/test_stats_stream.py``).
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from guardrepro.errors import GuardreproError, InputError
from guardrepro.guards.registry import record_parser
from guardrepro.rundir.cohort import (
    check_found_cohort,
    check_given_cohort,
    manifest_cohort_candidates,
    parse_cohort_line,
)
from guardrepro.rundir.manifest import RunManifest, load_manifest_hashed, mixed_provenance
from guardrepro.rundir.read import MISSING, ExpectedRows, RowResult, RunRows, rows_from_records
from guardrepro.rundir.record_checks import duplicate_row, once_per_guard, torn_last_line
from guardrepro.rundir.records import parse_record_line, records_path
from guardrepro.rundir.shard import parse_shard, shard_of
from guardrepro.schema import CohortRow


@dataclass(frozen=True)
class CohortDigest:
    """The cohort file the expected rows came from, and the sha256 of its bytes."""

    path: Path
    sha256: str


@dataclass(frozen=True)
class RunRowsRead(ExpectedRows):
    """A run directory read for its rows (module docstring); the fields ``stats``
    and its cache key read from ``rundir.read.RunData``, without the records."""

    run_dir: Path
    manifest: RunManifest
    manifest_sha256: str
    records_file: Path
    records_sha256: str
    cohort: CohortDigest | None
    expected: RunRows


def _lines(path: Path, digest: hashlib._Hash | None) -> Iterator[bytes]:
    """The lines of ``path`` (each with its ``\\n``, the last maybe without),
    every byte fed to ``digest`` (when given) as it is read."""
    with open(path, "rb") as fh:
        for line in fh:
            if digest is not None:
                digest.update(line)
            yield line


class _Shared:
    """One string object per distinct variant, domain, status (they repeat on every row)."""

    def __init__(self) -> None:
        self._seen: dict[str, str] = {}

    def __call__(self, text: str) -> str:
        return self._seen.setdefault(text, text)


Foreign = tuple[int, str, str]  # 0-based line, row id, provenance sha256


def _records(path: Path, manifest: RunManifest | None, shared: _Shared
             ) -> tuple[list[RowResult], dict[str, int], str, Foreign | None]:
    """The records of ``path`` as rows in file order, their lines by row id, the
    file's sha256, and the first record whose provenance is not ``manifest``'s."""
    digest = hashlib.sha256()
    rows: list[RowResult] = []
    seen: dict[str, int] = {}
    foreign: Foreign | None = None
    file = str(path)
    parsers = once_per_guard(record_parser)
    for index, line in enumerate(_lines(path, digest)):
        if not line.endswith(b"\n"):
            raise torn_last_line(file=file, row=index)
        rec = parse_record_line(line[:-1], file=file, row=index, parsers=parsers)
        if rec.row_id in seen:
            raise duplicate_row(rec.row_id, seen[rec.row_id], file=file, row=index)
        seen[rec.row_id] = index
        if (foreign is None and manifest is not None
                and rec.provenance_sha256 != manifest.provenance_sha256):
            foreign = (index, rec.row_id, rec.provenance_sha256)
        rows.append(RowResult(rec.row_id, rec.base_sample_id, shared(rec.variant),
                              shared(rec.domain), float(rec.gold_label), shared(rec.status),
                              rec.score, rec.decision_margin, rec.p_unsafe))
    return rows, seen, digest.hexdigest(), foreign


def cohort_rows(path: Path, digest: hashlib._Hash | None = None
                ) -> Iterator[tuple[int, CohortRow]]:
    """Each cohort row with its 0-based line, checked as ``rundir.cohort.read_cohort``
    checks a line (duplicate ids are the caller's), a line at a time; every byte
    read is fed to ``digest`` when given."""
    file = str(path)
    index = -1
    for index, raw in enumerate(_lines(path, digest)):
        body = raw[:-1] if raw.endswith(b"\n") else raw
        yield index, parse_cohort_line(body, file=file, index=index)
    if index < 0:
        raise InputError("cohort file is empty", file=file)


@dataclass
class _Join:
    """The records (as rows, in file order) joined with the cohort's rows."""

    records: list[RowResult]
    by_id: dict[str, int]  # the line of each record
    records_file: Path
    shared: _Shared

    def expected(self, cohort: Path, digest: hashlib._Hash, shard: str | None
                 ) -> tuple[list[RowResult], InputError | None]:
        """The cohort's rows (of ``shard``), each its record's row or a missing one,
        and what is wrong with the join (raised once the cohort is known to be the
        run's, as ``read`` does); a malformed cohort line raises here."""
        k, n = parse_shard(shard) if shard is not None else (1, 1)
        matched = bytearray(len(self.records))
        first_mismatch: InputError | None = None
        out: list[RowResult] = []
        seen: dict[str, int] = {}  # keys: the records' own strings where there is one
        for index, row in cohort_rows(cohort, digest):
            at = self.by_id.get(row.row_id)
            key = row.row_id if at is None else self.records[at].row_id
            if key in seen:
                raise InputError(f"duplicate sample_id {key!r} (first at line {seen[key] + 1})",
                                 file=str(cohort), row=index, line=index + 1,
                                 field="sample.sample_id")
            seen[key] = index
            if shard is not None and shard_of(key, n) != k:
                continue
            if at is None:
                out.append(RowResult(key, row.base_sample_id, self.shared(row.variant),
                                     self.shared(row.domain), row.gold_label, MISSING, None))
                continue
            matched[at] = 1
            rec = self.records[at]
            if first_mismatch is None:
                first_mismatch = self._mismatch(rec, at, row, cohort, index)
            out.append(rec)
        extra = [r.row_id for r, m in zip(self.records, matched, strict=True) if not m]
        if extra:
            return out, InputError(f"{len(extra)} record(s) are not rows of the cohort, e.g."
                                   f" {min(extra)!r}", file=str(cohort), field="row_id")
        return out, first_mismatch

    def _mismatch(self, rec: RowResult, at: int, row: CohortRow, cohort: Path, index: int
                  ) -> InputError | None:
        """The error ``read`` raises when a record disagrees with its cohort row."""
        for name, got, want in (("base_sample_id", rec.base_sample_id, row.base_sample_id),
                                ("variant", rec.variant, row.variant),
                                ("domain", rec.domain, row.domain),
                                ("gold_label", rec.gold_label, float(row.gold_label))):
            if got != want:
                return InputError(f"record {rec.row_id!r} has {name} {got!r}, but the cohort "
                                  f"({cohort}, line {index + 1}) has {want!r}",
                                  file=str(self.records_file), row=at, line=at + 1, field=name)
        return None


def _read_cohort(join: _Join, path: Path, shard: str | None,
                 check: Callable[[str], None]) -> tuple[list[RowResult], str]:
    digest = hashlib.sha256()
    try:
        rows, problem = join.expected(path, digest, shard)
    except FileNotFoundError:
        raise InputError("cohort file not found", file=str(path)) from None
    check(digest.hexdigest())
    if problem is not None:
        raise problem
    return rows, digest.hexdigest()


def stream_run_rows(run_dir: str | Path, cohort_path: str | Path | None = None) -> RunRowsRead:
    """Read a run directory for its rows (module docstring); the cohort is
    ``cohort_path`` or the manifest's when it is on disk, else the records' grid."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise InputError("run directory not found", file=str(run_dir))
    path = records_path(run_dir)
    manifest_error: GuardreproError | None = None
    try:
        manifest, manifest_sha256 = load_manifest_hashed(run_dir)
    except GuardreproError as exc:  # records are named first, as load_run_data does
        manifest_error = exc
    shared = _Shared()
    records, by_id, records_sha256, foreign = _records(
        path, None if manifest_error else manifest, shared)
    if manifest_error is not None:
        raise manifest_error
    if not records:
        raise InputError("the run holds 0 records: there is nothing to analyse (run"
                         " `guardrepro run` into it first)", file=str(path))
    if foreign is not None:
        index, row_id, digest = foreign
        raise mixed_provenance(path, index, row_id, digest, manifest, refusing="analyse")
    join = _Join(records, by_id, path, shared)
    if cohort_path is not None:
        given = Path(cohort_path)
        same_run = functools.partial(check_given_cohort, manifest, given)
        expected, digest = _read_cohort(join, given, manifest.shard, same_run)
        return _with_cohort(run_dir, manifest, manifest_sha256, path, records_sha256, given,
                            digest, expected, len(records))
    for candidate in manifest_cohort_candidates(run_dir, manifest):
        if candidate.is_file():
            unchanged = functools.partial(check_found_cohort, manifest, candidate)
            # one read: parsed and hashed together (a changed file that is also
            # malformed is named for its bad line, the whole reader names the hash)
            expected, digest = _read_cohort(join, candidate, manifest.shard, unchanged)
            return _with_cohort(run_dir, manifest, manifest_sha256, path, records_sha256,
                                candidate, digest, expected, len(records))
    grid = rows_from_records(records, None, records_file=path)
    expected_rows = RunRows(grid.rows, f"grid (cohort {manifest.cohort.get('path')!r} not"
                            " found on disk)", grid.records)
    return RunRowsRead(run_dir, manifest, manifest_sha256, path, records_sha256, None,
                       expected_rows)


def _with_cohort(run_dir: Path, manifest: RunManifest, manifest_sha256: str, path: Path,
                 records_sha256: str, cohort: Path, digest: str, rows: list[RowResult],
                 records: int) -> RunRowsRead:
    where = f"cohort:{cohort}" + (f" shard {manifest.shard}" if manifest.shard is not None
                                  else "")
    return RunRowsRead(run_dir, manifest, manifest_sha256, path, records_sha256,
                       CohortDigest(cohort, digest), RunRows(rows, where, records))
