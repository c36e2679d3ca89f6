"""Merge shard runs (``guardrepro run --shard k/n`` on several hosts) into one run.

Input: run directories (each ``manifest.json`` + ``records.jsonl``), an output
directory, optionally the cohort file. Output: the output directory holding
``records.jsonl`` (every source record, unchanged, in cohort order),
``manifest.json`` (a ``records.RunManifest`` of an unsharded run of the whole
cohort, so every reader of runs and ``guardrepro run --out`` itself accept
it) and ``merge.json`` (the source runs: path, run id, shard, record count,
sha256 of their records file, profile).

Refusals (nothing is written):

- mixed provenance: a source whose ``provenance_sha256`` differs from the
  first one's (``ProvenanceError`` listing every differing provenance key),
  or a record whose provenance hash differs from its run's manifest;
- different cohorts (``cohort.sha256`` differs), or a cohort file given
  with ``--cohort`` whose bytes are not the runs' cohort;
- a row recorded by two sources (duplicate row ids), a record outside its
  run's shard or outside the cohort;
- rows of the cohort that no source recorded, unless ``allow_partial``
  (a partial merge can be completed later by ``guardrepro run`` into the
  merged directory: its manifest is that of the unsharded run);
- an output directory that already holds a run, or that is one of the sources.

Invariant: records keep the ``run_id`` of the shard run that produced them;
the output appears at once (built in a temporary sibling directory, fsync'd,
then renamed into place).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import guardrepro
from guardrepro.artifacts.nofollow import refuse_links
from guardrepro.artifacts.store import fsync_dir, remove_stale_dirs
from guardrepro.errors import InputError, ProvenanceError
from guardrepro.guards.registry import record_parser
from guardrepro.run.merge_index import (
    RecordIndex,
    cohort_ids,
    cohort_sha256,
    index_records,
    write_merged,
)
from guardrepro.rundir.manifest import (
    MANIFEST_FILE,
    RunManifest,
    provenance_differences,
    read_manifest,
    write_manifest,
)
from guardrepro.rundir.records import (
    RECORDS_FILE,
    utc_now,
    write_atomic,
)
from guardrepro.rundir.shard import parse_shard, shard_of
from guardrepro.serde.fields import JsonValue, opt
from guardrepro.versions import git_commit

MERGE_FILE = "merge.json"
MERGE_TAG = ".merge-"  # the temp directory: .<out>.merge-<pid>-<random>
SHOW = 10  # ids listed in an error message


@dataclass(frozen=True)
class SourceRun(JsonValue):
    """One merged shard: written as its path, the manifest's identity and its
    records' count and hash."""

    JSON_DERIVED: ClassVar[tuple[Any, ...]] = (
        "run_id", "shard", ("records", "record_count"), "profile", "created_at")

    path: Path
    manifest: RunManifest = opt(skip=True)
    index: RecordIndex = opt(skip=True)  # where each row's line lies; no record is kept
    records_sha256: str = opt()

    @property
    def run_id(self) -> str:
        return self.manifest.run_id

    @property
    def shard(self) -> str | None:
        return self.manifest.shard

    @property
    def record_count(self) -> int:
        return len(self.index.rows)

    @property
    def profile(self) -> Mapping[str, Any]:
        return self.manifest.profile

    @property
    def created_at(self) -> str:
        return self.manifest.created_at


@dataclass(frozen=True)
class MergeReport(JsonValue):
    JSON_DERIVED: ClassVar[tuple[Any, ...]] = ("missing_rows",)

    out_dir: Path
    run_id: str
    sources: list[SourceRun]
    cohort_rows: int
    merged_rows: int
    missing: list[str] = field(default_factory=list)  # ids, when the cohort file was read
    cohort_checked: bool = False  # row ids checked against the cohort file itself

    @property
    def missing_rows(self) -> int:
        return self.cohort_rows - self.merged_rows


def _ids(ids: Sequence[str]) -> str:
    shown = ", ".join(repr(i) for i in ids[:SHOW])
    return shown + (f", ... ({len(ids)} in all)" if len(ids) > SHOW else "")


def load_source(run_dir: str | Path) -> SourceRun:
    path = Path(run_dir).resolve()
    if not path.is_dir():
        raise InputError("run directory not found", file=str(path))
    manifest = read_manifest(path)
    if manifest is None:
        raise InputError(f"no {MANIFEST_FILE}: not a run directory", file=str(path))
    records_path = path / RECORDS_FILE
    if not records_path.is_file():
        raise InputError(f"no {RECORDS_FILE}", file=str(path))
    index = index_records(records_path, manifest, record_parser)
    return SourceRun(path, manifest, index, index.sha256)


def _check_provenance(sources: Sequence[SourceRun]) -> None:
    first = sources[0]
    problems = []
    for other in sources[1:]:
        if other.manifest.provenance_sha256 != first.manifest.provenance_sha256:
            diffs = provenance_differences(first.manifest.provenance.to_dict(),
                                           other.manifest.provenance.to_dict())
            listing = "\n    ".join(diffs or ["provenance_sha256 (no key differs)"])
            problems.append(f"{other.path} differs from {first.path}:\n    {listing}")
    if problems:
        raise ProvenanceError(
            "refusing to merge runs with mixed provenance (first != other):\n  "
            + "\n  ".join(problems)
        )
    cohorts = {s.manifest.cohort["sha256"] for s in sources}
    if len(cohorts) > 1:
        listing = "\n  ".join(
            f"{s.path}: cohort {s.manifest.cohort['sha256'][:12]}... ({s.manifest.cohort['path']})"
            for s in sources
        )
        raise ProvenanceError(f"refusing to merge runs of different cohorts:\n  {listing}")


def _check_shards(sources: Sequence[SourceRun]) -> None:
    for source in sources:
        if source.manifest.shard is None:
            continue
        k, n = parse_shard(source.manifest.shard)
        outside = [row_id for row_id in source.index.rows if shard_of(row_id, n) != k]
        if outside:
            raise InputError(
                f"records outside the run's shard {source.manifest.shard}: {_ids(outside)}",
                file=str(source.path / RECORDS_FILE),
            )


def _cohort_ids(
    sources: Sequence[SourceRun], cohort_path: Path | None
) -> tuple[list[str] | None, Path]:
    """The cohort's row ids in order (None when its file is not available) and its path."""
    expected = sources[0].manifest.cohort["sha256"]
    given = cohort_path is not None
    path = cohort_path if cohort_path is not None else Path(sources[0].manifest.cohort["path"])
    if not path.is_file():
        if given:
            raise InputError("cohort file not found", file=str(path))
        return None, path
    actual = cohort_sha256(path)
    if actual != expected:
        if given:
            raise ProvenanceError(
                f"{path}: sha256 {actual[:12]}... is not the runs' cohort {expected[:12]}..."
            )
        return None, path  # the recorded path now holds another file: fall back to counts
    return cohort_ids(path), path.resolve()


def _check_no_duplicates(sources: Sequence[SourceRun]) -> None:
    duplicates: list[str] = []
    for number, source in enumerate(sources):
        for row_id in source.index.rows:
            first = next((s for s in sources[:number] if row_id in s.index.rows), None)
            if first is not None:
                duplicates.append(f"{row_id!r} ({first.path} and {source.path})")
    if duplicates:
        shown = "; ".join(duplicates[:SHOW])
        more = f"; ... ({len(duplicates)} in all)" if len(duplicates) > SHOW else ""
        raise InputError(f"rows recorded by more than one run: {shown}{more}")


Order = Callable[[], Iterator[tuple[RecordIndex, str]]]


def _order_records(
    sources: Sequence[SourceRun], ids: list[str] | None, cohort_file: Path
) -> tuple[Order, int, list[str], int]:
    """(the records in cohort order, as a function giving (source, row id) pairs,
    their count, the cohort rows without one, the cohort's size).

    Without the cohort's ids the records keep the runs' order and the size is
    the manifest's count."""
    cohort_rows = int(sources[0].manifest.cohort["rows"])
    indexes = [s.index for s in sources]
    recorded = sum(len(index.rows) for index in indexes)
    missing: list[str] = []
    if ids is None:
        if recorded > cohort_rows:
            raise InputError(
                f"{recorded} records for a cohort of {cohort_rows} rows (its file "
                f"{cohort_file} is not available to name the strays; pass --cohort)"
            )
        return (lambda: ((index, row_id) for index in indexes for row_id in index.rows),
                recorded, missing, cohort_rows)
    known = set(ids)
    stray = [row_id for index in indexes for row_id in index.rows if row_id not in known]
    del known
    if stray:
        raise InputError(f"records of rows not in the cohort: {_ids(stray)}",
                         file=str(cohort_file))

    def owner(row_id: str) -> RecordIndex | None:
        return next((index for index in indexes if row_id in index.rows), None)

    # every record is a distinct cohort row (no stray, no duplicate): as many
    # records as ids leave none missing, and the ids need no pass of their own
    if recorded < len(ids):
        missing = [row_id for row_id in ids if owner(row_id) is None]

    def order() -> Iterator[tuple[RecordIndex, str]]:
        for row_id in ids:
            index = owner(row_id)
            if index is not None:
                yield index, row_id

    return order, recorded, missing, len(ids)


def _output_dir(out_dir: str | Path) -> Path:
    """``out_dir`` absolute: its parent resolved (the trusted directory, into which
    the merged run is renamed) and its own name kept, so that a symlink planted at
    it is refused (``artifacts.nofollow``) instead of being merged into."""
    given = Path(os.path.abspath(out_dir))
    out = given.parent.resolve() / given.name
    return refuse_links(out, trusted=out.parent)


def merge_runs(
    run_dirs: Sequence[str | Path],
    out_dir: str | Path,
    *,
    cohort_path: str | Path | None = None,
    allow_partial: bool = False,
) -> MergeReport:
    """Check and merge ``run_dirs`` into ``out_dir`` (see the module docstring)."""
    if not run_dirs:
        raise InputError("nothing to merge: give at least one run directory")
    out = _output_dir(out_dir)
    resolved = [Path(d).resolve() for d in run_dirs]
    if len(set(resolved)) != len(resolved):
        twice = sorted({str(p) for p in resolved if resolved.count(p) > 1})
        raise InputError(f"run directory given twice: {', '.join(twice)}")
    if out in resolved:
        raise InputError("the output directory is one of the runs being merged", file=str(out))
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise InputError("output directory exists and is not empty", file=str(out))

    sources: list[SourceRun] = []
    try:
        for directory in resolved:
            sources.append(load_source(directory))
        return _merge(sources, out, cohort_path, allow_partial)
    finally:
        for source in sources:
            source.index.close()


def _merge(sources: list[SourceRun], out: Path, cohort_path: str | Path | None,
           allow_partial: bool) -> MergeReport:
    _check_provenance(sources)
    _check_shards(sources)
    _check_no_duplicates(sources)

    ids, cohort_file = _cohort_ids(sources, Path(cohort_path) if cohort_path else None)
    ordered, merged, missing, cohort_rows = _order_records(sources, ids, cohort_file)
    absent = cohort_rows - merged
    if absent and not allow_partial:
        which = f": {_ids(missing)}" if missing else " (pass --cohort to list them)"
        raise InputError(
            f"{absent} of {cohort_rows} cohort rows have no record in any run{which}; "
            "run the missing shards, or merge with --allow-partial"
        )

    first = sources[0].manifest
    manifest = RunManifest(
        run_id=out.name,
        created_at=utc_now(),
        provenance=first.provenance,
        provenance_sha256=first.provenance_sha256,
        cohort={"path": str(cohort_file), "sha256": first.cohort["sha256"], "rows": cohort_rows},
        profile=dict(first.profile),
        shard=None,
        rows_selected=cohort_rows,
        guardrepro_version=guardrepro.__version__,
        git_commit=git_commit(),
        guard_spec=first.guard_spec,
    )
    report = MergeReport(out, out.name, sources, cohort_rows, merged, missing,
                         ids is not None)
    _write(out, ordered, manifest, report)
    return report


def _write(out: Path, records: Order, manifest: RunManifest, report: MergeReport) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_dirs(out.parent, MERGE_TAG)  # left by a killed merge
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}{MERGE_TAG}{os.getpid()}-", dir=out.parent))
    try:
        write_merged(tmp / RECORDS_FILE, records(), record_parser)
        summary = json.dumps(report.to_dict(), indent=2, sort_keys=True) + "\n"
        write_atomic(tmp / MERGE_FILE, summary)
        write_manifest(tmp, manifest)
        os.chmod(tmp, 0o755)
        if out.exists():
            out.rmdir()  # empty (checked above); rename needs the name free
        os.replace(tmp, out)
        fsync_dir(out.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
