"""Reading a run directory for the checks (what they write back: ``rundir.outputs``).

Input: ``runs/<id>/records.jsonl`` (one ``guardrepro.schema.Record`` per
line), ``manifest.json``, and optionally the cohort file the run was made
from.

Output: ``RowResult`` values, one per *expected* row. The expected rows come
from the cohort when one is known (``--cohort``, or a cohort path named in the
manifest that exists on disk); otherwise from the grid of every
base_sample_id seen in the records times every variant seen in the records
(the published cohort gives every base all its variants, so the grid is the
cohort minus bases with no record at all). ``expected_source`` says which.

A sharded run (``manifest.shard`` = "k/n") expects only its shard's cohort
rows (``rundir.shard.select_shard``).

Invariants: every record carries the manifest's provenance hash (a run
directory holding mixed provenance is refused); a row_id appears at most once
in the records; a record whose row_id is not an expected row is an error; an
expected row with no record is ``status="missing"`` (score None, so it fails
closed downstream). Nothing is silently dropped.

``load_run_data`` is the one reader of a run for a verb: it reads
``records.jsonl``, ``manifest.json`` and the cohort file once each (every file
read once, its sha256 taken of the bytes read), and returns a ``RunData``
(manifest, records, their hash, the cohort's rows and hash, the expected rows)
that every check, report and the pandas API take instead of reading again.
``read_records_file`` reads any records file (a reference run's too) the same
way; both re-check each record against its guard's parser
(``guards.registry.record_parser``).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from guardrepro.artifacts.store import read_hashed
from guardrepro.errors import InputError
from guardrepro.guards.registry import record_parser
from guardrepro.rundir.cohort import CohortFile, read_cohort, run_cohort
from guardrepro.rundir.manifest import RunManifest, check_one_provenance, load_manifest_hashed
from guardrepro.rundir.records import parse_records, records_path
from guardrepro.rundir.shard import parse_shard, select_shard
from guardrepro.schema import CohortRow, Record

MISSING = "missing"
ORIGINAL = "original"


@dataclass(frozen=True)
class RowResult:
    """One expected row and what the run produced for it."""

    row_id: str
    base_sample_id: str
    variant: str
    domain: str
    gold_label: float
    status: str  # ok / parse_error / inference_error / missing
    score: float | None
    decision_margin: float | None = None
    p_unsafe: float | None = None  # the record's P(unsafe), when it has one

    @property
    def valid(self) -> bool:
        return self.status == "ok"

    @property
    def present(self) -> bool:
        return self.status != MISSING


def variant_order(variants: Sequence[str]) -> list[str]:
    """Distinct variants in first-seen (cohort) order, ``original`` first."""
    seen = list(dict.fromkeys(variants))
    return ([ORIGINAL] if ORIGINAL in seen else []) + [v for v in seen if v != ORIGINAL]


@dataclass(frozen=True)
class RecordsFile:
    """A records file read once: where, its records in file order, and the
    sha256 of the bytes parsed."""

    path: Path
    records: tuple[Record, ...]
    sha256: str


def read_records_file(run: str | Path) -> RecordsFile:
    """The records of a run directory or records file (``rundir.records.records_path``),
    read once, strictly (duplicate row ids, torn lines, a score contradicting its
    output: errors naming the file and line), hashed from the same bytes."""
    path = records_path(run)
    data, digest = read_hashed(path)
    records = parse_records(data, file=str(path), parsers=record_parser)
    return RecordsFile(path, tuple(records), digest)


@dataclass(frozen=True)
class RunRows:
    rows: list[RowResult]
    expected_source: str  # "cohort:<path>" or "grid"
    records: int


def _from_record(rec: Record | RowResult) -> RowResult:
    if isinstance(rec, RowResult):
        return rec
    return RowResult(
        row_id=rec.row_id,
        base_sample_id=rec.base_sample_id,
        variant=rec.variant,
        domain=rec.domain,
        gold_label=float(rec.gold_label),
        status=rec.status,
        score=rec.score,
        decision_margin=rec.decision_margin,
        p_unsafe=rec.p_unsafe,
    )


def rows_from_records(
    records: Iterable[Record] | Iterable[RowResult], cohort_path: str | Path | None = None,
    shard: str | None = None, records_file: str | Path | None = None,
    cohort_rows: Sequence[CohortRow] | None = None,
) -> RunRows:
    """Expected rows joined with records (see the module docstring). With a
    ``shard`` ("k/n", from a sharded run's manifest) only the cohort rows of
    that shard are expected. ``records_file`` (where ``records`` were read,
    in order) is named with the row index in consistency errors.
    ``cohort_rows``: the rows of ``cohort_path`` when the caller has read it."""
    recs = [_from_record(r) for r in records]
    by_id = {r.row_id: r for r in recs}
    ctx = _Where(records_file, {id(r): i for i, r in enumerate(recs)})
    if cohort_path is not None:
        cohort = list(cohort_rows) if cohort_rows is not None else read_cohort(cohort_path)
        ctx.cohort = (str(cohort_path), {c.row_id: i for i, c in enumerate(cohort)})
        if shard is not None:
            k, n = parse_shard(shard)
            cohort = select_shard(cohort, k, n)
        expected = {c.row_id: c for c in cohort}
        extra = sorted(set(by_id) - set(expected))
        if extra:
            raise InputError(
                f"{len(extra)} record(s) are not rows of the cohort, e.g. {extra[0]!r}",
                file=str(cohort_path),
                field="row_id",
            )
        out = []
        for c in cohort:
            rec = by_id.get(c.row_id)
            if rec is not None:
                ctx.check(rec, c.base_sample_id, c.variant, c.domain, c.gold_label)
                out.append(_from_record(rec))
            else:
                out.append(
                    RowResult(c.row_id, c.base_sample_id, c.variant, c.domain,
                              c.gold_label, MISSING, None)
                )
        where = f"cohort:{cohort_path}" + (f" shard {shard}" if shard is not None else "")
        return RunRows(out, where, len(recs))
    if not recs:
        raise InputError("run has no records and no cohort to say which rows were expected")
    variants = sorted({r.variant for r in recs})
    bases: dict[str, RowResult] = {}
    for r in recs:
        bases.setdefault(r.base_sample_id, r)
    seen = {(r.base_sample_id, r.variant): r for r in recs}
    out = []
    for base, first in bases.items():
        for v in variants:
            rec = seen.get((base, v))
            if rec is not None:
                ctx.check(rec, base, v, first.domain, first.gold_label, first)
                out.append(_from_record(rec))
            else:
                out.append(
                    RowResult(f"{base}:{v}:missing", base, v, first.domain,
                              float(first.gold_label), MISSING, None)
                )
    return RunRows(out, "grid", len(recs))


@dataclass
class _Where:
    """Where a record and its expected row came from, for consistency errors."""

    records_file: str | Path | None
    record_rows: dict[int, int]
    cohort: tuple[str, dict[str, int]] | None = None

    def check(
        self, rec: Record | RowResult, base: str, variant: str, domain: str,
        gold_label: float, first: Record | RowResult | None = None,
    ) -> None:
        for name, got, want in (
            ("base_sample_id", rec.base_sample_id, base),
            ("variant", rec.variant, variant),
            ("domain", rec.domain, domain),
            ("gold_label", float(rec.gold_label), float(gold_label)),
        ):
            if got == want:
                continue
            if self.cohort is not None:
                cohort_file, rows = self.cohort
                source = f"the cohort ({cohort_file}, line {_line(rows.get(rec.row_id))})"
            elif first is not None:
                source = (f"the first record of base {base!r} (line "
                          f"{_line(self.record_rows.get(id(first)))})")
            else:
                source = "the expected row"
            index = self.record_rows.get(id(rec))
            raise InputError(
                f"record {rec.row_id!r} has {name} {got!r}, but {source} has {want!r}",
                file=None if self.records_file is None else str(self.records_file),
                row=index, line=None if index is None else index + 1,
                field=name,
            )


def _line(index: int | None) -> str:
    """A 0-based row index as the 1-based line of its JSON-lines file."""
    return "?" if index is None else str(index + 1)



class ExpectedRows:
    """``rows`` and ``expected_source`` of a run read with its expected rows."""

    expected: RunRows

    @property
    def rows(self) -> list[RowResult]:
        return self.expected.rows

    @property
    def expected_source(self) -> str:
        return self.expected.expected_source


@dataclass(frozen=True)
class RunData(ExpectedRows):
    """A run directory read once for a verb: every check, report and the pandas
    API take this value instead of reading the run's files again.

    ``records`` is the records file in file order (``records_file``, hashed
    ``records_sha256``); ``cohort`` the cohort file the expected rows come from
    (None: the grid of the records); ``expected`` the expected rows joined with
    the records (``RunRows``; ``rows`` and ``expected_source`` are its fields);
    ``manifest_sha256`` the sha256 of the manifest's bytes."""

    run_dir: Path
    manifest: RunManifest
    records_file: Path
    records: tuple[Record, ...]
    records_sha256: str
    cohort: CohortFile | None
    expected: RunRows
    manifest_sha256: str

    @property
    def cohort_path(self) -> Path | None:
        return None if self.cohort is None else self.cohort.path

    @functools.cached_property
    def by_id(self) -> dict[str, Record]:
        """The records keyed by row id."""
        return {r.row_id: r for r in self.records}

    @property
    def variants(self) -> list[str]:
        """The expected rows' variants in cohort order, ``original`` first."""
        return variant_order([r.variant for r in self.rows])


def load_run_data(run_dir: str | Path, cohort_path: str | Path | None = None) -> RunData:
    """Read a run directory once (see the module docstring); the cohort comes
    from ``cohort_path`` or the manifest when it names one that exists, else the
    expected rows are the grid of the records."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise InputError("run directory not found", file=str(run_dir))
    file = read_records_file(run_dir)
    records = list(file.records)
    manifest, manifest_sha256 = load_manifest_hashed(run_dir)
    if not records:
        raise InputError("the run holds 0 records: there is nothing to analyse (run"
                         " `guardrepro run` into it first)", file=str(file.path))
    check_one_provenance(records, manifest, file.path, refusing="analyse")
    cohort = run_cohort(run_dir, manifest, cohort_path)
    if cohort is None:
        rows = rows_from_records(records, None, records_file=file.path)
        expected = RunRows(
            rows.rows, f"grid (cohort {manifest.cohort.get('path')!r} not found on disk)",
            rows.records)
    else:
        given = cohort_path if cohort_path is not None else cohort.path
        expected = rows_from_records(records, given, manifest.shard, records_file=file.path,
                                     cohort_rows=cohort.rows)
    return RunData(run_dir, manifest, file.path, file.records, file.sha256, cohort, expected,
                   manifest_sha256)


def load_run(run_dir: str | Path, cohort_path: str | Path | None = None) -> RunRows:
    """Rows of a run directory (``load_run_data(...).expected``)."""
    return load_run_data(run_dir, cohort_path).expected
