"""The typed results of the benchmark audits and of the audit ladder.

Input: the figures ``checks.audits.benchmark`` (interaction weighting, tool-name lookup),
``checks.audits.association`` (rung 2) and ``checks.audits.ladder`` compute.

Output: frozen values whose ``to_dict()`` is exactly the JSON the audit verbs
write (``guardrepro audit ... --json`` / ``--out``): ``Rung`` and ``Ladder``;
``InteractionAudit``; ``ToolLookupAudit`` with its ``LookupScore``,
``SplitScore`` and ``SplitEvaluation`` values; ``AssociationResult`` with its
``BlockRate``, ``RuleSummary``, ``WithinTool``, ``SafeMarkerWithinTool`` and
``MarkerInterval`` values.

Invariants: the JSON is derived from the fields by ``checks.core.serde`` (every
field name is its JSON key unless ``opt(key=...)`` says otherwise; figures
are ``checks.core.figure.Figure`` in the ratio shape); what a caller adds to an
audit (the benchmark, the predictions' source) lives in ``extra`` and is
written after the audit's own keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from guardrepro.checks.core.figure import RATIO, Figure, encode
from guardrepro.checks.core.metrics import Cells, ConfusionSummary
from guardrepro.checks.core.serde import JsonValue, opt


class _Fields(JsonValue):
    """A result whose ``extra`` (what the caller adds) is written after its own keys."""

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


@dataclass(frozen=True)
class InteractionAudit(_Fields):
    """Row, equal-interaction and interaction-majority strict metrics."""

    rows: int
    interactions: int
    row: ConfusionSummary
    equal_interaction: ConfusionSummary
    interaction_majority: MajoritySummary
    definitions: Mapping[str, str]
    extra: Mapping[str, Any] = opt(spread=True, default_factory=dict)


@dataclass(frozen=True)
class LookupScore(JsonValue):
    """Strict F1 and accuracy of lookup predictions over some rows."""

    rows: int
    f1: Figure = opt(shape=RATIO)
    accuracy: Figure = opt(shape=RATIO)
    cells: Cells = opt(key="confusion")


@dataclass(frozen=True)
class SplitScore(LookupScore):
    """A held-out split's score with its training facts."""

    train_rows: int = 0
    unseen_key_rows: int = 0
    global_majority: int = 0


@dataclass(frozen=True)
class SplitEvaluation(JsonValue):
    """Held-out predictions pooled over the splits, and per split."""

    pooled: LookupScore
    seen_tool_coverage: Figure = opt(shape=RATIO)
    cross_domain_tool_row_coverage: Figure = opt(shape=RATIO)
    per_split: Mapping[str, SplitScore] = opt()
    mean_f1_over_splits: float | None = opt()
    splits_with_defined_f1: int = opt()
    folds: int | None = None  # grouped CV only; written only when set

    def _dump(self, out: dict[str, Any]) -> dict[str, Any]:
        if self.folds is None:
            del out["folds"]
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
    extra: Mapping[str, Any] = opt(spread=True, default_factory=dict)


@dataclass(frozen=True)
class GuardLookup(_Fields):
    """Rung 1 on a guard's own predictions (``checks.audits.benchmark.guard_lookup``).

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
    vs_label_lookup: Mapping[str, Mapping[str, Figure]] = opt(shape=RATIO)
    interpretation: Rung = opt()
    extra: Mapping[str, Any] = opt(spread=True, default_factory=dict)


@dataclass(frozen=True)
class BlockRate(JsonValue):
    """Blocked rows / rows (invalid rows block), and how many were invalid."""

    blocked: int
    rows: int
    invalid: int

    @property
    def ratio(self) -> Figure:
        return Figure.of(self.blocked, self.rows)

    def _dump(self, out: dict[str, Any]) -> dict[str, Any]:
        """Written as the ratio figure plus ``invalid``."""
        return {**encode(self.ratio, RATIO), "invalid": self.invalid}


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
    agreement_with_guard: Figure = opt(shape=RATIO)
    agreement_cells: Mapping[str, int] = opt()

    def _dump(self, out: dict[str, Any]) -> dict[str, Any]:
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
    marker_present: Figure = opt(shape=RATIO)
    marker_absent: Figure = opt(shape=RATIO)
    point: float | None = opt()
    lower: float | None = opt()
    upper: float | None = opt()
    undefined_replicates: int | None = opt()
    method: str = opt()
    reason: str | None = None

    def _dump(self, out: dict[str, Any]) -> dict[str, Any]:
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
    extra: Mapping[str, Any] = opt(spread=True, default_factory=dict)
