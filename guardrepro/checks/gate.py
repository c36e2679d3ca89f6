"""The parity gate: a run's original rows against reference predictions.

Input: a gate spec (TOML, ``checks/*.toml``) and a run's expected rows
(``runio.load_run``). The spec::

    name = "ts-guard-agentdojo"
    rows = "originals"              # the rows gated: variant == "original"
    [reference]                     # one of:
    type = "released"               #   pinned released preds.json, aligned by
    lock = "../locks/toolsafe.toml" #   guardrepro.bench.released (key: base_sample_id)
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
    confidence = 0.95

Paths in the spec are relative to the spec file.

Output: a ``GateResult`` (``evaluate``; frozen, ``to_json()`` is the
``gate.json`` object) with every figure as numerator / denominator / value,
the checks with their thresholds, exact-score agreement among jointly valid
rows, the reference-by-local score confusion, the disagreeing rows, a
one-line verdict and ``causal_interpretation``:
``eligible_for_frozen_local_q8_reproduction_only`` when the gate passes,
``exploratory_local_reproduction_only`` when it fails.

Definitions (docs/PROTOCOL.md, section "Parity gate"):

- The gated row set: with a ``records`` reference, the reference's original
  rows (a local original that is not one of them is an error); with a
  ``released`` reference, the run's expected original rows (each must be a
  released row, else an error). ``expected_rows`` must equal the size of the
  row set; a released-reference run with fewer known rows than
  ``expected_rows`` counts the unknown rest as missing.
- rows present: local rows with a record / expected_rows (must be 1).
- coverage: local rows that parsed (status ok) / expected_rows.
- strict agreement: rows where the local and the reference prediction are
  both valid and their strict decisions (score != 0) are equal /
  expected_rows. A missing or invalid row on either side (a local parse
  error, a null released prediction) is a disagreement. Within gold-safe /
  gold-unsafe: the same over the rows of that gold class. Every threshold is
  tested with >=.
- exact-score agreement: local score == reference score over rows where both
  are valid (reported, not gated).
- ``conservative``: each ratio check tests the lower bound of the stratified
  cluster bootstrap interval (``bootstrap.ratio_interval``; clusters =
  base_sample_id, strata = domain x gold strict label) instead of the point
  estimate. ``expected_rows`` is always an exact count check.

Exit codes of ``guardrepro gate``: 0 pass, 3 fail, 2 unusable input.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, replace
from dataclasses import field as dc_field
from pathlib import Path
from typing import Any

from guardrepro.checks.bootstrap import ratio_interval
from guardrepro.checks.gate_spec import GateSpec, load_spec

__all__ = ["GateResult", "GateSpec", "RefRow", "evaluate", "format_table", "load_spec",
           "reference_rows", "verdict"]
from guardrepro.checks.formatting import frac
from guardrepro.checks.metrics import Ratio, strict_decision
from guardrepro.checks.runio import MISSING, RowResult, load_records
from guardrepro.errors import InputError

SCHEMA = "guardrepro.gate/2"
ELIGIBLE = "eligible_for_frozen_local_q8_reproduction_only"
EXPLORATORY = "exploratory_local_reproduction_only"
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
    from guardrepro.artifacts.fetch import materialize
    from guardrepro.bench.released import load_released

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
) -> GateResult:
    """The gate of the run's expected ``rows`` against ``reference``."""
    expected = int(spec.thresholds["expected_rows"])
    by_key, keys = _gated_rows(spec, rows, key_field, reference, expected)
    table = _row_table(keys, by_key, reference, key_field, expected - len(keys))
    figures = _figures(table, spec, conservative)
    checks = _checks(figures, spec, expected, conservative)
    passed = all(c["passed"] for c in checks)
    jointly_valid = [t for t in table if t["valid"] and t["reference_valid"]]
    disagreements = [
        {k: t[k] for k in ("row_id", "base_sample_id", "domain", "gold_label",
                           "reference_score", "local_score", "local_status")}
        | {"reason": _reason(t)}
        for t in table if not t["strict_agree"]
    ]
    exact_diff = [
        {k: t[k] for k in ("row_id", "base_sample_id", "domain", "gold_label",
                           "reference_score", "local_score")}
        for t in jointly_valid if not t["exact_agree"]
    ]
    return GateResult(
        spec=spec,
        conservative=conservative,
        passed=passed,
        verdict=verdict(spec.name, passed, figures, checks),
        figures=figures,
        checks=tuple(checks),
        confusion=_confusion(table),
        disagreement_rows=tuple(disagreements),
        exact_disagreements=tuple(exact_diff),
        rows=tuple({k: t[k] for k in ("row_id", "base_sample_id", "strict_agree", "exact_agree",
                                      "decision_margin")} for t in table if t["present"]),
    )


def _gated_rows(spec: GateSpec, rows: list[RowResult], key_field: str,
                reference: Mapping[str, RefRow], expected: int,
                ) -> tuple[dict[str, RowResult], list[str]]:
    """(key -> local original row, the gated keys in order); errors on an
    ungatable row set."""
    local = [r for r in rows if r.variant == "original"]
    if key_field == "row_id":
        # the reference names the gated rows; local rows without a record add
        # nothing (and a grid-mode placeholder has no real row id)
        local = [r for r in local if r.present]

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
    return by_key, keys


def _row_table(keys: list[str], by_key: Mapping[str, RowResult], reference: Mapping[str, RefRow],
               key_field: str, unknown_missing: int) -> list[dict[str, Any]]:
    """One comparison row per gated key, then ``unknown_missing`` placeholders."""
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
        strict_agree = (status == "ok" and ref.valid
                        and strict_decision(l_score) == strict_decision(ref.score))
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
    return table


def _ratio(sub: list[dict[str, Any]], field: str) -> Ratio:
    return Ratio(sum(1 for t in sub if t[field]), len(sub))


def _figures(table: list[dict[str, Any]], spec: GateSpec, conservative: bool) -> dict[str, Any]:
    """Every gate figure as numerator / denominator / value (+ interval)."""
    labelled = [t for t in table if t["gold_label"] is not None]
    safe = [t for t in labelled if strict_decision(t["gold_label"]) == 0]
    unsafe = [t for t in labelled if strict_decision(t["gold_label"]) == 1]
    jointly_valid = [t for t in table if t["valid"] and t["reference_valid"]]
    subsets = {"coverage": (table, "valid"), "strict_agreement": (table, "strict_agree"),
               "strict_agreement_gold_safe": (safe, "strict_agree"),
               "strict_agreement_gold_unsafe": (unsafe, "strict_agree")}
    figures: dict[str, Any] = {
        "rows_present": _ratio(table, "present").to_dict(),
        "reference_coverage": _ratio(table, "reference_valid").to_dict(),
        "exact_agreement": _ratio(jointly_valid, "exact_agree").to_dict(),
    }
    for name, (sub, field) in subsets.items():
        figures[name] = _ratio(sub, field).to_dict()
        if conservative:
            figures[name]["interval"] = _interval(sub, field, spec)
    return figures


def _checks(figures: Mapping[str, Any], spec: GateSpec, expected: int,
            conservative: bool) -> list[dict[str, Any]]:
    """The count check and the ratio checks against the spec's thresholds."""
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
        tested = f["interval"]["lower"] if conservative and f.get("interval") else f["value"]
        checks.append({
            "name": name,
            "figure": fig,
            "threshold": spec.thresholds[key],
            "tested": tested,
            "basis": "bootstrap_lower_bound" if conservative else "point",
            "passed": tested is not None and tested >= spec.thresholds[key],
        })
    return checks


def _confusion(table: list[dict[str, Any]]) -> dict[str, Any]:
    """Reference score (rows) by local score (columns) over the known rows."""
    matrix = [[0] * len(LOCAL_LABELS) for _ in REF_LABELS]
    for t in table:
        if t["key"].startswith("<unknown missing"):
            continue
        i = REF_LABELS.index("invalid" if t["reference_score"] is None
                             else str(float(t["reference_score"])))
        matrix[i][LOCAL_LABELS.index(_label(t["local_score"], t["local_status"]))] += 1
    return {"rows": "reference score", "columns": "local score",
            "row_labels": list(REF_LABELS), "column_labels": list(LOCAL_LABELS),
            "matrix": matrix}


def _reason(t: Mapping[str, Any]) -> str:
    if not t["present"]:
        return "missing"
    if not t["valid"]:
        return "local_invalid"
    if not t["reference_valid"]:
        return "reference_invalid"
    return "strict"


@dataclass(frozen=True)
class GateResult:
    """The outcome of a gate; ``to_json()`` is the gate.json object (``extra``
    holds what the caller adds: the reference description, the run path)."""

    spec: GateSpec
    conservative: bool
    passed: bool
    verdict: str
    figures: Mapping[str, Any]
    checks: tuple[dict[str, Any], ...]
    confusion: Mapping[str, Any]
    disagreement_rows: tuple[dict[str, Any], ...]
    exact_disagreements: tuple[dict[str, Any], ...]
    rows: tuple[dict[str, Any], ...]
    extra: Mapping[str, Any] = dc_field(default_factory=dict)

    @property
    def causal_interpretation(self) -> str:
        return ELIGIBLE if self.passed else EXPLORATORY

    def with_extra(self, **extra: Any) -> GateResult:
        return replace(self, extra={**self.extra, **extra})

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, file: str | None = None) -> GateResult:
        """The inverse of ``to_json``: a gate.json object of this schema."""
        if data.get("schema") != SCHEMA:
            raise InputError(f"gate schema {data.get('schema')!r} is not {SCHEMA!r}",
                             file=file, field="schema")
        spec, boot = data["spec"], data["spec"]["bootstrap"]
        known = {"schema", "spec", "conservative", "passed", "causal_interpretation", "verdict",
                 "figures", "checks", "confusion", "disagreements", "exact_disagreements",
                 "rows"}
        return cls(
            spec=GateSpec(name=spec["name"], path=Path(spec["path"]), sha256=spec["sha256"],
                          rows=spec["rows"], reference=spec["reference"],
                          thresholds=spec["thresholds"], replicates=boot["replicates"],
                          seed=boot["seed"], confidence=boot["confidence"]),
            conservative=data["conservative"],
            passed=data["passed"],
            verdict=data["verdict"],
            figures=data["figures"],
            checks=tuple(data["checks"]),
            confusion=data["confusion"],
            disagreement_rows=tuple(data["disagreements"]),
            exact_disagreements=tuple(data["exact_disagreements"]),
            rows=tuple(data["rows"]),
            extra={k: v for k, v in data.items() if k not in known},
        )

    def to_frame(self) -> Any:
        """The gated rows that are present locally: agreement and margin (pandas)."""
        from guardrepro.checks.frames import _pd

        return _pd().DataFrame(list(self.rows), columns=[
            "row_id", "base_sample_id", "strict_agree", "exact_agree", "decision_margin"])

    def disagreements(self) -> Any:
        """Rows whose strict decision disagrees or that are missing, with scores
        and (when present) the local decision margin (pandas)."""
        from guardrepro.checks.frames import _pd

        cols = ["row_id", "base_sample_id", "domain", "gold_label", "reference_score",
                "local_score", "local_status", "reason"]
        rows = _pd().DataFrame(list(self.disagreement_rows), columns=cols)
        return rows.merge(self.to_frame()[["row_id", "decision_margin"]], on="row_id",
                          how="left")

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "spec": self.spec.to_dict(),
            "conservative": self.conservative,
            "passed": self.passed,
            "causal_interpretation": self.causal_interpretation,
            "verdict": self.verdict,
            "figures": dict(self.figures),
            "checks": list(self.checks),
            "confusion": dict(self.confusion),
            "disagreements": list(self.disagreement_rows),
            "exact_disagreements": list(self.exact_disagreements),
            "rows": list(self.rows),
            **self.extra,
        }


def _interval(sub: list[dict[str, Any]], field: str, spec: GateSpec) -> dict[str, Any] | None:
    if not sub:
        return None
    clusters = [t["base_sample_id"] or t["key"] for t in sub]
    strata = [f"{t['domain']}:" + ("?" if t["gold_label"] is None else str(strict_decision(
        t["gold_label"]))) for t in sub]
    iv = ratio_interval([int(bool(t[field])) for t in sub], [1] * len(sub), clusters, strata,
                        replicates=spec.replicates, seed=spec.seed, confidence=spec.confidence)
    return {"point": iv.point, "lower": iv.lower, "upper": iv.upper, "clusters": iv.clusters,
            "strata": "domain:gold_label"}


def verdict(name: str, passed: bool, figures: Mapping[str, Any],
            checks: list[dict[str, Any]]) -> str:
    """One line: PASS/FAIL, the gate name, the headline figures, failed checks."""
    head = (
        f"{'PASS' if passed else 'FAIL'} {name}: rows {frac(figures['rows_present'])}, "
        f"coverage {frac(figures['coverage'])}, strict agreement "
        f"{frac(figures['strict_agreement'])} (safe "
        f"{frac(figures['strict_agreement_gold_safe'])}, unsafe "
        f"{frac(figures['strict_agreement_gold_unsafe'])}), exact "
        f"{frac(figures['exact_agreement'])}"
    )
    failed = [c["name"] for c in checks if not c["passed"]]
    return (head + (f"; failed: {', '.join(failed)}" if failed else "")
            + f"; causal_interpretation: {ELIGIBLE if passed else EXPLORATORY}")


def format_table(gate: Mapping[str, Any]) -> str:
    lines = [f"{'check':<32} {'figure':<12} {'tested':<10} {'threshold':<10} result"]
    for c in gate["checks"]:
        f = gate["figures"][c["figure"]]
        tested = "-" if c["tested"] is None else (
            str(c["tested"]) if c["basis"] == "count" else f"{c['tested']:.4f}")
        lines.append(f"{c['name']:<32} {frac(f):<12} {tested:<10} {c['threshold']!s:<10} "
                     f"{'pass' if c['passed'] else 'FAIL'}")
    lines.append(f"{'exact_agreement (reported)':<32} {frac(gate['figures']['exact_agreement'])}")
    if gate.get("conservative"):
        b = gate["spec"]["bootstrap"]
        lines.append(f"ratio checks test the stratified bootstrap lower bound ({b['replicates']} "
                     f"replicates, seed {b['seed']}, confidence {b['confidence']})")
    return "\n".join(lines)
