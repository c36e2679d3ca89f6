"""A run's cohort: the cohort file read strictly, and found from the manifest's reference.

Input: a cohort JSONL file (layout: docs/PROTOCOL.md, "Cohort file"; rows are
``schema.CohortRow``), or a run's ``RunManifest``, whose ``cohort`` = {path,
sha256, rows} names the cohort the run was made of.
Output: the rows (``read_cohort``, ``read_cohort_hashed``), the run's cohort
file read once (``run_cohort`` -> ``CohortFile``), where the manifest's cohort
may be on disk (``manifest_cohort_candidates``), and the data lock and benchmark
its own ``<cohort>.manifest.json`` records (``run_data_source``).

Invariants: a cohort is read strictly (errors name the file and the line;
duplicate row ids are an error); a cohort file given by hand or found from the
manifest must have the sha256 the manifest pins (given: ``InputError``; found:
``IntegrityError``), so a run is never analysed against another cohort.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from guardrepro.artifacts.store import read_hashed
from guardrepro.errors import InputError, IntegrityError
from guardrepro.limits import at_line, load_json, read_json_file
from guardrepro.rundir.manifest import RunManifest, load_manifest_hashed
from guardrepro.schema import CohortRow


def parse_cohort_line(raw: bytes, *, file: str, index: int) -> CohortRow:
    """One cohort line (without its line break), at 0-based ``index`` of ``file``,
    checked strictly: not UTF-8, blank, not JSON or not a cohort row is an
    ``InputError`` naming the file and the line."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8: {exc}", file=file, row=index, line=index + 1) from None
    if not line.strip():
        raise InputError("blank line", file=file, row=index, line=index + 1)
    obj = load_json(line, file=file, row=index, line=index + 1)
    try:
        return CohortRow.from_dict(obj, file=file, row=index)
    except InputError as exc:
        raise at_line(exc, index) from None


def read_cohort(path: str | Path, data: bytes | None = None) -> list[CohortRow]:
    """Read a cohort JSONL file (or its bytes ``data``, read by the caller) strictly; duplicate
    row ids are an error. Errors name the file and the line (``row`` = 0-based line index)."""
    path = Path(path)
    rows: list[CohortRow] = []
    seen: dict[str, int] = {}
    try:
        data = path.read_bytes() if data is None else data
    except FileNotFoundError:
        raise InputError("cohort file not found", file=str(path)) from None
    except OSError as exc:
        raise InputError(f"cannot read cohort file: {exc}", file=str(path)) from None
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()  # the final line break ends the last line
    for index, raw in enumerate(lines):
        item = parse_cohort_line(raw, file=str(path), index=index)
        if item.row_id in seen:
            raise InputError(
                f"duplicate sample_id {item.row_id!r} (first at line {seen[item.row_id] + 1})",
                file=str(path), row=index, line=index + 1, field="sample.sample_id")
        seen[item.row_id] = index
        rows.append(item)
    if not rows:
        raise InputError("cohort file is empty", file=str(path))
    return rows


def read_cohort_hashed(path: str | Path) -> tuple[list[CohortRow], str]:
    """A cohort file's rows (``read_cohort``) and its sha256, from one read."""
    try:
        data, digest = read_hashed(Path(path))
    except OSError:
        read_cohort(path)  # an InputError naming the missing or unreadable file
        raise
    return read_cohort(path, data), digest


@dataclass(frozen=True)
class CohortFile:
    """A cohort file read once: its path, its rows (the whole file) and the
    sha256 of the bytes parsed."""

    path: Path
    rows: tuple[CohortRow, ...]
    sha256: str


def manifest_cohort_candidates(run_dir: str | Path, manifest: RunManifest) -> list[Path]:
    """Where the cohort file the manifest names may be, in the order looked up: as
    given (absolute or relative to the working directory), then relative to the
    run directory and each of its parents."""
    raw = manifest.cohort.get("path")
    if not isinstance(raw, str) or not raw:
        return []
    p = Path(raw)
    return [p] if p.is_absolute() else [
        p, *(base / p for base in (Path(run_dir).resolve(), *Path(run_dir).resolve().parents))
    ]


def check_given_cohort(manifest: RunManifest, path: Path, digest: str) -> None:
    """A cohort file given by hand (sha256 ``digest``) must be the run's:
    an ``InputError`` naming it otherwise."""
    pinned = manifest.cohort.get("sha256")
    if digest != pinned:
        raise InputError(
            f"this run was made of cohort {manifest.cohort.get('path')!r} (sha256"
            f" {str(pinned)[:12]}...), not of this file (sha256 {digest[:12]}...):"
            " refusing to analyse a run against another cohort", file=str(path))


def check_found_cohort(manifest: RunManifest, path: Path, digest: str) -> None:
    """The cohort file found where the manifest names it (sha256 ``digest``) must
    still be the run's: an ``IntegrityError`` otherwise (it changed since the run)."""
    pinned = manifest.cohort.get("sha256")
    if digest != pinned:
        raise IntegrityError(
            f"cohort file {path} has sha256 {digest[:12]}..., the run's manifest pins"
            f" {str(pinned)[:12]}...; pass --cohort with the run's cohort")


def _find_manifest_cohort(run_dir: str | Path, manifest: RunManifest
                          ) -> tuple[Path, bytes, str] | None:
    """(path, bytes, sha256) of the cohort file the manifest names, looked up as
    given (absolute or relative to the working directory), then relative to the
    run directory and each of its parents; None when it is not on disk. A file
    found there whose sha256 differs from the manifest's is an ``IntegrityError``."""
    for cand in manifest_cohort_candidates(run_dir, manifest):
        if cand.is_file():
            data, digest = read_hashed(cand)
            check_found_cohort(manifest, cand, digest)
            return cand, data, digest
    return None


def _given_cohort(cohort_path: Path, manifest: RunManifest) -> CohortFile:
    """A cohort given by hand, read once; it must be the one the run was made of
    (by sha256)."""
    rows, digest = read_cohort_hashed(cohort_path)  # a malformed file is named first
    check_given_cohort(manifest, cohort_path, digest)
    return CohortFile(cohort_path, tuple(rows), digest)


def run_cohort(run_dir: Path, manifest: RunManifest, cohort_path: str | Path | None
               ) -> CohortFile | None:
    """The run's cohort file read once: ``cohort_path`` when given, else the one
    its manifest names when it is on disk, else None."""
    if cohort_path is not None:
        return _given_cohort(Path(cohort_path), manifest)
    found = _find_manifest_cohort(run_dir, manifest)
    if found is None:
        return None
    path, data, digest = found
    return CohortFile(path, tuple(read_cohort(path, data)), digest)


@dataclass(frozen=True)
class RowSource:
    """Where a run's rows came from, as its cohort's manifest records it: the
    data lock and the benchmark (None each when the cohort or its manifest is
    not on disk, or predates the field)."""

    data_lock: Path | None
    benchmark: str | None


def run_data_source(run_dir: str | Path) -> RowSource:
    """The data lock and benchmark of the cohort a run was made of, read from
    ``<cohort>.manifest.json`` beside the cohort its manifest names (the cohort
    itself is checked against the run's sha256 first)."""
    from guardrepro.bench.cohort.build import manifest_path

    manifest = load_manifest_hashed(run_dir)[0]
    found = _find_manifest_cohort(run_dir, manifest)
    meta = None if found is None else manifest_path(found[0])
    if meta is None or not meta.is_file():
        return RowSource(None, None)
    data = read_json_file(meta, what="cohort manifest")
    if not isinstance(data, dict):
        raise InputError("expected a JSON object", file=str(meta))
    lock, benchmark = data.get("data_lock"), data.get("benchmark")
    return RowSource(Path(lock) if isinstance(lock, str) else None,
                          benchmark if isinstance(benchmark, str) else None)
