"""Reading a run directory for the checks, and writing their JSON atomically.

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
rows (``guardrepro.run.shard.select_shard``).

Invariants: every record carries the manifest's provenance hash (a run
directory holding mixed provenance is refused); a row_id appears at most once
in the records; a record whose row_id is not an expected row is an error; an
expected row with no record is ``status="missing"`` (score None, so it fails
closed downstream). Nothing is silently dropped.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from guardrepro.artifacts.store import atomic_write_bytes
from guardrepro.errors import InputError, IntegrityError
from guardrepro.run.records import (
    MANIFEST_FILE,
    RECORDS_FILE,
    RunManifest,
    check_one_provenance,
    read_manifest,
    read_records,
)
from guardrepro.run.shard import parse_shard, select_shard
from guardrepro.schema import Record, read_cohort

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


def write_json_atomic(path: str | Path, data: Any) -> Path:
    """Write pretty JSON atomically (``artifacts.store.atomic_write_bytes``); return the path."""
    path = Path(path)
    text = json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    atomic_write_bytes(path, text.encode("utf-8"))
    return path


def load_records(path: str | Path) -> list[Record]:
    """Records of a run directory (or a records.jsonl path), read strictly by
    ``guardrepro.run.records.read_records`` (duplicate row ids, torn lines: errors)."""
    path = Path(path)
    file = path / RECORDS_FILE if path.is_dir() else path
    if not file.is_file():
        raise InputError("records file not found", file=str(file))
    return read_records(file)


def load_manifest(run_dir: str | Path) -> RunManifest:
    manifest = read_manifest(run_dir)
    if manifest is None:
        raise InputError("manifest.json not found in run directory",
                         file=str(Path(run_dir) / MANIFEST_FILE))
    return manifest


def manifest_cohort_path(run_dir: str | Path, manifest: RunManifest) -> Path | None:
    """The cohort file the manifest names, looked up as given (absolute or
    relative to the working directory), then relative to the run directory and
    each of its parents; None when it is not on disk. A file found there whose
    sha256 differs from the manifest's is an ``IntegrityError``."""
    raw = manifest.cohort.get("path")
    if not isinstance(raw, str) or not raw:
        return None
    p = Path(raw)
    candidates = [p] if p.is_absolute() else [
        p, *(base / p for base in (Path(run_dir).resolve(), *Path(run_dir).resolve().parents))
    ]
    for cand in candidates:
        if cand.is_file():
            digest = hashlib.sha256(cand.read_bytes()).hexdigest()
            if digest != manifest.cohort.get("sha256"):
                raise IntegrityError(
                    f"cohort file {cand} has sha256 {digest[:12]}..., the run's manifest "
                    f"pins {str(manifest.cohort.get('sha256'))[:12]}...; pass --cohort "
                    "with the run's cohort"
                )
            return cand
    return None


@dataclass(frozen=True)
class RunRows:
    rows: list[RowResult]
    expected_source: str  # "cohort:<path>" or "grid"
    records: int


def _from_record(rec: Record) -> RowResult:
    return RowResult(
        row_id=rec.row_id,
        base_sample_id=rec.base_sample_id,
        variant=rec.variant,
        domain=rec.domain,
        gold_label=float(rec.gold_label),
        status=rec.status,
        score=rec.score,
        decision_margin=rec.decision_margin,
    )


def rows_from_records(
    records: Iterable[Record], cohort_path: str | Path | None = None,
    shard: str | None = None, records_file: str | Path | None = None,
) -> RunRows:
    """Expected rows joined with records (see the module docstring). With a
    ``shard`` ("k/n", from a sharded run's manifest) only the cohort rows of
    that shard are expected. ``records_file`` (where ``records`` were read,
    in order) is named with the row index in consistency errors."""
    recs = list(records)
    by_id = {r.row_id: r for r in recs}
    ctx = _Where(records_file, {id(r): i for i, r in enumerate(recs)})
    if cohort_path is not None:
        cohort = read_cohort(cohort_path)
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
    bases: dict[str, Record] = {}
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
        self, rec: Record, base: str, variant: str, domain: str, gold_label: float,
        first: Record | None = None,
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


def _check_same_cohort(cohort_path: Path, manifest: RunManifest) -> None:
    """A cohort given by hand must be the one the run was made of (by sha256)."""
    if not cohort_path.is_file():
        return  # the cohort reader names the missing file
    digest = hashlib.sha256(cohort_path.read_bytes()).hexdigest()
    if digest != manifest.cohort.get("sha256"):
        read_cohort(cohort_path)  # a malformed file is named by its reader first
        raise InputError(
            f"this run was made of cohort {manifest.cohort.get('path')!r} (sha256"
            f" {str(manifest.cohort.get('sha256'))[:12]}...), not of this file (sha256"
            f" {digest[:12]}...): refusing to analyse a run against another cohort",
            file=str(cohort_path))


def load_run(run_dir: str | Path, cohort_path: str | Path | None = None) -> RunRows:
    """Rows of a run directory; the cohort comes from ``cohort_path`` or the
    manifest when it names one that exists, else the grid of the records."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise InputError("run directory not found", file=str(run_dir))
    records = load_records(run_dir)
    manifest = load_manifest(run_dir)
    if not records:
        raise InputError("the run holds 0 records: there is nothing to analyse (run"
                         " `guardrepro run` into it first)", file=str(run_dir / RECORDS_FILE))
    check_one_provenance(records, manifest, run_dir / RECORDS_FILE, refusing="analyse")
    if cohort_path is not None:
        _check_same_cohort(Path(cohort_path), manifest)
    if cohort_path is None:
        cohort_path = manifest_cohort_path(run_dir, manifest)
        if cohort_path is None:
            rows = rows_from_records(records, None, records_file=run_dir / RECORDS_FILE)
            return RunRows(
                rows.rows,
                f"grid (cohort {manifest.cohort.get('path')!r} not found on disk)",
                rows.records,
            )
    return rows_from_records(
        records, cohort_path, manifest.shard, records_file=run_dir / RECORDS_FILE
    )
