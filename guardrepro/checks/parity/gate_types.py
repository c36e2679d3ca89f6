"""The typed result of the parity gate (``checks.parity.gate.evaluate``).

Input: the figures, checks and rows the gate computes, or a ``gate.json``
object read back (``GateResult.from_dict``).

Output: frozen values whose ``to_dict()`` is exactly the ``gate.json``
object (schema ``guardrepro.gate/2``; ``to_json()`` is its text):
``GateResult`` holding ``GateFigures`` (each a ``checks.core.figure.Figure`` in
the ratio shape, with a bootstrap interval when the gate ran
conservatively), ``GateCheck`` rows, the ``ScoreConfusion`` of reference by
local score, ``GateDisagreement`` and ``ExactDisagreement`` rows and one
``GateRow`` per gated row present locally, and (``checks.parity.rows.gate_run``)
the ``Agreement`` section: strict and exact agreement with intervals, by
domain and gold class (``Figure`` in the ``ratio_clustered`` shape), and the
``ReferenceDisagreement`` rows in the reference's order; all but
``GateResult`` are (de)serialised by ``checks.core.serde`` from their fields.

Invariants: ``from_dict(to_dict())`` rebuilds an equal value, and
``to_dict(from_dict(data))`` writes ``data`` back unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from dataclasses import field as dc_field
from typing import Any

from guardrepro.checks.core.figure import (
    CI,
    RATIO,
    RATIO_CLUSTERED,
    STRATIFIED_BOOTSTRAP,
    Figure,
)
from guardrepro.checks.core.serde import (
    JsonValue,
    as_json_value,
    from_json_value,
    load_json_value,
    opt,
)
from guardrepro.checks.core.tables import pandas
from guardrepro.checks.parity.gate_spec import GateSpec
from guardrepro.errors import InputError

SCHEMA = "guardrepro.gate/2"
ELIGIBLE = "eligible_for_frozen_local_q8_reproduction_only"
EXPLORATORY = "exploratory_local_reproduction_only"


STRATA = "domain:gold_label"


def gate_interval(lower: float | None, upper: float | None, clusters: int) -> CI:
    """The stratified cluster-bootstrap interval of one ratio figure (clusters 0:
    an empty row set, written null)."""
    return CI(lower, upper, STRATIFIED_BOOTSTRAP, clusters, STRATA)


@dataclass(frozen=True)
class GateFigures(JsonValue):
    """Every figure of a gate (docs/PROTOCOL.md, "Parity gate"), each a ``Figure``
    written in the ratio shape; a conservative gate's ratio figures carry an
    interval."""

    rows_present: Figure = opt(shape=RATIO)
    reference_coverage: Figure = opt(shape=RATIO)
    exact_agreement: Figure = opt(shape=RATIO)
    coverage: Figure = opt(shape=RATIO)
    strict_agreement: Figure = opt(shape=RATIO)
    strict_agreement_gold_safe: Figure = opt(shape=RATIO)
    strict_agreement_gold_unsafe: Figure = opt(shape=RATIO)

    def figure(self, name: str) -> Figure:
        """The figure a check names (``GateCheck.figure``)."""
        if name not in self.names():
            raise InputError(f"no gate figure {name!r}", field="figure")
        value: Figure = getattr(self, name)
        return value

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))


@dataclass(frozen=True)
class GateCheck(JsonValue):
    """One check: the tested number against its threshold (tested with >=,
    the count check with ==); ``basis`` is count, point or
    bootstrap_lower_bound."""

    name: str
    figure: str
    threshold: float
    tested: float | None
    basis: str
    passed: bool


@dataclass(frozen=True)
class ScoreConfusion(JsonValue):
    """Counts of reference score (rows) by local score (columns)."""

    row_labels: tuple[str, ...]
    column_labels: tuple[str, ...]
    matrix: tuple[tuple[int, ...], ...]
    rows: str = "reference score"
    columns: str = "local score"


@dataclass(frozen=True)
class ExactDisagreement(JsonValue):
    """A jointly valid row whose exact scores differ (reported, not gated)."""

    row_id: str | None
    base_sample_id: str | None
    domain: str | None
    gold_label: float | None
    reference_score: float | None
    local_score: float | None


def strict_agrees(local_valid: bool, reference_valid: bool, local_decision: int,
                  reference_decision: int) -> bool:
    """The gate's rule, the one meaning of strict agreement everywhere: both
    sides valid and their strict decisions equal (an invalid or missing row on
    either side is a disagreement, even when both fail closed to 1)."""
    return local_valid and reference_valid and local_decision == reference_decision


def disagreement_reason(present: bool, local_valid: bool, reference_valid: bool) -> str:
    """Why a row disagrees under the gate's rule: ``missing``, ``local_invalid``,
    ``reference_invalid`` or ``strict`` (both valid, decisions differ)."""
    if not present:
        return "missing"
    if not local_valid:
        return "local_invalid"
    if not reference_valid:
        return "reference_invalid"
    return "strict"


@dataclass(frozen=True)
class GateDisagreement(ExactDisagreement):
    """A gated row whose strict decision disagrees, or that is missing or
    invalid on either side; ``reason`` says which."""

    local_status: str = ""
    reason: str = ""

    @property
    def both_invalid(self) -> bool:
        """Invalid on both sides (no parsed score locally or in the reference): the
        gate's fail-closed rule counts it against agreement, but no two decisions
        differ."""
        return self.reason == "local_invalid" and self.reference_score is None

    def label(self) -> str:
        """The row as every verb names it: its row id, with its base beside it."""
        return f"row {self.row_id} (base {self.base_sample_id})"


@dataclass(frozen=True)
class ReferenceDisagreement(GateDisagreement):
    """A disagreement placed in the reference: its interaction (None: the
    reference does not know it) and its 0-based position in the reference."""

    interaction_id: str | None = None
    reference_index: int | None = None


@dataclass(frozen=True)
class AgreementSettings(JsonValue):
    """How the agreement intervals were made: what a cluster is, the strata,
    replicates, seed and confidence."""

    clusters: str
    strata: str
    replicates: int
    seed: int
    confidence: float


@dataclass(frozen=True)
class Agreement(JsonValue):
    """The ``agreement`` section of a gate against reference predictions
    (``checks.parity.rows.agreement``)."""

    rows: int
    disagreements_by_reason: Mapping[str, int]
    disagreements: tuple[ReferenceDisagreement, ...]
    interval: AgreementSettings
    strict: Figure = opt(shape=RATIO_CLUSTERED)
    exact_jointly_valid: Figure = opt(shape=RATIO_CLUSTERED)
    strict_by_domain: Mapping[str, Figure] = opt(shape=RATIO_CLUSTERED)
    strict_by_gold: Mapping[str, Figure] = opt(shape=RATIO_CLUSTERED)


@dataclass(frozen=True)
class GateRow(JsonValue):
    """A gated row present locally: its agreement and decision margin."""

    row_id: str
    base_sample_id: str
    strict_agree: bool
    exact_agree: bool
    decision_margin: float | None


@dataclass(frozen=True)
class GateResult(JsonValue):
    """The outcome of a gate; ``to_dict()`` is the gate.json object, ``to_json()``
    its text (``extra`` holds what the caller adds: the reference description,
    the run path; ``agreement`` the section ``gate_run`` adds, None without it)."""

    spec: GateSpec
    conservative: bool
    passed: bool
    verdict: str
    figures: GateFigures
    checks: tuple[GateCheck, ...]
    confusion: ScoreConfusion
    disagreement_rows: tuple[GateDisagreement, ...]
    exact_disagreements: tuple[ExactDisagreement, ...]
    rows: tuple[GateRow, ...]
    extra: Mapping[str, Any] = dc_field(default_factory=dict)
    agreement: Agreement | None = None

    @property
    def causal_interpretation(self) -> str:
        return ELIGIBLE if self.passed else EXPLORATORY

    @property
    def missing_rows(self) -> int:
        """Gated rows with no local record or prediction (each an invalid
        disagreement in the ratio figures)."""
        present = self.figures.rows_present
        return int(present.denominator - present.count)

    @property
    def truncated_rows(self) -> int:
        """Gated rows whose local generation reached ``max_new_tokens`` before a
        verdict was read (status ``truncated``: each an invalid disagreement)."""
        return sum(1 for d in self.disagreement_rows if d.local_status == "truncated")

    @property
    def reference(self) -> Mapping[str, Any] | None:
        """The reference description the caller added (``reference_rows``), if any."""
        ref = self.extra.get("reference")
        return ref if isinstance(ref, Mapping) else None

    def with_extra(self, **extra: Any) -> GateResult:
        return replace(self, extra={**self.extra, **extra})

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, file: str | None = None) -> GateResult:
        """The inverse of ``to_dict``: a gate.json object of this schema."""
        if data.get("schema") != SCHEMA:
            raise InputError(f"gate schema {data.get('schema')!r} is not {SCHEMA!r}",
                             file=file, field="schema")
        known = {"schema", "spec", "conservative", "passed", "causal_interpretation", "verdict",
                 "missing_rows", "truncated_rows", "figures", "checks", "confusion",
                 "disagreements", "exact_disagreements", "rows", "agreement"}
        return cls(
            spec=load_json_value(GateSpec, data["spec"], file=file, at="spec"),
            conservative=data["conservative"],
            passed=data["passed"],
            verdict=data["verdict"],
            figures=GateFigures.from_dict(data["figures"]),
            checks=from_json_value(tuple[GateCheck, ...], data["checks"]),
            confusion=ScoreConfusion.from_dict(data["confusion"]),
            disagreement_rows=from_json_value(tuple[GateDisagreement, ...],
                                              data["disagreements"]),
            exact_disagreements=from_json_value(tuple[ExactDisagreement, ...],
                                                data["exact_disagreements"]),
            rows=from_json_value(tuple[GateRow, ...], data["rows"]),
            extra={k: v for k, v in data.items() if k not in known},
            agreement=(None if data.get("agreement") is None
                       else Agreement.from_dict(data["agreement"])),
        )

    def to_frame(self) -> Any:
        """The gated rows that are present locally: agreement and margin (pandas)."""
        return pandas().DataFrame([r.to_dict() for r in self.rows], columns=[
            "row_id", "base_sample_id", "strict_agree", "exact_agree", "decision_margin"])

    def disagreements(self) -> Any:
        """Rows whose strict decision disagrees or that are missing, with scores
        and (when present) the local decision margin (pandas)."""
        cols = ["row_id", "base_sample_id", "domain", "gold_label", "reference_score",
                "local_score", "local_status", "reason"]
        rows = pandas().DataFrame([d.to_dict() for d in self.disagreement_rows], columns=cols)
        return rows.merge(self.to_frame()[["row_id", "decision_margin"]], on="row_id",
                          how="left")

    def to_dict(self) -> dict[str, Any]:
        """The gate.json object."""
        return {
            "schema": SCHEMA,
            "spec": self.spec.to_dict(),
            "conservative": self.conservative,
            "passed": self.passed,
            "causal_interpretation": self.causal_interpretation,
            "verdict": self.verdict,
            "missing_rows": self.missing_rows,
            "truncated_rows": self.truncated_rows,
            "figures": self.figures.to_dict(),
            "checks": as_json_value(self.checks),
            "confusion": self.confusion.to_dict(),
            "disagreements": as_json_value(self.disagreement_rows),
            "exact_disagreements": as_json_value(self.exact_disagreements),
            "rows": as_json_value(self.rows),
            **({} if self.agreement is None else {"agreement": self.agreement.to_dict()}),
            **self.extra,
        }
