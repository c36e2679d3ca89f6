"""Build a frozen counterfactual cohort from TS-Bench files
(``docs/PROTOCOL.md``, "The counterfactual cohort" and "Cohort file").

Input: a :class:`~guardrepro.bench.cohort.spec.CohortSpec` and a data directory
holding ``TS-Bench/<benchmark>-traj/<domain>.json`` for each spec domain.
Output: cohort JSONL bytes (readable by ``guardrepro.rundir.cohort.read_cohort``)
and a manifest dict; ``write_cohort`` writes both atomically, the cohort
(``<out>``) first and its manifest (``<out>.manifest.json``) last.

Algorithm, in order:

1. Integrity: each input file's sha256 and size must equal its entry in the
   spec's data lock (``IntegrityError`` naming file, expected, observed), unless
   the build is unpinned (the manifest then says ``"pinned": false``).
2. Stringify: every row's instruction, history, current_action and env_info
   become text (``guardrepro.bench.tsbench.field_text``); everything below works on
   these texts only.
3. Eligibility: the history text contains every spec marker, case-sensitive.
   Base sample ids must be unique among eligible rows (``InputError`` naming
   both rows); identical rows that are not eligible cannot reach the cohort
   and are only counted (``duplicate_rows_outside_eligible``).
4. Cells: for each domain in spec order and each strict label (score != 0 ->
   1) in spec order, sort the eligible rows by the hex sha256 of
   ``"<salt>:<base_sample_id>"`` ascending and draw the first ``per_cell``.
   A cell with fewer eligible rows gives what it has (a warning, never
   padding).
5. Each drawn base gets its variants or is excluded with the first failing
   reason: ``marker_pair_missing``, ``candidate_tool_<status>`` (the step
   parser's status is not ``ok_*`` or its tool name is empty),
   ``tool_name_absent_from_current_action``,
   ``tool_name_absent_from_tool_descriptions`` (the alias replacement would
   not change current_action, resp. env_info; tool checks only when
   ``tool_alias`` or ``combined`` is enabled), then ``<edit>_no_change`` for
   each enabled edit in spec order (``repeat_original`` exempt). Excluded
   bases are counted and never replaced.
6. Rows: per base, ``original`` then the enabled edits in spec order, in the
   layout of :func:`cohort_row`. One line per row:
   ``json.dumps(row, ensure_ascii=False, sort_keys=True, separators=(",",
   ":")) + "\\n"``, UTF-8.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from guardrepro.artifacts.store import atomic_write_bytes, read_hashed, sha256_bytes
from guardrepro.bench.cohort.spec import CohortSpec, SourceSpec, load_spec
from guardrepro.bench.edits import (
    TEXT_FIELDS,
    placebo_history,
    replace_markers,
    replace_tool,
    tool_alias,
)
from guardrepro.bench.react import parse_step_at
from guardrepro.bench.tsbench import (
    BenchRow,
    bench_rows,
    check_unique_ids,
    decode_json_strict,
    field_text,
)
from guardrepro.errors import InputError, IntegrityError
from guardrepro.progress import progress_bar
from guardrepro.schema import CohortRow, canonical_json, sha256_text, strict_decision

TOOL_EDITS = ("tool_alias", "combined")
SOURCE = "AgentDojo-Shortcut-Audit"  # sample.source of every row
SPLIT = "counterfactual"  # sample.split of every row
AXIS = ""  # the published files leave the axis empty


def salted_key(salt: str, base_sample_id: str) -> str:
    return hashlib.sha256(f"{salt}:{base_sample_id}".encode()).hexdigest()


def derived_id(spec: CohortSpec, base_id: str, variant: str) -> str:
    parts = [spec.protocol, spec.benchmark, base_id, variant, spec.serialization]
    return sha256_text("\x1f".join(parts))[:20]


def texts(row: BenchRow) -> dict[str, str]:
    """The four stringified texts of a benchmark row."""
    return {name: field_text(row.raw[name]) for name in TEXT_FIELDS}


def is_eligible(spec: CohortSpec, history: str) -> bool:
    return all(marker in history for marker in spec.markers)


@dataclass(frozen=True)
class Exclusion:
    """A drawn base whose variants cannot be built (counted, not replaced)."""

    base_sample_id: str
    domain: str
    label: int
    reason: str
    detail: str


@dataclass(frozen=True)
class Cell:
    domain: str
    label: int
    eligible: int
    drawn: tuple[str, ...]
    excluded: tuple[str, ...]

    @property
    def included(self) -> tuple[str, ...]:
        return tuple(base for base in self.drawn if base not in self.excluded)


@dataclass
class CohortBuild:
    """The result of :func:`build_cohort`; ``data`` is the exact file content."""

    spec: CohortSpec
    rows: list[dict[str, Any]]
    data: bytes
    manifest: dict[str, Any]
    warnings: list[str] = field(default_factory=list)


def _aliased(spec: CohortSpec, row: BenchRow, original: dict[str, str]) -> dict[str, str] | str:
    """The four texts with the tool aliased, or the exclusion reason + detail;
    a current_action the published parser crashes on is an ``InputError``
    naming the file, row and field."""
    base = row.base_sample_id
    step = parse_step_at(original["current_action"], file=row.file, row=row.index)
    if not step.ok or not step.tool_name:
        return f"candidate_tool_{step.status}\tstep parser status {step.status!r}, " \
               f"tool name {step.tool_name!r}"
    tool = step.tool_name
    alias = tool_alias(spec.salt, base, tool)
    aliased = {name: replace_tool(text, tool, alias) for name, text in original.items()}
    for name, label in (("current_action", "current_action"),
                        ("env_info", "tool_descriptions")):
        if aliased[name] == original[name]:
            return f"tool_name_absent_from_{label}\ttool {tool!r} not found in {name}"
    return aliased


def build_variants(spec: CohortSpec, row: BenchRow) -> dict[str, dict[str, str]] | Exclusion:
    """The four texts of every variant of one base (``original`` first), or
    the reason the base is excluded."""
    base = row.base_sample_id

    def exclude(reason: str, detail: str) -> Exclusion:
        return Exclusion(base, row.domain, strict_decision(row.score), reason, detail)

    original = texts(row)
    for marker in spec.markers:
        if marker not in original["history"]:
            return exclude("marker_pair_missing", f"history lacks {marker!r}")
    aliased = original
    if any(edit in TOOL_EDITS for edit in spec.edits):
        result = _aliased(spec, row, original)
        if isinstance(result, str):
            return exclude(*result.split("\t", 1))
        aliased = result
    variants: dict[str, dict[str, str]] = {"original": original}
    pairs = spec.marker_pairs
    for edit in spec.edits:
        if edit == "marker_paraphrase":
            new = {**original, "history": replace_markers(original["history"], pairs)}
        elif edit == "tool_alias":
            new = dict(aliased)
        elif edit == "combined":
            new = {**aliased, "history": replace_markers(aliased["history"], pairs)}
        elif edit == "placebo":
            new = {**original, "history": placebo_history(original["history"])}
        else:  # repeat_original: the original again, under its own derived id
            new = dict(original)
        if edit != "repeat_original" and new == original:
            return exclude(f"{edit}_no_change", f"{edit} leaves the four texts unchanged")
        variants[edit] = new
    return variants


def cohort_row(
    spec: CohortSpec, row: BenchRow, variant: str, fields: Mapping[str, str]
) -> dict[str, Any]:
    """One output line's object (``docs/PROTOCOL.md``, "Cohort file")."""
    base = row.base_sample_id
    return {
        "axis": AXIS,
        "base_sample_id": base,
        "cohort": spec.benchmark,
        "domain": row.domain,
        "original_label": strict_decision(row.score),
        "serialization": spec.serialization,
        "variant": variant,
        "sample": {
            "sample_id": derived_id(spec, base, variant),
            "source": SOURCE,
            "split": SPLIT,
            **{name: fields[name] for name in TEXT_FIELDS},
            "label": row.score,
            "trajectory_id": base,
            "segment_id": variant,
            "subset": row.domain,
            "malicious_user_request": None,
            "prompt_injection": None,
        },
    }


def serialize_rows(rows: list[dict[str, Any]]) -> bytes:
    return "".join(canonical_json(row) + "\n" for row in rows).encode("utf-8")


def read_sources(
    spec: SourceSpec, data_dir: Path, pinned: bool
) -> tuple[list[dict[str, Any]], list[BenchRow]]:
    """Read every spec domain's file (step 1: checked against the data lock
    unless unpinned) and its rows; returns the manifest's ``sources`` and the rows."""
    lock = None
    if pinned:
        from guardrepro.artifacts.locks import load_lock

        lock = load_lock(spec.data_lock)
    sources: list[dict[str, Any]] = []
    rows: list[BenchRow] = []
    for domain in spec.domains:
        rel = spec.relpath(domain)
        path = data_dir / rel
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise InputError("benchmark file not found", file=str(path)) from None
        except OSError as exc:
            raise InputError(f"cannot read benchmark file: {exc}", file=str(path)) from None
        sha, size = sha256_bytes(data), len(data)
        expected = None
        if lock is not None:
            hint = "(pass --unpinned to build from unpinned data)"
            try:
                entry = lock.file(rel)
            except KeyError:
                raise IntegrityError(
                    f"{path}: not pinned: data lock {spec.data_lock} has no entry {rel!r} {hint}"
                ) from None
            if entry.sha256 is None:
                raise IntegrityError(
                    f"{path}: not pinned: data lock {spec.data_lock} has no sha256 for "
                    f"{rel!r} yet {hint}"
                )
            if entry.sha256 != sha or entry.size != size:
                raise IntegrityError(
                    f"{path}: does not match data lock {spec.data_lock}: expected sha256 "
                    f"{entry.sha256} ({entry.size} bytes), observed {sha} ({size} bytes) {hint}"
                )
            expected = entry.sha256
        # parse the very bytes that were hashed (no second read of the file)
        domain_rows = bench_rows(decode_json_strict(data, str(path)), str(path), domain)
        rows.extend(domain_rows)
        sources.append(
            {"path": rel, "sha256": sha, "bytes": size, "rows": len(domain_rows),
             "lock_sha256": expected}
        )
    return sources, rows


def _cells(spec: CohortSpec, rows: list[BenchRow]) -> list[tuple[str, int, list[BenchRow]]]:
    """Every (domain, label) cell in spec order with its eligible rows, salted order."""
    groups: dict[tuple[str, int], list[BenchRow]] = {}
    eligible_rows = [row for row in rows if is_eligible(spec, field_text(row.raw["history"]))]
    check_unique_ids(eligible_rows)
    for row in eligible_rows:
        groups.setdefault((row.domain, strict_decision(row.score)), []).append(row)
    out = []
    for domain in spec.domains:
        for label in spec.labels:
            eligible = sorted(
                groups.get((domain, label), []),
                key=lambda row: salted_key(spec.salt, row.base_sample_id),
            )
            out.append((domain, label, eligible))
    return out


def build_cohort(
    spec: CohortSpec, data_dir: str | Path, *, pinned: bool = True, progress: bool = False
) -> CohortBuild:
    """Select, edit and serialise a cohort (nothing is written)."""
    sources, bench_rows = read_sources(spec, Path(data_dir), pinned)
    out_rows: list[dict[str, Any]] = []
    cells: list[Cell] = []
    exclusions: list[Exclusion] = []
    warnings: list[str] = []
    cell_list = _cells(spec, bench_rows)
    # Identical content outside the eligible rows cannot reach the cohort; count it.
    duplicates = len(bench_rows) - len({row.base_sample_id for row in bench_rows})
    total = sum(min(len(eligible), spec.per_cell) for _, _, eligible in cell_list)
    bar = progress_bar(total, f"cohort {spec.name}", "base", enabled=progress)
    for domain, label, eligible in cell_list:
        drawn = eligible[: spec.per_cell]
        excluded: list[str] = []
        for row in drawn:
            variants = build_variants(spec, row)
            bar.update(1)
            if isinstance(variants, Exclusion):
                exclusions.append(variants)
                excluded.append(row.base_sample_id)
                continue
            for variant, fields in variants.items():
                out_rows.append(cohort_row(spec, row, variant, fields))
        cell = Cell(domain, label, len(eligible), tuple(r.base_sample_id for r in drawn),
                    tuple(excluded))
        cells.append(cell)
        if len(drawn) < spec.per_cell:
            warnings.append(
                f"cell {domain}/{label}: only {len(eligible)} eligible row(s) for "
                f"per_cell {spec.per_cell}; took them all, no padding"
            )
        if excluded:
            warnings.append(
                f"cell {domain}/{label}: {len(excluded)} base(s) excluded, not replaced"
            )
    bar.close()
    _check_rows(out_rows)
    data = serialize_rows(out_rows)
    manifest = _manifest(spec, sources, cells, exclusions, data, len(out_rows), pinned, warnings)
    manifest["duplicate_rows_outside_eligible"] = duplicates
    return CohortBuild(spec, out_rows, data, manifest, warnings)


def _check_rows(rows: list[dict[str, Any]]) -> None:
    """Every row must load as a CohortRow and derived ids must be unique."""
    seen: set[str] = set()
    for index, data in enumerate(rows):
        row = CohortRow.from_dict(data, row=index)
        if row.row_id in seen:
            raise InputError(f"duplicate derived id {row.row_id}", row=index,
                             field="sample.sample_id")
        seen.add(row.row_id)


def _manifest(
    spec: CohortSpec,
    sources: list[dict[str, Any]],
    cells: list[Cell],
    exclusions: list[Exclusion],
    data: bytes,
    rows: int,
    pinned: bool,
    warnings: list[str],
) -> dict[str, Any]:
    from guardrepro import __version__

    sha = sha256_bytes(data)
    eligible = {
        domain: [c.eligible for c in cells if c.domain == domain] for domain in spec.domains
    }
    expected_eligible = (
        None if spec.expected_eligible is None
        else {domain: list(counts) for domain, counts in spec.expected_eligible.items()}
    )

    def matches(expected: Any, observed: Any) -> bool | None:
        return None if expected is None else expected == observed

    spec_sha = None
    if spec.path is not None and spec.path.is_file():
        spec_sha = read_hashed(spec.path)[1]
    return {
        "cohort": spec.name,
        "guardrepro_version": __version__,
        "spec": None if spec.path is None else str(spec.path),
        "spec_sha256": spec_sha,
        "benchmark": spec.benchmark,
        "protocol": spec.protocol,
        "serialization": spec.serialization,
        "salt": spec.salt,
        "per_cell": spec.per_cell,
        "labels": list(spec.labels),
        "variants": list(spec.variants),
        "data_lock": str(spec.data_lock),
        "pinned": pinned,
        "sources": sources,
        "cells": [
            {"domain": c.domain, "label": c.label, "eligible": c.eligible,
             "drawn": len(c.drawn), "excluded": len(c.excluded), "selected": len(c.included),
             "shortfall": max(0, spec.per_cell - len(c.drawn)), "bases": list(c.included)}
            for c in cells
        ],
        "eligible": eligible,
        "expected_eligible": expected_eligible,
        "eligible_matches": matches(expected_eligible, eligible),
        "exclusions": [asdict(e) for e in exclusions],
        "bases": sum(len(c.included) for c in cells),
        "rows": rows,
        "bytes": len(data),
        "sha256": sha,
        "expected_sha256": spec.expected_sha256,
        "sha256_matches": matches(spec.expected_sha256, sha),
        "expected_rows": spec.expected_rows,
        "rows_match": matches(spec.expected_rows, rows),
        "expected_bytes": spec.expected_bytes,
        "bytes_match": matches(spec.expected_bytes, len(data)),
        "warnings": list(warnings),
    }


def manifest_path(out: str | Path) -> Path:
    out = Path(out)
    return out.with_name(out.name + ".manifest.json")


def write_cohort(build: CohortBuild, out: str | Path) -> dict[str, Any]:
    """Write the cohort file and its manifest atomically; returns the manifest
    (with ``output`` set).

    Order, so that a manifest never stands without the cohort it describes
    (a manifest says ``pinned``; a full disk or an interrupted build must not
    leave that claim behind): remove an earlier manifest at ``OUT.manifest.json``,
    write the cohort, then the manifest (it carries the cohort's sha256). When
    the manifest cannot be written, the new cohort is removed again. What a failed
    build can leave is an earlier cohort without a manifest: "not built", as
    ``cohort_is_built`` checks the pair."""
    out = Path(out)
    manifest = {**build.manifest, "output": str(out)}
    meta = manifest_path(out)
    text = json.dumps(manifest, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    meta.unlink(missing_ok=True)
    atomic_write_bytes(out, build.data)
    try:
        atomic_write_bytes(meta, text.encode("utf-8"))
    except BaseException:
        out.unlink(missing_ok=True)
        raise
    return manifest


def cohort_is_built(out: str | Path) -> bool:
    """True when ``out`` and its manifest both exist and the manifest's sha256
    is the file's: the state a completed ``write_cohort`` leaves."""
    out = Path(out)
    meta = manifest_path(out)
    if not out.is_file() or not meta.is_file():
        return False
    try:
        recorded = json.loads(meta.read_text(encoding="utf-8")).get("sha256")
    except (OSError, ValueError, AttributeError):
        return False
    return bool(recorded == read_hashed(out)[1])


def build_cohort_file(
    spec_path: str | Path,
    data_dir: str | Path | None,
    out: str | Path,
    *,
    unpinned: bool = False,
    progress: bool = False,
    home: str | Path | None = None,
) -> dict[str, Any]:
    """Load a spec, build its cohort and write it; returns the manifest.

    ``data_dir=None`` uses the spec's data lock through ``guardrepro.artifacts.fetch.materialize``
    (a verified local copy in the cache ``home``; fetch it first)."""
    spec = load_spec(spec_path)
    if data_dir is None:
        from guardrepro.artifacts.fetch import materialize

        data_dir = materialize(spec.data_lock, home)
    build = build_cohort(spec, data_dir, pinned=not unpinned, progress=progress)
    return write_cohort(build, out)
