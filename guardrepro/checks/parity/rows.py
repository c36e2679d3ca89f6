"""Per-row parity of a run with reference predictions, on a cohort or a whole split.

Input: a run directory or predictions file (``checks.io.predictions.load_rows``)
and a gate spec (``checks.parity.gate_spec``) whose reference is the released
predictions of one TS-Bench split (or another run's records). A benchmark
cohort (every row of a split, no edits, the row id the base sample id) is
gated like the 64-step cohort: its rows are all ``original``, so the gate's
row set is the whole split.

Output: the gate (``checks.parity.gate.evaluate``, the one gate rule: a missing or
invalid row on either side is a disagreement) with its ``agreement``
(``gate_types.Agreement``, written into its JSON): strict and exact agreement,
each a ``Figure`` with a cluster-bootstrap interval, per domain and per gold
class, the disagreements counted by reason and listed in the reference's row
order. ``compare RUN SPEC`` prints the same figures without a verdict
(``ReferenceComparison``).

Intervals (``checks.core.bootstrap.ratio_interval``, the spec's replicates, seed
and confidence): clusters are interactions (``"<domain>/<id-interaction>"``,
the steps of one agent run) where the reference knows them (released
predictions), else base sample ids; strata are domain x gold strict label, as
in the conservative gate. Released predictions were sampled (temperature
0.1), so a greedy run is not expected to agree on every row; ``attribute``
says how many disagreements the sampler's own spread explains.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from guardrepro.checks.core.bootstrap import ratio_interval
from guardrepro.checks.core.figure import STRATIFIED_BOOTSTRAP, Figure, TableCI
from guardrepro.checks.core.formatting import frac_value
from guardrepro.checks.core.serde import JsonValue, opt
from guardrepro.checks.parity.gate import RefRow, evaluate, reference_rows
from guardrepro.checks.parity.gate_spec import GateSpec, load_spec, with_expected_rows
from guardrepro.checks.parity.gate_types import (
    Agreement,
    AgreementSettings,
    GateDisagreement,
    GateFigures,
    GateResult,
    ReferenceDisagreement,
)
from guardrepro.rundir.read import RunData, RunRows
from guardrepro.schema import strict_decision
from guardrepro.textsafe import shown

SHOWN_ROWS = 20  # disagreeing rows printed in the table (all of them are in the JSON)


def gate_run(path: str | Path | RunData, spec: str | Path | GateSpec, *,
             cohort: str | Path | None = None, home: str | Path | None = None,
             conservative: bool = False) -> GateResult:
    """The gate of a run directory or predictions file (or a run already read,
    ``RunData``) against ``spec``, with its reference description and the
    ``agreement`` section added."""
    from guardrepro.checks.io.predictions import load_rows

    gate_spec = spec if isinstance(spec, GateSpec) else load_spec(spec)
    if isinstance(path, RunData):
        run: RunRows | RunData = path
        path = path.run_dir
    else:
        run = load_rows(path, cohort)
    key_field, reference, ref_info = reference_rows(gate_spec, home)
    gate_spec = with_expected_rows(gate_spec, len(reference))
    result = evaluate(gate_spec, run.rows, key_field=key_field, reference=reference,
                      conservative=conservative)
    result = result.with_extra(reference=ref_info, run_dir=str(path),
                               expected_rows_source=run.expected_source)
    return replace(result, agreement=agreement(result, reference, key_field))


def _gated(result: GateResult, reference: Mapping[str, RefRow], key_field: str,
           ) -> list[dict[str, Any]]:
    """One entry per gated row: key, agreement flags, domain, gold, cluster."""
    def key_of(row_id: str | None, base: str | None) -> str | None:
        return row_id if key_field == "row_id" else base

    reasons = {key_of(d.row_id, d.base_sample_id): d.reason for d in result.disagreement_rows}
    out = []
    for r in result.rows:
        ref = reference[r.row_id if key_field == "row_id" else r.base_sample_id]
        # a strict agreement needs both sides valid; a "strict" disagreement too
        joint = r.strict_agree or reasons.get(ref.key) == "strict"
        out.append({"key": ref.key, "strict": r.strict_agree, "exact": r.exact_agree,
                    "joint": joint, "domain": ref.domain, "gold": ref.gold_label,
                    "cluster": ref.interaction_id or ref.base_sample_id or ref.key})
    present = {e["key"] for e in out}
    for i, d in enumerate(result.disagreement_rows):
        key = key_of(d.row_id, d.base_sample_id)
        if d.reason != "missing" or (key is not None and key in present):
            continue
        known = reference.get(key) if key is not None else None
        out.append({"key": key, "strict": False, "exact": False, "joint": False,
                    "domain": d.domain, "gold": d.gold_label,
                    "cluster": (known.interaction_id if known is not None else None)
                    or key or f"<unknown missing {i}>"})
    return out


def _stratum(e: Mapping[str, Any]) -> str:
    gold = "?" if e["gold"] is None else str(strict_decision(e["gold"]))
    return f"{e['domain']}:{gold}"


def _figure(entries: Sequence[Mapping[str, Any]], field: str, spec: GateSpec) -> Figure:
    interval = None
    if entries:
        iv = ratio_interval([int(bool(e[field])) for e in entries], [1] * len(entries),
                            [str(e["cluster"]) for e in entries],
                            [_stratum(e) for e in entries], replicates=spec.replicates,
                            seed=spec.seed, confidence=spec.confidence)
        interval = TableCI(iv.lower, iv.upper, STRATIFIED_BOOTSTRAP,
                           len({str(e["cluster"]) for e in entries}), strata_count=iv.strata)
    return Figure.of(sum(bool(e[field]) for e in entries), len(entries), interval=interval)


def agreement(result: GateResult, reference: Mapping[str, RefRow], key_field: str,
              ) -> Agreement:
    """Strict and exact agreement with intervals, by domain and gold class, and
    the disagreements by reason in the reference's row order."""
    spec = result.spec
    entries = _gated(result, reference, key_field)
    joint = [e for e in entries if e["joint"]]
    domains = dict.fromkeys(str(e["domain"]) for e in entries if e["domain"])  # row order
    by_domain = {d: _figure([e for e in entries if e["domain"] == d], "strict", spec)
                 for d in domains}
    by_gold = {name: _figure([e for e in entries if e["gold"] is not None
                              and strict_decision(e["gold"]) == label], "strict", spec)
               for name, label in (("gold_safe", 0), ("gold_unsafe", 1))}
    order = {k: i for i, k in enumerate(reference)}

    def key_of(d: GateDisagreement) -> str | None:
        return d.row_id if key_field == "row_id" else d.base_sample_id

    def position(d: GateDisagreement) -> int:
        key = key_of(d)
        return len(order) if key is None else order.get(key, len(order))

    rows = sorted(result.disagreement_rows, key=position)
    reasons: dict[str, int] = {}
    for d in rows:
        reasons[d.reason] = reasons.get(d.reason, 0) + 1
    placed = []
    for d in rows:
        key = key_of(d)
        ref = reference.get(key) if key is not None else None
        placed.append(ReferenceDisagreement(
            **{f.name: getattr(d, f.name) for f in fields(d)},
            interaction_id=None if ref is None else ref.interaction_id,
            reference_index=order.get(key) if key is not None else None))
    settings = AgreementSettings(
        "interaction" if any(r.interaction_id for r in reference.values()) else "base_sample_id",
        "domain:gold strict label", spec.replicates, spec.seed, spec.confidence)
    return Agreement(len(entries), dict(sorted(reasons.items())), tuple(placed), settings,
                     _figure(entries, "strict", spec), _figure(joint, "exact", spec),
                     by_domain, by_gold)


def _fig(f: Figure) -> str:
    ci = "" if f.lower is None else f" [{f.lower:.4f}, {f.upper:.4f}]"
    return frac_value(f) + ci


def format_agreement(a: Agreement) -> str:
    """The agreement section as text: figures with intervals, then the rows."""
    s = a.interval
    lines = [f"agreement over {a.rows} gated rows (intervals: {s.confidence:.0%} cluster "
             f"bootstrap, clusters = {s.clusters}, {s.replicates} replicates)",
             f"  strict                 {_fig(a.strict)}",
             f"  exact (jointly valid)  {_fig(a.exact_jointly_valid)}"]
    for name, f in (*a.strict_by_gold.items(), *a.strict_by_domain.items()):
        lines.append(f"  strict {name:<15} {_fig(f)}")
    reasons = ", ".join(f"{k} {v}" for k, v in a.disagreements_by_reason.items()) or "none"
    lines.append(f"disagreeing rows: {len(a.disagreements)} ({reasons})")
    for d in a.disagreements[:SHOWN_ROWS]:
        reason = f"{d.reason}: invalid on both sides" if d.both_invalid else d.reason
        lines.append(f"  #{d.reference_index} row {shown(d.row_id)} (base "
                     f"{shown(d.base_sample_id)}) {shown(d.domain)} gold "
                     f"{d.gold_label} reference {d.reference_score} local "
                     f"{d.local_score if d.local_status == 'ok' else d.local_status}"
                     f" ({reason})")
    if len(a.disagreements) > SHOWN_ROWS:
        lines.append(f"  ... {len(a.disagreements) - SHOWN_ROWS} more (see --json)")
    return "\n".join(lines)


@dataclass(frozen=True)
class ReferenceComparison(JsonValue):
    """``compare RUN SPEC``: the gate's figures and its agreement, no verdict;
    ``extra`` (written beside the other keys) is what the caller adds, as the
    ``sides`` of the comparison."""

    run: str
    spec: str
    reference: Mapping[str, Any]
    figures: GateFigures
    agreement: Agreement
    extra: Mapping[str, Any] = opt(spread=True, default_factory=dict)

    def with_extra(self, **extra: Any) -> ReferenceComparison:
        return replace(self, extra={**self.extra, **extra})


def compare_with_reference(path: str | Path, spec: str | Path, *,
                           cohort: str | Path | None = None,
                           home: str | Path | None = None) -> ReferenceComparison:
    """``compare RUN SPEC``: the gate's figures and the agreement section,
    without a verdict (measurement, never a failure)."""
    result = gate_run(path, spec, cohort=cohort, home=home)
    assert result.agreement is not None  # gate_run always adds it
    return ReferenceComparison(str(path), str(spec), result.extra["reference"], result.figures,
                               result.agreement)
