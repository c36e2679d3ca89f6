"""The typed result of the parity gate (``checks.gate.evaluate``).

Input: the figures, checks and rows the gate computes, or a ``gate.json``
object read back (``GateResult.from_json``).

Output: frozen values whose ``to_json()`` is exactly the ``gate.json``
object (schema ``guardrepro.gate/2``): ``GateResult`` holding ``GateFigures``
(each a ``GateFigure``: numerator / denominator / value, with a bootstrap
``GateInterval`` when the gate ran conservatively), ``GateCheck`` rows, the
``ScoreConfusion`` of reference by local score, ``GateDisagreement`` and
``ExactDisagreement`` rows and one ``GateRow`` per gated row present locally.

Invariants: ``from_json(to_json())`` rebuilds an equal value, and
``to_json(from_json(data))`` writes ``data`` back unchanged; a figure's value
is recomputed from its counts, never stored apart from them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from dataclasses import field as dc_field
from pathlib import Path
from typing import Any

from guardrepro.checks.gate_spec import GateSpec
from guardrepro.checks.metrics import Ratio
from guardrepro.checks.tables import pandas
from guardrepro.errors import InputError

SCHEMA = "guardrepro.gate/2"
ELIGIBLE = "eligible_for_frozen_local_q8_reproduction_only"
EXPLORATORY = "exploratory_local_reproduction_only"


@dataclass(frozen=True)
class GateInterval:
    """The stratified cluster-bootstrap interval of one ratio figure."""

    point: float | None
    lower: float | None
    upper: float | None
    clusters: int
    strata: str = "domain:gold_label"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class GateFigure:
    """A gate figure as numerator / denominator (value = their ratio).

    ``bootstrapped``: the figure carries an ``interval`` entry (a conservative
    gate's ratio figures; ``interval`` is None for an empty row set)."""

    numerator: int
    denominator: int
    interval: GateInterval | None = None
    bootstrapped: bool = False

    @property
    def value(self) -> float | None:
        return Ratio(self.numerator, self.denominator).value

    def to_json(self) -> dict[str, Any]:
        out = Ratio(self.numerator, self.denominator).to_dict()
        if self.bootstrapped:
            out["interval"] = None if self.interval is None else self.interval.to_json()
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> GateFigure:
        iv = data.get("interval")
        return cls(data["numerator"], data["denominator"],
                   None if iv is None else GateInterval(**iv), "interval" in data)


@dataclass(frozen=True)
class GateFigures:
    """Every figure of a gate (docs/PROTOCOL.md, "Parity gate")."""

    rows_present: GateFigure
    reference_coverage: GateFigure
    exact_agreement: GateFigure
    coverage: GateFigure
    strict_agreement: GateFigure
    strict_agreement_gold_safe: GateFigure
    strict_agreement_gold_unsafe: GateFigure

    def figure(self, name: str) -> GateFigure:
        """The figure a check names (``GateCheck.figure``)."""
        if name not in self.names():
            raise InputError(f"no gate figure {name!r}", field="figure")
        value: GateFigure = getattr(self, name)
        return value

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    def to_json(self) -> dict[str, Any]:
        return {name: self.figure(name).to_json() for name in self.names()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> GateFigures:
        return cls(**{name: GateFigure.from_json(data[name]) for name in cls.names()})


@dataclass(frozen=True)
class GateCheck:
    """One check: the tested number against its threshold (tested with >=,
    the count check with ==); ``basis`` is count, point or
    bootstrap_lower_bound."""

    name: str
    figure: str
    threshold: float
    tested: float | None
    basis: str
    passed: bool

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "figure": self.figure, "threshold": self.threshold,
                "tested": self.tested, "basis": self.basis, "passed": self.passed}


@dataclass(frozen=True)
class ScoreConfusion:
    """Counts of reference score (rows) by local score (columns)."""

    row_labels: tuple[str, ...]
    column_labels: tuple[str, ...]
    matrix: tuple[tuple[int, ...], ...]
    rows: str = "reference score"
    columns: str = "local score"

    def to_json(self) -> dict[str, Any]:
        return {"rows": self.rows, "columns": self.columns, "row_labels": list(self.row_labels),
                "column_labels": list(self.column_labels),
                "matrix": [list(r) for r in self.matrix]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ScoreConfusion:
        return cls(tuple(data["row_labels"]), tuple(data["column_labels"]),
                   tuple(tuple(r) for r in data["matrix"]), data["rows"], data["columns"])


@dataclass(frozen=True)
class ExactDisagreement:
    """A jointly valid row whose exact scores differ (reported, not gated)."""

    row_id: str | None
    base_sample_id: str | None
    domain: str | None
    gold_label: float | None
    reference_score: float | None
    local_score: float | None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


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


@dataclass(frozen=True)
class GateRow:
    """A gated row present locally: its agreement and decision margin."""

    row_id: str
    base_sample_id: str
    strict_agree: bool
    exact_agree: bool
    decision_margin: float | None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class GateResult:
    """The outcome of a gate; ``to_json()`` is the gate.json object (``extra``
    holds what the caller adds: the reference description, the run path)."""

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

    @property
    def causal_interpretation(self) -> str:
        return ELIGIBLE if self.passed else EXPLORATORY

    @property
    def missing_rows(self) -> int:
        """Gated rows with no local record or prediction (each an invalid
        disagreement in the ratio figures)."""
        present = self.figures.rows_present
        return present.denominator - present.numerator

    @property
    def reference(self) -> Mapping[str, Any] | None:
        """The reference description the caller added (``reference_rows``), if any."""
        ref = self.extra.get("reference")
        return ref if isinstance(ref, Mapping) else None

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
                 "missing_rows", "figures", "checks", "confusion", "disagreements",
                 "exact_disagreements", "rows"}
        return cls(
            spec=GateSpec(name=spec["name"], path=Path(spec["path"]), sha256=spec["sha256"],
                          rows=spec["rows"], reference=spec["reference"],
                          thresholds=spec["thresholds"], replicates=boot["replicates"],
                          seed=boot["seed"], confidence=boot["confidence"]),
            conservative=data["conservative"],
            passed=data["passed"],
            verdict=data["verdict"],
            figures=GateFigures.from_json(data["figures"]),
            checks=tuple(GateCheck(**c) for c in data["checks"]),
            confusion=ScoreConfusion.from_json(data["confusion"]),
            disagreement_rows=tuple(GateDisagreement(**d) for d in data["disagreements"]),
            exact_disagreements=tuple(ExactDisagreement(**d)
                                      for d in data["exact_disagreements"]),
            rows=tuple(GateRow(**r) for r in data["rows"]),
            extra={k: v for k, v in data.items() if k not in known},
        )

    def to_frame(self) -> Any:
        """The gated rows that are present locally: agreement and margin (pandas)."""
        return pandas().DataFrame([r.to_json() for r in self.rows], columns=[
            "row_id", "base_sample_id", "strict_agree", "exact_agree", "decision_margin"])

    def disagreements(self) -> Any:
        """Rows whose strict decision disagrees or that are missing, with scores
        and (when present) the local decision margin (pandas)."""
        cols = ["row_id", "base_sample_id", "domain", "gold_label", "reference_score",
                "local_score", "local_status", "reason"]
        rows = pandas().DataFrame([d.to_json() for d in self.disagreement_rows], columns=cols)
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
            "missing_rows": self.missing_rows,
            "figures": self.figures.to_json(),
            "checks": [c.to_json() for c in self.checks],
            "confusion": self.confusion.to_json(),
            "disagreements": [d.to_json() for d in self.disagreement_rows],
            "exact_disagreements": [d.to_json() for d in self.exact_disagreements],
            "rows": [r.to_json() for r in self.rows],
            **self.extra,
        }
