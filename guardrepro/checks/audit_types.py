"""The typed results of the benchmark audits and of the audit ladder.

Input: the figures ``checks.audit`` (interaction weighting, tool-name lookup),
``checks.association`` (rung 2) and ``checks.ladder`` compute.

Output: frozen values whose ``to_json()`` is exactly the JSON the audit verbs
write (``guardrepro audit ... --json`` / ``--out``): ``Rung`` and ``Ladder``;
``InteractionAudit``; ``ToolLookupAudit`` with its ``LookupScore``,
``SplitScore`` and ``SplitEvaluation`` values; ``AssociationResult`` with its
``BlockRate``, ``RuleSummary``, ``WithinTool``, ``SafeMarkerWithinTool`` and
``MarkerInterval`` values.

Invariants: every field name is its JSON key; ``to_json`` of a field is the
field's own ``to_json()`` (dataclasses), a dict (mappings) or a list
(tuples); what a caller adds to an audit (the benchmark, the predictions'
source) lives in ``extra`` and is written after the audit's own keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from guardrepro.checks.metrics import Cells, ConfusionSummary, Ratio


def to_json_value(value: Any) -> Any:
    """A field's JSON: its ``to_json()``, a dict of a mapping, a list of a tuple."""
    if hasattr(value, "to_json"):
        return value.to_json()
    if isinstance(value, Mapping):
        return {k: to_json_value(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [to_json_value(v) for v in value]
    return value


class _Fields:
    """``to_json()`` of a dataclass: one key per field, ``extra`` merged last."""

    def to_json(self) -> dict[str, Any]:
        out = {f.name: to_json_value(getattr(self, f.name))
               for f in fields(self)  # type: ignore[arg-type]
               if f.name != "extra"}
        out.update(getattr(self, "extra", {}))
        return out

    def with_extra(self, **extra: Any) -> Any:
        return replace(self, extra={**getattr(self, "extra", {}), **extra})  # type: ignore


@dataclass(frozen=True)
class Rung(_Fields):
    """One rung of the audit ladder: what it may and may not be taken to show."""

    rung: int
    name: str
    verb: str
    may_show: str
    may_not_show: str


@dataclass(frozen=True)
class Ladder(_Fields):
    rungs: tuple[Rung, ...]


@dataclass(frozen=True)
class MajoritySummary(ConfusionSummary):
    """The interaction-majority confusion; its coverage counts interactions."""

    coverage_unit: str = "interactions whose rows all have a prediction"

    def to_json(self) -> dict[str, Any]:
        return {**super().to_json(), "coverage_unit": self.coverage_unit}


@dataclass(frozen=True)
class InteractionAudit(_Fields):
    """Row, equal-interaction and interaction-majority strict metrics."""

    rows: int
    interactions: int
    row: ConfusionSummary
    equal_interaction: ConfusionSummary
    interaction_majority: MajoritySummary
    definitions: Mapping[str, str]
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class LookupScore:
    """Strict F1 and accuracy of lookup predictions over some rows."""

    rows: int
    f1: Ratio
    accuracy: Ratio
    cells: Cells

    def to_json(self) -> dict[str, Any]:
        return {"rows": self.rows, "f1": self.f1.to_dict(), "accuracy": self.accuracy.to_dict(),
                "confusion": self.cells.to_json()}


@dataclass(frozen=True)
class SplitScore(LookupScore):
    """A held-out split's score with its training facts."""

    train_rows: int = 0
    unseen_key_rows: int = 0
    global_majority: int = 0

    def to_json(self) -> dict[str, Any]:
        return {**super().to_json(), "train_rows": self.train_rows,
                "unseen_key_rows": self.unseen_key_rows, "global_majority": self.global_majority}


@dataclass(frozen=True)
class SplitEvaluation:
    """Held-out predictions pooled over the splits, and per split."""

    pooled: LookupScore
    seen_tool_coverage: Ratio
    cross_domain_tool_row_coverage: Ratio
    per_split: Mapping[str, SplitScore]
    mean_f1_over_splits: float | None
    splits_with_defined_f1: int
    folds: int | None = None  # grouped CV only

    def to_json(self) -> dict[str, Any]:
        out = {f.name: to_json_value(getattr(self, f.name)) for f in fields(self)
               if f.name != "folds"}
        if self.folds is not None:
            out["folds"] = self.folds
        return out


@dataclass(frozen=True)
class ToolLookupAudit(_Fields):
    """Rung 1: the tool-name lookup diagnostic."""

    rows: int
    interactions: int
    distinct_keys: int
    empty_key_rows: int
    parse_status_counts: Mapping[str, int]
    in_sample: LookupScore
    grouped_cv: SplitEvaluation
    leave_one_domain_out: SplitEvaluation | None
    interpretation: Rung
    definitions: Mapping[str, str]
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class GuardLookup(_Fields):
    """Rung 1 on a guard's own predictions (``checks.audit.guard_lookup``).

    ``decision_lookup``: the same lookup fitted to the guard's strict
    decisions (fail-closed) instead of the gold labels, held out by grouped
    CV and by domain: how well the tool name alone predicts this guard.
    ``guard_by_domain``: the guard's strict F1 / accuracy against gold per
    domain. ``vs_label_lookup``: per evaluation, the agreement of the guard's
    decisions with the gold-fitted lookup's held-out predictions, and the
    guard's accuracy on the rows the lookup gets right and wrong."""

    source: str
    rows: int
    valid: int
    missing: int
    guard: LookupScore
    guard_by_domain: Mapping[str, LookupScore]
    decision_lookup: Mapping[str, SplitEvaluation]
    vs_label_lookup: Mapping[str, Mapping[str, Ratio]]
    interpretation: Rung
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class BlockRate:
    """Blocked rows / rows (invalid rows block), and how many were invalid."""

    blocked: int
    rows: int
    invalid: int

    @property
    def ratio(self) -> Ratio:
        return Ratio(self.blocked, self.rows)

    def to_json(self) -> dict[str, Any]:
        return {**self.ratio.to_dict(), "invalid": self.invalid}


@dataclass(frozen=True)
class RuleSummary(_Fields):
    """The frozen nuisance rule against gold and against the guard's decisions."""

    rows: int
    marker_rows: int
    side_effect_rows: int
    rule_positive_rows: int
    vs_gold: ConfusionSummary
    marker_alone_vs_gold: ConfusionSummary
    vs_guard: ConfusionSummary
    guard_invalid_rows: int
    agreement_with_guard: Ratio
    agreement_cells: Mapping[str, int]

    def to_json(self) -> dict[str, Any]:
        out = super().to_json()
        del out["guard_invalid_rows"]
        out["vs_guard"]["guard_invalid_rows"] = self.guard_invalid_rows
        return out


@dataclass(frozen=True)
class ClassContrast(_Fields):
    """Within one tool key: unsafe minus safe block rate."""

    tool: str | None
    unsafe: BlockRate
    safe: BlockRate
    difference: float


@dataclass(frozen=True)
class WithinTool(_Fields):
    safe_rows_counted: str
    tool_keys: int
    tools_with_both_classes: int
    unsafe: BlockRate
    safe: BlockRate
    pooled_difference: float | None
    macro_difference: float | None
    per_tool: tuple[ClassContrast, ...]


@dataclass(frozen=True)
class MarkerContrast(_Fields):
    """Within one tool key, gold-safe rows: marker present minus absent block rate."""

    tool: str | None
    marker_present: BlockRate
    marker_absent: BlockRate
    difference: float


@dataclass(frozen=True)
class SafeMarkerWithinTool(_Fields):
    safe_rows: int
    tools_with_both_marker_states: int
    marker_present: BlockRate
    marker_absent: BlockRate
    pooled_difference: float | None
    macro_difference: float | None
    per_tool: tuple[MarkerContrast, ...]


@dataclass(frozen=True)
class MarkerInterval(_Fields):
    """The cluster-bootstrap interval of the pooled safe-row marker difference;
    ``reason`` (written only when set) says why it is undefined."""

    rows: int
    clusters: int
    replicates: int
    seed: int
    marker_present: Ratio
    marker_absent: Ratio
    point: float | None
    lower: float | None
    upper: float | None
    undefined_replicates: int | None
    method: str
    reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        out = super().to_json()
        if self.reason is None:
            del out["reason"]
        return out


@dataclass(frozen=True)
class AssociationResult(_Fields):
    """Rung 2 on one benchmark's rows and one prediction per row."""

    benchmark: str
    rows: int
    interactions: int
    guard: ConfusionSummary
    nuisance_rule: RuleSummary
    block_rate_strata: Mapping[str, BlockRate]
    within_tool: WithinTool
    within_tool_marker_safe_only: WithinTool
    safe_marker_within_tool: SafeMarkerWithinTool
    safe_marker_interval: MarkerInterval
    interpretation: Rung
    definitions: Mapping[str, str]
    extra: Mapping[str, Any] = field(default_factory=dict)
