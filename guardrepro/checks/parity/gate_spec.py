"""Gate specs (``checks/*.toml``): read and validated strictly.

Input: a TOML file (layout in ``guardrepro.checks.parity.gate``'s docstring).
Output: a frozen ``GateSpec``. Keys outside the format, missing keys, wrong
types and out-of-range values are ``InputError``s naming the file and the key;
paths in the spec resolve relative to the spec file.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from guardrepro.artifacts.store import sha256_bytes
from guardrepro.bench.tsbench import BENCHMARK_FILES
from guardrepro.checks.core.bootstrap import (
    DEFAULT_CONFIDENCE,
    DEFAULT_REPLICATES,
    DEFAULT_SEED,
    check_settings,
)
from guardrepro.checks.core.serde import JsonValue, opt
from guardrepro.errors import InputError, UnsafePathError
from guardrepro.spec import check_keys, expect_kind, is_kind, parse_toml, type_problem

THRESHOLD_KEYS = (
    "expected_rows",
    "min_coverage",
    "min_strict_agreement",
    "min_strict_agreement_gold_safe",
    "min_strict_agreement_gold_unsafe",
)


PACKAGE_PREFIX = "package:"

# ``expected_rows = "reference"`` (released references only): the gated split's
# row count as the released files hold it, for splits whose published counts
# disagree (ASB: 5,237 in the paper, 5,231 in the files).
REFERENCE_ROWS = "reference"


@dataclass(frozen=True)
class GateSpec(JsonValue):
    """A gate spec as read; its JSON (gate.json's ``spec``) holds the bootstrap
    settings in a ``bootstrap`` object."""

    name: str
    path: Path
    sha256: str
    rows: str
    reference: Mapping[str, Any]
    thresholds: Mapping[str, Any]
    replicates: int = opt(group="bootstrap", default=DEFAULT_REPLICATES)
    seed: int = opt(group="bootstrap", default=DEFAULT_SEED)
    confidence: float = opt(group="bootstrap", default=DEFAULT_CONFIDENCE)

    def resolve(self, relative: str, field: str) -> Path:
        """A path of the spec (its key ``field``): relative to the spec file, or
        ``package:REL`` for a file shipped inside the guardrepro package (found in a
        checkout and in a wheel alike); an unsafe one names the spec and field."""
        if relative.startswith(PACKAGE_PREFIX):
            from guardrepro.artifacts.paths import package_root
            from guardrepro.artifacts.store import safe_join

            try:
                return safe_join(package_root(), relative[len(PACKAGE_PREFIX):])
            except UnsafePathError as exc:
                raise InputError(f"{exc}", file=str(self.path), field=field) from None
        return (self.path.parent / relative).resolve()


def with_expected_rows(spec: GateSpec, reference_rows: int) -> GateSpec:
    """``spec`` with ``expected_rows = "reference"`` replaced by the reference's
    row count (other specs are returned unchanged)."""
    if spec.thresholds["expected_rows"] != REFERENCE_ROWS:
        return spec
    return replace(spec, thresholds={**spec.thresholds, "expected_rows": reference_rows},
                   reference={**spec.reference, "expected_rows_from": REFERENCE_ROWS})


def _need(table: Mapping[str, Any], key: str, kind: type | tuple[type, ...], file: str,
          where: str = "") -> Any:
    check_keys(table, table, file=file, where=where.rstrip("."), required=(key,))
    value = table[key]
    if not is_kind(value, kind):
        raise InputError(type_problem(value, kind), file=file, field=where + key)
    return value


def _only(table: Mapping[str, Any], allowed: set[str], file: str, where: str = "") -> None:
    check_keys(table, allowed, file=file, where=where.rstrip("."))


def _package_path(value: str, file: str, field: str) -> None:
    """A ``package:REL`` path must name a file inside the package (no ``..``, not
    absolute): otherwise an error naming the spec file and the field."""
    if value.startswith(PACKAGE_PREFIX):
        from guardrepro.artifacts.store import check_relpath

        try:
            check_relpath(value[len(PACKAGE_PREFIX):])
        except UnsafePathError as exc:
            raise InputError(f"{exc}: a {PACKAGE_PREFIX} path names a file inside the "
                             "guardrepro package", file=file, field=field) from None


def load_spec(path: str | Path) -> GateSpec:
    """Parse and validate a gate spec strictly (keys outside the format are errors)."""
    path = Path(path)
    file = str(path)
    if not path.is_file():
        raise InputError("gate spec not found", file=file)
    raw = path.read_bytes()
    data = parse_toml(raw, file)[0]
    expect_kind(data, "gate", file=file)
    _only(data, {"name", "description", "rows", "reference", "thresholds", "bootstrap"}, file)
    name = _need(data, "name", str, file)
    rows = _need(data, "rows", str, file)
    if rows != "originals":
        raise InputError(f"rows must be 'originals', got {rows!r}", file=file, field="rows")
    ref = _need(data, "reference", dict, file)
    kind = _need(ref, "type", str, file, "reference.")
    if kind == "released":
        _only(ref, {"type", "lock", "benchmark"}, file, "reference.")
        _package_path(_need(ref, "lock", str, file, "reference."), file, "reference.lock")
        bench = _need(ref, "benchmark", str, file, "reference.")
        if bench not in BENCHMARK_FILES:
            raise InputError(f"unknown benchmark {bench!r}; known: {sorted(BENCHMARK_FILES)}",
                             file=file, field="reference.benchmark")
    elif kind == "records":
        _only(ref, {"type", "path"}, file, "reference.")
        _package_path(_need(ref, "path", str, file, "reference."), file, "reference.path")
    else:
        raise InputError(f"reference type must be 'released' or 'records', got {kind!r}",
                         file=file, field="reference.type")
    thr = _need(data, "thresholds", dict, file)
    _only(thr, set(THRESHOLD_KEYS), file, "thresholds.")
    thresholds: dict[str, Any] = {}
    for key in THRESHOLD_KEYS:
        if key == "expected_rows" and thr.get(key) == REFERENCE_ROWS and kind == "released":
            value = REFERENCE_ROWS  # every row of the released split, counted at gate time
        elif key == "expected_rows":
            value = _need(thr, key, int, file, "thresholds.")
            if value < 1:
                raise InputError("must be >= 1", file=file, field="thresholds.expected_rows")
        else:
            value = _need(thr, key, (int, float), file, "thresholds.")
            if not 0 <= value <= 1:
                raise InputError("must be within [0, 1]", file=file, field=f"thresholds.{key}")
        thresholds[key] = value
    boot = data.get("bootstrap", {})
    if not isinstance(boot, dict):
        raise InputError("expected a table", file=file, field="bootstrap")
    _only(boot, {"replicates", "seed", "confidence"}, file, "bootstrap.")
    replicates = int(_need(boot, "replicates", int, file, "bootstrap.")) if "replicates" in boot \
        else DEFAULT_REPLICATES
    seed = int(_need(boot, "seed", int, file, "bootstrap.")) if "seed" in boot else DEFAULT_SEED
    confidence = float(_need(boot, "confidence", (int, float), file, "bootstrap.")) \
        if "confidence" in boot else DEFAULT_CONFIDENCE
    try:
        check_settings(replicates, seed, confidence)
    except InputError as exc:
        raise InputError(exc.message, file=file, field=f"bootstrap.{exc.field}") from None
    return GateSpec(
        name=name, path=path.resolve(), sha256=sha256_bytes(raw), rows=rows,
        reference=dict(ref), thresholds=thresholds, replicates=replicates, seed=seed,
        confidence=confidence,
    )
