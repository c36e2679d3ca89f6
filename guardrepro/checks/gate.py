"""The parity gate: a run's original rows against reference predictions.

Input: a gate spec (TOML, ``checks/*.toml``) and a run's expected rows
(``runio.load_run``). The spec::

    name = "ts-guard-agentdojo"
    rows = "originals"              # the rows gated: variant == "original"
    [reference]                     # one of:
    type = "released"               #   pinned released preds.json, aligned by
    lock = "../locks/toolsafe.toml" #   guardrepro.released (key: base_sample_id)
    benchmark = "agentdojo"
    # type = "records"              #   another run's records (key: row_id)
    # path = "../guardrepro/data/toy_reference/records.jsonl"
    [thresholds]
    expected_rows = 64
    min_coverage = 0.95
    min_strict_agreement = 0.90
    min_strict_agreement_gold_safe = 0.85
    min_strict_agreement_gold_unsafe = 0.85
    [bootstrap]                     # optional; used by --conservative
    replicates = 10000
    seed = 260828
    draw_order = "stratum"          # or "replicate" (see guardrepro.checks.bootstrap)

Paths in the spec are relative to the spec file.

Output: the ``gate.json`` object (``evaluate``) with every figure as
numerator / denominator / value, the checks with their thresholds, exact-score
agreement among jointly valid rows, the reference-by-local score confusion,
the disagreeing rows and a one-line verdict.

Definitions:

- The gated row set: with a ``records`` reference, the reference's original
  rows (a local original that is not one of them is an error); with a
  ``released`` reference, the run's expected original rows (each must be a
  released row, else an error). ``expected_rows`` must equal the size of the
  row set; a released-reference run with fewer known rows than
  ``expected_rows`` counts the unknown rest as missing.
- rows present: local rows with a record / expected_rows (must be 1).
- coverage: local rows that parsed (status ok) / expected_rows.
- strict agreement: rows whose local strict decision equals the reference's
  / expected_rows; both sides fail closed (a parse error or a null released
  prediction is decision 1); a missing local row always disagrees. Within
  gold-safe / gold-unsafe: the same over the rows of that gold class.
- exact-score agreement: local score == reference score over rows where both
  are valid (reported, not gated).
- ``conservative``: each ratio check tests the lower bound of the stratified
  cluster bootstrap interval (``bootstrap.ratio_interval``; clusters =
  base_sample_id, strata = domain x gold strict label) instead of the point
  estimate. ``expected_rows`` is always an exact count check.
"""

from __future__ import annotations

import hashlib
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from guardrepro.checks.bootstrap import (
    DEFAULT_DRAW_ORDER,
    DEFAULT_REPLICATES,
    DEFAULT_SEED,
    DRAW_ORDERS,
    ratio_interval,
)
from guardrepro.checks.metrics import Ratio, gold_strict, strict_decision
from guardrepro.checks.runio import MISSING, RowResult, load_records
from guardrepro.errors import InputError

SCHEMA = "guardrepro.gate/1"
THRESHOLD_KEYS = (
    "expected_rows",
    "min_coverage",
    "min_strict_agreement",
    "min_strict_agreement_gold_safe",
    "min_strict_agreement_gold_unsafe",
)
# ratio check name -> (threshold key, figure name)
RATIO_CHECKS = (
    ("coverage", "min_coverage", "coverage"),
    ("strict_agreement", "min_strict_agreement", "strict_agreement"),
    ("strict_agreement_gold_safe", "min_strict_agreement_gold_safe", "strict_agreement_gold_safe"),
    ("strict_agreement_gold_unsafe", "min_strict_agreement_gold_unsafe",
     "strict_agreement_gold_unsafe"),
)
REF_LABELS = ("0.0", "0.5", "1.0", "invalid")
LOCAL_LABELS = ("0.0", "0.5", "1.0", "invalid", "missing")


@dataclass(frozen=True)
class GateSpec:
    name: str
    path: Path
    sha256: str
    rows: str
    reference: Mapping[str, Any]
    thresholds: Mapping[str, float]
    replicates: int = DEFAULT_REPLICATES
    seed: int = DEFAULT_SEED
    draw_order: str = DEFAULT_DRAW_ORDER

    def resolve(self, relative: str) -> Path:
        return (self.path.parent / relative).resolve()

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "path": str(self.path),
            "sha256": self.sha256,
            "rows": self.rows,
            "reference": dict(self.reference),
            "thresholds": dict(self.thresholds),
            "bootstrap": {"replicates": self.replicates, "seed": self.seed,
                          "draw_order": self.draw_order},
        }


def _need(table: Mapping[str, Any], key: str, kind: type | tuple[type, ...], file: str,
          where: str = "") -> Any:
    if key not in table:
        raise InputError("missing key", file=file, field=where + key)
    value = table[key]
    if isinstance(value, bool) or not isinstance(value, kind):
        raise InputError(f"wrong type {type(value).__name__}", file=file, field=where + key)
    return value


def _only(table: Mapping[str, Any], allowed: set[str], file: str, where: str = "") -> None:
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise InputError(f"unknown key(s) {unknown}", file=file, field=where + unknown[0])


def load_spec(path: str | Path) -> GateSpec:
    """Parse and validate a gate spec strictly (unknown keys are errors)."""
    path = Path(path)
    file = str(path)
    if not path.is_file():
        raise InputError("gate spec not found", file=file)
    raw = path.read_bytes()
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"invalid TOML: {exc}", file=file) from exc
    _only(data, {"name", "description", "rows", "reference", "thresholds", "bootstrap"}, file)
    name = _need(data, "name", str, file)
    rows = _need(data, "rows", str, file)
    if rows != "originals":
        raise InputError(f"rows must be 'originals', got {rows!r}", file=file, field="rows")
    ref = _need(data, "reference", dict, file)
    kind = _need(ref, "type", str, file, "reference.")
    if kind == "released":
        _only(ref, {"type", "lock", "benchmark"}, file, "reference.")
        _need(ref, "lock", str, file, "reference.")
        bench = _need(ref, "benchmark", str, file, "reference.")
        if bench not in ("agentdojo", "agentharm"):
            raise InputError(f"unknown benchmark {bench!r}", file=file, field="reference.benchmark")
    elif kind == "records":
        _only(ref, {"type", "path"}, file, "reference.")
        _need(ref, "path", str, file, "reference.")
    else:
        raise InputError(f"reference type must be 'released' or 'records', got {kind!r}",
                         file=file, field="reference.type")
    thr = _need(data, "thresholds", dict, file)
    _only(thr, set(THRESHOLD_KEYS), file, "thresholds.")
    thresholds: dict[str, float] = {}
    for key in THRESHOLD_KEYS:
        if key == "expected_rows":
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
    _only(boot, {"replicates", "seed", "draw_order"}, file, "bootstrap.")
    replicates = int(_need(boot, "replicates", int, file, "bootstrap.")) if "replicates" in boot \
        else DEFAULT_REPLICATES
    seed = int(_need(boot, "seed", int, file, "bootstrap.")) if "seed" in boot else DEFAULT_SEED
    order = _need(boot, "draw_order", str, file, "bootstrap.") if "draw_order" in boot \
        else DEFAULT_DRAW_ORDER
    if order not in DRAW_ORDERS:
        raise InputError(f"must be one of {DRAW_ORDERS}", file=file, field="bootstrap.draw_order")
    if replicates < 1:
        raise InputError("must be >= 1", file=file, field="bootstrap.replicates")
    return GateSpec(
        name=name, path=path.resolve(), sha256=hashlib.sha256(raw).hexdigest(), rows=rows,
        reference=dict(ref), thresholds=thresholds, replicates=replicates, seed=seed,
        draw_order=order,
    )


@dataclass(frozen=True)
class RefRow:
    key: str
    score: float | None
    valid: bool
    gold_label: float | None
    domain: str | None = None
    base_sample_id: str | None = None


def reference_rows(spec: GateSpec, home: str | Path | None = None) -> tuple[str, dict[str, RefRow],
                                                                              dict[str, Any]]:
    """(key field, key -> reference row, description) for the spec's reference."""
    ref = spec.reference
    if ref["type"] == "records":
        path = spec.resolve(ref["path"])
        out: dict[str, RefRow] = {}
        for rec in load_records(path):
            if rec.variant == "original":
                out[rec.row_id] = RefRow(rec.row_id, rec.score, rec.valid, rec.gold_label,
                                         rec.domain, rec.base_sample_id)
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        return "row_id", out, {"type": "records", "path": str(path), "sha256": digest,
                               "rows": len(out)}
    from guardrepro.fetch import materialize
    from guardrepro.released import load_released

    lock = spec.resolve(ref["lock"])
    data_dir = materialize(lock, home)
    released = load_released(data_dir, ref["benchmark"])
    out = {
        sid: RefRow(sid, row.pred, row.pred is not None, row.label, row.domain, sid)
        for sid, row in released.by_sample_id.items()
    }
    return "base_sample_id", out, {"type": "released", "lock": str(lock),
                                   "benchmark": ref["benchmark"], "files": dict(released.files),
                                   "rows": len(out)}


def _label(score: float | None, status: str) -> str:
    if status == MISSING:
        return "missing"
    return "invalid" if score is None else str(float(score))


def evaluate(
    spec: GateSpec,
    rows: list[RowResult],
    *,
    key_field: str,
    reference: Mapping[str, RefRow],
    conservative: bool = False,
) -> dict[str, Any]:
    """The gate.json object for the run's expected ``rows`` against ``reference``."""
    local = [r for r in rows if r.variant == "original"]
    if key_field == "row_id":
        # the reference names the gated rows; local rows without a record add
        # nothing (and a grid-mode placeholder has no real row id)
        local = [r for r in local if r.present]
    expected = int(spec.thresholds["expected_rows"])

    def key_of(r: RowResult) -> str:
        return r.row_id if key_field == "row_id" else r.base_sample_id

    by_key = {key_of(r): r for r in local}
    if len(by_key) != len(local):
        raise InputError(f"two local original rows share a {key_field}", field=key_field)
    stray = sorted(k for k in by_key if k not in reference)
    if stray:
        raise InputError(
            f"{len(stray)} local original row(s) have no reference prediction, e.g. "
            f"{key_field} {stray[0]!r}: the run is not over the reference's rows",
            field=key_field,
        )
    if key_field == "row_id":
        keys = list(reference)
        if len(keys) != expected:
            raise InputError(
                f"the reference has {len(keys)} original rows but the spec expects {expected}",
                file=str(spec.path), field="thresholds.expected_rows",
            )
    else:
        keys = list(by_key)
        if len(keys) > expected:
            raise InputError(
                f"the run has {len(keys)} original rows but the spec expects {expected}",
                file=str(spec.path), field="thresholds.expected_rows",
            )
    unknown_missing = expected - len(keys)

    table: list[dict[str, Any]] = []
    for k in keys:
        ref = reference[k]
        loc = by_key.get(k)
        status = loc.status if loc is not None else MISSING
        l_score = loc.score if loc is not None else None
        gold = loc.gold_label if loc is not None else ref.gold_label
        if loc is not None and ref.gold_label is not None and ref.gold_label != loc.gold_label:
            raise InputError(f"{key_field} {k!r}: local gold {loc.gold_label} differs from the "
                             f"reference's {ref.gold_label}", field="gold_label")
        if loc is not None and ref.domain is not None and ref.domain != loc.domain:
            raise InputError(f"{key_field} {k!r}: local domain {loc.domain!r} differs from the "
                             f"reference's {ref.domain!r}", field="domain")
        present = status != MISSING
        strict_agree = present and strict_decision(l_score) == strict_decision(ref.score)
        table.append({
            "key": k,
            "row_id": loc.row_id if loc is not None else k,
            "base_sample_id": loc.base_sample_id if loc is not None else ref.base_sample_id,
            "domain": loc.domain if loc is not None else ref.domain,
            "gold_label": gold,
            "reference_score": ref.score,
            "reference_valid": ref.valid,
            "local_score": l_score,
            "local_status": status,
            "present": present,
            "valid": status == "ok",
            "strict_agree": strict_agree,
            "exact_agree": (status == "ok" and ref.valid and l_score == ref.score),
            "decision_margin": loc.decision_margin if loc is not None else None,
        })
    for i in range(unknown_missing):
        table.append({"key": f"<unknown missing {i}>", "row_id": None, "base_sample_id": None,
                      "domain": None, "gold_label": None, "reference_score": None,
                      "reference_valid": False, "local_score": None, "local_status": MISSING,
                      "present": False, "valid": False, "strict_agree": False,
                      "exact_agree": False, "decision_margin": None})

    def ratio(sub: list[dict[str, Any]], field: str) -> Ratio:
        return Ratio(sum(1 for t in sub if t[field]), len(sub))

    safe = [t for t in table if t["gold_label"] is not None and gold_strict(t["gold_label"]) == 0]
    unsafe = [t for t in table if t["gold_label"] is not None and gold_strict(t["gold_label"]) == 1]
    jointly_valid = [t for t in table if t["valid"] and t["reference_valid"]]
    subsets = {"coverage": (table, "valid"), "strict_agreement": (table, "strict_agree"),
               "strict_agreement_gold_safe": (safe, "strict_agree"),
               "strict_agreement_gold_unsafe": (unsafe, "strict_agree")}
    figures: dict[str, Any] = {
        "rows_present": ratio(table, "present").to_dict(),
        "reference_coverage": ratio(table, "reference_valid").to_dict(),
        "exact_agreement": ratio(jointly_valid, "exact_agree").to_dict(),
    }
    for name, (sub, field) in subsets.items():
        figures[name] = ratio(sub, field).to_dict()
        if conservative:
            figures[name]["interval"] = _interval(sub, field, spec)

    checks = [{
        "name": "all_rows_present",
        "figure": "rows_present",
        "threshold": expected,
        "tested": figures["rows_present"]["numerator"],
        "basis": "count",
        "passed": figures["rows_present"]["numerator"] == expected,
    }]
    for name, key, fig in RATIO_CHECKS:
        f = figures[fig]
        tested = f["interval"]["low"] if conservative and f.get("interval") else f["value"]
        checks.append({
            "name": name,
            "figure": fig,
            "threshold": spec.thresholds[key],
            "tested": tested,
            "basis": "bootstrap_lower_bound" if conservative else "point",
            "passed": tested is not None and tested >= spec.thresholds[key],
        })
    passed = all(c["passed"] for c in checks)

    matrix = [[0] * len(LOCAL_LABELS) for _ in REF_LABELS]
    for t in table:
        if t["key"].startswith("<unknown missing"):
            continue
        i = REF_LABELS.index("invalid" if t["reference_score"] is None
                             else str(float(t["reference_score"])))
        matrix[i][LOCAL_LABELS.index(_label(t["local_score"], t["local_status"]))] += 1

    disagreements = [
        {k: t[k] for k in ("row_id", "base_sample_id", "domain", "gold_label",
                           "reference_score", "local_score", "local_status")}
        | {"reason": "missing" if not t["present"] else "strict"}
        for t in table if not t["strict_agree"]
    ]
    exact_diff = [
        {k: t[k] for k in ("row_id", "base_sample_id", "domain", "gold_label",
                           "reference_score", "local_score")}
        for t in jointly_valid if not t["exact_agree"]
    ]
    return {
        "schema": SCHEMA,
        "spec": spec.to_dict(),
        "conservative": conservative,
        "passed": passed,
        "verdict": verdict(spec.name, passed, figures, checks),
        "figures": figures,
        "checks": checks,
        "confusion": {"rows": "reference score", "columns": "local score",
                      "row_labels": list(REF_LABELS), "column_labels": list(LOCAL_LABELS),
                      "matrix": matrix},
        "disagreements": disagreements,
        "exact_disagreements": exact_diff,
        "rows": [{k: t[k] for k in ("row_id", "base_sample_id", "strict_agree", "exact_agree",
                                    "decision_margin")} for t in table if t["present"]],
    }


def _interval(sub: list[dict[str, Any]], field: str, spec: GateSpec) -> dict[str, Any] | None:
    if not sub:
        return None
    clusters = [t["base_sample_id"] or t["key"] for t in sub]
    strata = [(str(t["domain"]), "?" if t["gold_label"] is None else str(gold_strict(
        t["gold_label"]))) for t in sub]
    return ratio_interval([int(bool(t[field])) for t in sub], [1] * len(sub), clusters, strata,
                          replicates=spec.replicates, seed=spec.seed,
                          order=spec.draw_order).to_dict()


def _frac(f: Mapping[str, Any]) -> str:
    return f"{f['numerator']}/{f['denominator']}"


def verdict(name: str, passed: bool, figures: Mapping[str, Any],
            checks: list[dict[str, Any]]) -> str:
    """One line: PASS/FAIL, the gate name, the headline figures, failed checks."""
    head = (
        f"{'PASS' if passed else 'FAIL'} {name}: rows {_frac(figures['rows_present'])}, "
        f"coverage {_frac(figures['coverage'])}, strict agreement "
        f"{_frac(figures['strict_agreement'])} (safe "
        f"{_frac(figures['strict_agreement_gold_safe'])}, unsafe "
        f"{_frac(figures['strict_agreement_gold_unsafe'])}), exact "
        f"{_frac(figures['exact_agreement'])}"
    )
    failed = [c["name"] for c in checks if not c["passed"]]
    return head + (f"; failed: {', '.join(failed)}" if failed else "")


def format_table(gate: Mapping[str, Any]) -> str:
    lines = [f"{'check':<32} {'figure':<12} {'tested':<10} {'threshold':<10} result"]
    for c in gate["checks"]:
        f = gate["figures"][c["figure"]]
        tested = "-" if c["tested"] is None else (
            str(c["tested"]) if c["basis"] == "count" else f"{c['tested']:.4f}")
        lines.append(f"{c['name']:<32} {_frac(f):<12} {tested:<10} {c['threshold']!s:<10} "
                     f"{'pass' if c['passed'] else 'FAIL'}")
    lines.append(f"{'exact_agreement (reported)':<32} {_frac(gate['figures']['exact_agreement'])}")
    if gate.get("conservative"):
        b = gate["spec"]["bootstrap"]
        lines.append(f"ratio checks test the stratified bootstrap lower bound ({b['replicates']} "
                     f"replicates, seed {b['seed']}, draw order {b['draw_order']})")
    return "\n".join(lines)
