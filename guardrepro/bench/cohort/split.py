"""Whole-split benchmark cohorts: every row of a TS-Bench split, as it is.

Input: a split spec (``cohorts/*-all.toml``, ``kind = "split"``) and a data
directory holding the split's files at their ToolSafe-relative paths
(``guardrepro.bench.tsbench.BENCHMARK_FILES``). Output: cohort JSONL bytes in
the layout of ``guardrepro.schema.CohortRow`` and a manifest;
``write_cohort`` (shared with the counterfactual cohorts) writes both
atomically, so ``run``, resume, ``--shard``/``--workers`` and ``merge`` treat
a split cohort like any other cohort. Spec format::

    name = "agentdojo-all"
    kind = "split"
    benchmark = "agentdojo"                # agentdojo | agentharm | asb
    data_lock = "../locks/toolsafe.toml"   # relative to this spec file
    [expected]                             # optional, every key optional
    rows = 1220
    sha256 = "<64 hex>"
    bytes = 123

Invariants:

- Every row of every file, in the upstream evaluator's order (AgentDojo
  workspace, travel, slack, banking; AgentHarm harmful_steps, benign_steps;
  ASB DPI_attack_success, OPI_attack_success, atttack_failure), nothing
  dropped, edited or reordered. Rows whose action is empty, ``"None"``,
  ``"Final Answer"`` or null are rows like the others.
- The row id is the base sample id (``sample.sample_id`` = ``base_sample_id``;
  a duplicate is an ``InputError`` naming both rows); the variant is
  ``original``; the domain is the file stem.
- The four texts are the TS-Bench values as decoded (serialization
  ``tsbench_raw``), so the TS-Guard prompt renders byte for byte as the
  upstream evaluator renders it (a list history gives its Python repr, not
  its JSON text). The manifest counts the rows whose fields are not strings.
- The input files are checked against the spec's data lock unless the
  build is unpinned (shared with ``cohort.build.read_sources``).
"""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from guardrepro.artifacts.store import read_hashed, sha256_bytes
from guardrepro.bench.cohort.build import CohortBuild, read_sources, serialize_rows, write_cohort
from guardrepro.bench.tsbench import BenchRow, benchmark_files, check_unique_ids
from guardrepro.errors import InputError
from guardrepro.progress import progress_iter
from guardrepro.schema import COHORT_TEXT_FIELDS, RAW_SERIALIZATION, CohortRow, strict_decision
from guardrepro.spec import HEX64, Table, expect_kind, load_toml

SPLIT_KIND = "split"
SOURCE = "TS-Bench"  # sample.source of every row; sample.split is the benchmark
VARIANT = "original"
_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]*$")


@dataclass(frozen=True)
class SplitSpec:
    name: str
    benchmark: str
    data_lock: Path
    expected_rows: int | None = None
    expected_sha256: str | None = None
    expected_bytes: int | None = None
    path: Path | None = None

    @property
    def files(self) -> tuple[str, ...]:
        return benchmark_files(self.benchmark)

    @property
    def domains(self) -> tuple[str, ...]:
        """File stems in upstream order (each file's rows carry its stem)."""
        return tuple(Path(rel).stem for rel in self.files)

    def relpath(self, domain: str) -> str:
        return dict(zip(self.domains, self.files, strict=True))[domain]


def parse_split_spec(data: Any, file: str, base_dir: Path) -> SplitSpec:
    top = Table(data, file, "")
    name = top.take("name", str)
    if not _NAME.fullmatch(name):
        raise top.fail("name", f"must match {_NAME.pattern}, got {name!r}")
    kind = top.take("kind", str)
    if kind != SPLIT_KIND:
        raise top.fail("kind", f"must be {SPLIT_KIND!r}, got {kind!r}")
    benchmark = top.take("benchmark", str)
    try:
        benchmark_files(benchmark)
    except InputError as exc:
        raise top.fail("benchmark", exc.message) from None
    lock = Path(top.take("data_lock", str))
    data_lock = Path(os.path.normpath(lock if lock.is_absolute() else base_dir / lock))
    expected = top.take("expected", dict, None)
    top.done()
    rows = sha = size = None
    if expected is not None:
        sub = Table(expected, file, "expected")
        rows = sub.take("rows", int, None)
        sha = sub.take("sha256", str, None)
        size = sub.take("bytes", int, None)
        sub.done()
        if sha is not None and not HEX64.fullmatch(sha):
            raise sub.fail("sha256", "must be 64 lowercase hex")
        for key, value in (("rows", rows), ("bytes", size)):
            if value is not None and value < 0:
                raise sub.fail(key, "must be >= 0")
    return SplitSpec(name=name, benchmark=benchmark, data_lock=data_lock, expected_rows=rows,
                     expected_sha256=sha, expected_bytes=size, path=Path(file))


def load_split_spec(path: str | Path) -> SplitSpec:
    """Read a split spec TOML file strictly."""
    spec_path = Path(path)
    data = load_toml(spec_path, "cohort spec")
    expect_kind(data, "cohort", file=str(spec_path))
    return parse_split_spec(data, str(spec_path), spec_path.parent)


def is_split_spec(path: str | Path) -> bool:
    """Whether a cohort spec file declares ``kind = "split"``."""
    data = load_toml(Path(path), "cohort spec")
    return isinstance(data, dict) and data.get("kind") == SPLIT_KIND


def split_row(spec: SplitSpec, row: BenchRow) -> dict[str, Any]:
    """One cohort line's object for one benchmark row (the module docstring)."""
    base = row.base_sample_id
    return {
        "axis": "",
        "base_sample_id": base,
        "cohort": spec.benchmark,
        "domain": row.domain,
        "original_label": strict_decision(row.score),
        "serialization": RAW_SERIALIZATION,
        "variant": VARIANT,
        "sample": {
            "sample_id": base,
            "source": SOURCE,
            "split": spec.benchmark,
            **{name: row.raw[name] for name in COHORT_TEXT_FIELDS},
            "label": row.score,
            "trajectory_id": base,
            "segment_id": VARIANT,
            "subset": row.domain,
            "malicious_user_request": None,
            "prompt_injection": None,
        },
    }


def build_split(spec: SplitSpec, data_dir: str | Path, *, pinned: bool = True,
                progress: bool = False) -> CohortBuild:
    """Every row of the split as a cohort (nothing is written)."""
    sources, rows = read_sources(spec, Path(data_dir), pinned)
    check_unique_ids(rows)
    out: list[dict[str, Any]] = []
    non_string: Counter[str] = Counter()
    for row in progress_iter(rows, f"cohort {spec.name}", "row", enabled=progress):
        data = split_row(spec, row)
        CohortRow.from_dict(data, file=row.file, row=row.index)
        non_string.update(n for n in COHORT_TEXT_FIELDS if not isinstance(row.raw[n], str))
        out.append(data)
    blob = serialize_rows(out)
    manifest = _manifest(spec, sources, rows, blob, pinned, dict(sorted(non_string.items())))
    warnings = []
    if manifest["rows_match"] is False:
        warnings.append(f"{len(rows)} rows, the spec expects {spec.expected_rows}")
    manifest["warnings"] = warnings
    return CohortBuild(spec, out, blob, manifest, warnings)  # type: ignore[arg-type]


def _manifest(spec: SplitSpec, sources: list[dict[str, Any]], rows: list[BenchRow],
              blob: bytes, pinned: bool, non_string: dict[str, int]) -> dict[str, Any]:
    from guardrepro import __version__

    sha = sha256_bytes(blob)

    def matches(expected: Any, observed: Any) -> bool | None:
        return None if expected is None else expected == observed

    gold = Counter(row.score for row in rows)
    spec_sha = (read_hashed(spec.path)[1]
                if spec.path is not None and spec.path.is_file() else None)
    return {
        "cohort": spec.name, "name": spec.name, "kind": SPLIT_KIND,
        "guardrepro_version": __version__,
        "spec": None if spec.path is None else str(spec.path), "spec_sha256": spec_sha,
        "benchmark": spec.benchmark, "serialization": RAW_SERIALIZATION,
        "variants": [VARIANT], "data_lock": str(spec.data_lock), "pinned": pinned,
        "sources": sources,
        "bases": len(rows), "rows": len(rows),
        "interactions": len({row.interaction_id for row in rows}),
        "gold": {str(score): gold.get(score, 0) for score in (0.0, 0.5, 1.0)},
        "rows_with_non_string_fields": non_string,
        "bytes": len(blob), "sha256": sha,
        "expected_rows": spec.expected_rows, "rows_match": matches(spec.expected_rows, len(rows)),
        "expected_sha256": spec.expected_sha256,
        "sha256_matches": matches(spec.expected_sha256, sha),
        "expected_bytes": spec.expected_bytes,
        "bytes_match": matches(spec.expected_bytes, len(blob)),
    }


def build_any_cohort_file(spec_path: str | Path, data_dir: str | Path | None, out: str | Path,
                          *, unpinned: bool = False, progress: bool = False,
                          home: str | Path | None = None) -> dict[str, Any]:
    """``cohort build`` for either kind of spec: a split spec builds the
    whole split, any other spec the counterfactual cohort
    (``cohort.build.build_cohort_file``). Returns the written manifest.
    ``data_dir=None`` reads the spec's data lock from the cache ``home``."""
    if not is_split_spec(spec_path):
        from guardrepro.bench.cohort.build import build_cohort_file

        return build_cohort_file(spec_path, data_dir, out, unpinned=unpinned, progress=progress,
                                 home=home)
    spec = load_split_spec(spec_path)
    if data_dir is None:
        from guardrepro.artifacts.fetch import materialize

        data_dir = materialize(spec.data_lock, home)
    return write_cohort(build_split(spec, data_dir, pinned=not unpinned, progress=progress), out)

