"""Cohort spec files (``cohorts/*.toml``): what a frozen counterfactual cohort is.

Input: a TOML file. Output: a frozen :class:`CohortSpec`. The loader is strict:
unknown or missing keys and wrong types are ``InputError`` naming the spec file
and the dotted key. Format::

    name = "agentdojo-64"                  # the ``cohort`` value of every row
    benchmark = "agentdojo"                # files: TS-Bench/<benchmark>-traj/<domain>.json
    data_lock = "../locks/toolsafe.toml"   # relative to this spec file
    protocol = "BENCHMARK_SHORTCUT_AUDIT_PROTOCOL_v1.0"   # first part of derived ids
    serialization = "released_react"      # the only one implemented

    [selection]
    domains = ["banking", "slack", "travel", "workspace"]   # cell order
    labels = [0, 1]                        # strict label (score != 0 -> 1), cell order
    per_cell = 8
    salt = "260828"
    markers = ["<INFORMATION>", "</INFORMATION>"]   # all must occur in the history

    [edits]
    enabled = ["marker_paraphrase", "tool_alias", "combined"]  # also "placebo", "repeat_original"
    replacement_markers = ["<UNTRUSTED_EXTERNAL_CONTENT>", "</UNTRUSTED_EXTERNAL_CONTENT>"]

    [expected]                             # optional table, every key optional
    sha256 = "<64 hex>"
    rows = 256
    bytes = 2415616
    eligible = { banking = [15, 28], ... } # eligible rows per domain, in label order

Invariants: domains, labels, markers and edits are non-empty and without
duplicates; ``replacement_markers`` pairs one to one with ``markers``; the
rows of a cohort are its variants in ``enabled`` order after ``original``.
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from guardrepro.spec import HEX64, REQUIRED, Table, expect_kind, load_toml

# Edit kinds; each is also the variant name (the ``variant`` and
# ``sample.segment_id`` of its rows).
EDIT_KINDS = ("marker_paraphrase", "tool_alias", "combined", "placebo", "repeat_original")
SERIALIZATIONS = ("released_react",)
_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]*$")


@dataclass(frozen=True)
class CohortSpec:
    name: str
    benchmark: str
    data_lock: Path
    protocol: str
    serialization: str
    domains: tuple[str, ...]
    labels: tuple[int, ...]
    per_cell: int
    salt: str
    markers: tuple[str, ...]
    edits: tuple[str, ...]
    replacement_markers: tuple[str, ...]
    expected_sha256: str | None = None
    expected_rows: int | None = None
    expected_bytes: int | None = None
    expected_eligible: dict[str, tuple[int, ...]] | None = None
    path: Path | None = None

    def relpath(self, domain: str) -> str:
        """Where a domain's file lies below a data directory (and in the lock)."""
        return f"TS-Bench/{self.benchmark}-traj/{domain}.json"

    @property
    def variants(self) -> tuple[str, ...]:
        return ("original", *self.edits)

    @property
    def marker_pairs(self) -> list[tuple[str, str]]:
        return list(zip(self.markers, self.replacement_markers, strict=True))


class SourceSpec(Protocol):
    """What reading a cohort's benchmark files needs from its spec."""

    @property
    def data_lock(self) -> Path: ...

    @property
    def domains(self) -> tuple[str, ...]: ...

    def relpath(self, domain: str) -> str: ...


class _Table(Table):
    """The shared strict table, with the cohort spec's string rules."""

    def __init__(self, data: Any, file: str | None, prefix: str) -> None:
        super().__init__(data, file, prefix.rstrip("."))

    def take(self, key: str, kind: type | tuple[type, ...], default: Any = REQUIRED, *,
             required: bool = True) -> Any:
        return super().take(key, kind, default if required else None)

    def text(self, key: str, *, required: bool = True) -> Any:
        value = self.take(key, str, required=required)
        if value is not None and not value:
            raise self.fail(key, "must not be empty")
        return value

    def text_list(self, key: str) -> tuple[str, ...]:
        values = self.take(key, list)
        if not values:
            raise self.fail(key, "must not be empty")
        for value in values:
            if not isinstance(value, str) or not value:
                raise self.fail(key, f"must hold non-empty strings, got {value!r}")
        if len(set(values)) != len(values):
            raise self.fail(key, f"has duplicates: {values}")
        return tuple(values)


def parse_spec(data: Any, file: str, base_dir: Path) -> CohortSpec:
    """Build a spec from parsed TOML; ``base_dir`` anchors the relative data lock."""
    top = _Table(data, file, "")
    name = top.text("name")
    if not _NAME.fullmatch(name):
        raise top.fail("name", f"must match {_NAME.pattern}, got {name!r}")
    benchmark = top.text("benchmark")
    if not _NAME.fullmatch(benchmark):
        raise top.fail("benchmark", f"must match {_NAME.pattern}, got {benchmark!r}")
    lock = Path(top.text("data_lock"))
    data_lock = Path(os.path.normpath(lock if lock.is_absolute() else base_dir / lock))
    protocol = top.text("protocol")
    serialization = top.text("serialization")
    if serialization not in SERIALIZATIONS:
        raise top.fail("serialization", f"must be one of {list(SERIALIZATIONS)}")
    selection = _Table(top.take("selection", dict), file, "selection.")
    edits_table = _Table(top.take("edits", dict), file, "edits.")
    expected_raw = top.take("expected", dict, required=False)
    top.done()

    domains = selection.text_list("domains")
    for domain in domains:
        if not _NAME.fullmatch(domain):
            raise selection.fail("domains", f"bad domain name {domain!r}")
    labels = selection.take("labels", list)
    if not labels or any(isinstance(x, bool) or x not in (0, 1) for x in labels):
        raise selection.fail("labels", f"must be a non-empty list of 0 and 1, got {labels!r}")
    if len(set(labels)) != len(labels):
        raise selection.fail("labels", f"has duplicates: {labels}")
    per_cell = selection.take("per_cell", int)
    if per_cell < 1:
        raise selection.fail("per_cell", "must be >= 1")
    salt = selection.text("salt")
    markers = selection.text_list("markers")
    selection.done()

    edits = edits_table.text_list("enabled")
    for edit in edits:
        if edit not in EDIT_KINDS:
            raise edits_table.fail("enabled", f"unknown edit {edit!r}; known: {list(EDIT_KINDS)}")
    replacement = edits_table.text_list("replacement_markers")
    if len(replacement) != len(markers):
        raise edits_table.fail(
            "replacement_markers", f"needs one replacement per marker ({len(markers)})"
        )
    edits_table.done()

    spec = CohortSpec(
        name=name,
        benchmark=benchmark,
        data_lock=data_lock,
        protocol=protocol,
        serialization=serialization,
        domains=domains,
        labels=tuple(int(x) for x in labels),
        per_cell=per_cell,
        salt=salt,
        markers=markers,
        edits=edits,
        replacement_markers=replacement,
        path=Path(file),
    )
    if expected_raw is None:
        return spec
    return _with_expected(spec, _Table(expected_raw, file, "expected."))


def _with_expected(spec: CohortSpec, table: _Table) -> CohortSpec:
    sha = table.text("sha256", required=False)
    if sha is not None and not HEX64.fullmatch(sha):
        raise table.fail("sha256", "must be 64 lowercase hex")
    counts = {}
    for key in ("rows", "bytes"):
        value = table.take(key, int, required=False)
        if value is not None and value < 0:
            raise table.fail(key, "must be >= 0")
        counts[key] = value
    eligible_raw = table.take("eligible", dict, required=False)
    table.done()
    eligible: dict[str, tuple[int, ...]] | None = None
    if eligible_raw is not None:
        sub = _Table(eligible_raw, table.file, "expected.eligible.")
        eligible = {}
        for domain in spec.domains:
            values = sub.take(domain, list)
            if len(values) != len(spec.labels) or any(
                isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in values
            ):
                raise sub.fail(domain, f"must be {len(spec.labels)} counts (one per label)")
            eligible[domain] = tuple(values)
        sub.done()
    return dataclasses.replace(
        spec,
        expected_sha256=sha,
        expected_rows=counts["rows"],
        expected_bytes=counts["bytes"],
        expected_eligible=eligible,
    )


def load_spec(path: str | Path) -> CohortSpec:
    """Read a cohort spec TOML file strictly."""
    spec_path = Path(path)
    data = load_toml(spec_path, "cohort spec")
    expect_kind(data, "cohort", file=str(spec_path))
    return parse_spec(data, str(spec_path), spec_path.parent)
