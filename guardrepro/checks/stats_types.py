"""The typed result of the run statistics (``checks.stats.compute_stats``).

Input: the figures ``compute_stats`` computes, or a ``stats.json`` object read
back (``StatsResult.from_json``).

Output: frozen values whose ``to_json()`` is exactly the ``stats.json``
object (schema ``guardrepro.stats/2``; contract in ``checks.stats``):
``StatsResult`` holding the interval ``Settings``, a ``RowsSummary``, one
``VariantStats`` per variant (a strict ``ConfusionSummary`` and status
counts), one ``EditStats`` per edit (two ``ViewStats`` of ``Statistic``
values with their ``FlipCounts``, and the ``ExactScore`` extra) and the
labelled ``StatsExtras`` (``PlaceboCorrected``, ``RunToRun``).

Invariants: ``from_json(to_json())`` rebuilds an equal value; a ratio's value
is recomputed from its counts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from guardrepro.checks.bootstrap import BATCH, DEFAULT_CONFIDENCE, DEFAULT_REPLICATES, DEFAULT_SEED
from guardrepro.checks.metrics import ConfusionSummary, Ratio
from guardrepro.checks.tables import stats_frame, write_table
from guardrepro.errors import InputError

SCHEMA = "guardrepro.stats/2"
VIEWS = ("all_pairs", "valid_both_only")
STATISTICS = ("flip_rate", "safe_to_unsafe", "unsafe_to_safe", "delta_accuracy",
              "delta_sensitivity", "delta_specificity")
COUNTED = ("flip_rate", "safe_to_unsafe", "unsafe_to_safe")
STRATA = "domain:gold_label"


def stratified(view: str, statistic: str) -> bool:
    """Which intervals are stratified by domain:gold (``checks.stats`` docstring)."""
    if statistic.startswith("delta_"):
        return True
    return statistic == "flip_rate" and view == "valid_both_only"


@dataclass(frozen=True)
class Statistic:
    """One figure with its interval; ``count``/``denominator`` are the sums of
    numerators and denominators of its observations."""

    point: float | None
    lower: float | None
    upper: float | None
    count: int
    denominator: int
    clusters: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Settings:
    replicates: int = DEFAULT_REPLICATES
    seed: int = DEFAULT_SEED
    confidence: float = DEFAULT_CONFIDENCE

    def to_json(self) -> dict[str, Any]:
        return {
            "method": "cluster bootstrap of a ratio of sums, nanquantile bounds",
            "replicates": self.replicates, "seed": self.seed, "confidence": self.confidence,
            "alpha": (1 - self.confidence) / 2, "batch": BATCH,
            "rng": "numpy.random.default_rng(seed), fresh per interval",
            "clusters": "base_sample_id",
            "strata": {v: {s: STRATA if stratified(v, s) else None for s in STATISTICS}
                       for v in VIEWS},
        }


@dataclass(frozen=True)
class Count:
    """A count with its denominator (no interval)."""

    count: int
    denominator: int

    @property
    def rate(self) -> float | None:
        return self.count / self.denominator if self.denominator else None


@dataclass(frozen=True)
class CountBlock:
    """Flip counts of one group of pairs (a domain or an original gold label)."""

    flip_rate: Count
    safe_to_unsafe: Count
    unsafe_to_safe: Count
    pairs: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CountBlock:
        f, su, us = (Count(**data[n]) for n in COUNTED)
        return cls(f, su, us, data["pairs"])


@dataclass(frozen=True)
class FlipCounts:
    """Flip counts by domain and by original gold label (sorted keys)."""

    by_domain: Mapping[str, CountBlock]
    by_gold_label: Mapping[str, CountBlock]

    def to_json(self) -> dict[str, Any]:
        return {"by_domain": {k: b.to_json() for k, b in self.by_domain.items()},
                "by_gold_label": {k: b.to_json() for k, b in self.by_gold_label.items()}}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FlipCounts:
        return cls({k: CountBlock.from_json(v) for k, v in data["by_domain"].items()},
                   {k: CountBlock.from_json(v) for k, v in data["by_gold_label"].items()})


@dataclass(frozen=True)
class ViewStats:
    """The statistics of one edit in one view (``all_pairs`` or ``valid_both_only``)."""

    pairs: int
    statistics: Mapping[str, Statistic]
    counts: FlipCounts

    @property
    def flip_rate(self) -> Statistic:
        return self.statistics["flip_rate"]

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ViewStats:
        stats = {k: Statistic(**v) for k, v in data.items() if k not in ("pairs", "counts")}
        return cls(data["pairs"], stats, FlipCounts.from_json(data["counts"]))

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {name: s.to_json() for name, s in self.statistics.items()}
        out["pairs"] = self.pairs
        out["counts"] = self.counts.to_json()
        return out


@dataclass(frozen=True)
class ExactScore:
    """Exact-score changes among pairs valid on both sides, and the transition
    matrix of original (rows) by edited score (columns)."""

    changed_valid_both: Ratio
    labels: tuple[str, ...]
    matrix: tuple[tuple[int, ...], ...]

    def to_json(self) -> dict[str, Any]:
        return {"changed_valid_both": self.changed_valid_both.to_dict(),
                "transitions": {"rows": "original score", "columns": "edit score",
                                "labels": list(self.labels),
                                "matrix": [list(r) for r in self.matrix]}}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ExactScore:
        t = data["transitions"]
        return cls(Ratio.from_json(data["changed_valid_both"]), tuple(t["labels"]),
                   tuple(tuple(r) for r in t["matrix"]))


@dataclass(frozen=True)
class EditStats:
    pairs: int
    valid_both_pairs: int
    unpaired_edit_rows: int
    unpaired_original_rows: int
    views: Mapping[str, ViewStats]
    exact_score: ExactScore

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EditStats:
        own = ("pairs", "valid_both_pairs", "unpaired_edit_rows", "unpaired_original_rows",
               "extras")
        return cls(data["pairs"], data["valid_both_pairs"], data["unpaired_edit_rows"],
                   data["unpaired_original_rows"],
                   {k: ViewStats.from_json(v) for k, v in data.items() if k not in own},
                   ExactScore.from_json(data["extras"]["exact_score"]))

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {v: s.to_json() for v, s in self.views.items()}
        out.update(pairs=self.pairs, valid_both_pairs=self.valid_both_pairs,
                   unpaired_edit_rows=self.unpaired_edit_rows,
                   unpaired_original_rows=self.unpaired_original_rows,
                   extras={"exact_score": self.exact_score.to_json()})
        return out


@dataclass(frozen=True)
class VariantStats:
    """Strict confusion (fail-closed), coverage and metrics of one variant's
    rows, and its rows by status."""

    summary: ConfusionSummary
    by_status: Mapping[str, int]

    @property
    def accuracy(self) -> Ratio:
        return self.summary.metrics.accuracy

    @property
    def coverage(self) -> Ratio:
        return self.summary.coverage

    def to_json(self) -> dict[str, Any]:
        out = self.summary.to_json()
        acc = self.accuracy.to_dict()
        out["strict_accuracy"] = {"count": acc["numerator"], "denominator": acc["denominator"],
                                  "point": acc["value"]}
        out["by_status"] = dict(self.by_status)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> VariantStats:
        return cls(ConfusionSummary.from_json(data), dict(data["by_status"]))


@dataclass(frozen=True)
class RowsSummary:
    """The expected rows, their statuses and the valid share."""

    expected: int
    by_status: Mapping[str, int]
    coverage: Ratio

    def to_json(self) -> dict[str, Any]:
        return {"expected": self.expected, "by_status": dict(self.by_status),
                "coverage": self.coverage.to_dict()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RowsSummary:
        return cls(data["expected"], dict(data["by_status"]), Ratio.from_json(data["coverage"]))


@dataclass(frozen=True)
class DifferenceInterval:
    lower: float | None
    upper: float | None
    strata: str = STRATA


@dataclass(frozen=True)
class PlaceboView:
    """Edit flips minus placebo flips over the bases having both pairs, in one view."""

    edit_flips: Ratio
    placebo_flips: Ratio
    effect: float | None
    interval: DifferenceInterval | None

    def to_json(self) -> dict[str, Any]:
        return {"edit_flips": self.edit_flips.to_dict(),
                "placebo_flips": self.placebo_flips.to_dict(), "effect": self.effect,
                "interval": None if self.interval is None else asdict(self.interval)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PlaceboView:
        iv = data["interval"]
        return cls(Ratio.from_json(data["edit_flips"]), Ratio.from_json(data["placebo_flips"]),
                   data["effect"], None if iv is None else DifferenceInterval(**iv))


@dataclass(frozen=True)
class PlaceboCorrected:
    bases: int
    views: Mapping[str, PlaceboView]

    def to_json(self) -> dict[str, Any]:
        return {"bases": self.bases, **{v: p.to_json() for v, p in self.views.items()}}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PlaceboCorrected:
        return cls(data["bases"], {v: PlaceboView.from_json(data[v]) for v in VIEWS})


@dataclass(frozen=True)
class RunToRun:
    """Disagreement of a ``repeat`` control with the original (see ``edits.repeat``)."""

    pairs: int
    strict_disagreement: Mapping[str, Statistic]
    exact_score_disagreement_valid_both: Ratio
    see: str = "edits.repeat"

    def to_json(self) -> dict[str, Any]:
        return {"pairs": self.pairs,
                "strict_disagreement": {v: s.to_json()
                                        for v, s in self.strict_disagreement.items()},
                "exact_score_disagreement_valid_both":
                    self.exact_score_disagreement_valid_both.to_dict(),
                "see": self.see}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunToRun:
        return cls(data["pairs"],
                   {v: Statistic(**s) for v, s in data["strict_disagreement"].items()},
                   Ratio.from_json(data["exact_score_disagreement_valid_both"]), data["see"])


@dataclass(frozen=True)
class StatsExtras:
    """The labelled extras: placebo-corrected flips per edit, run-to-run disagreement."""

    placebo_corrected: Mapping[str, PlaceboCorrected] | None = None
    run_to_run: RunToRun | None = None

    def to_json(self) -> dict[str, Any]:
        pc = self.placebo_corrected
        return {"placebo_corrected": None if pc is None else {e: p.to_json()
                                                              for e, p in pc.items()},
                "run_to_run": None if self.run_to_run is None else self.run_to_run.to_json()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StatsExtras:
        pc, rr = data["placebo_corrected"], data["run_to_run"]
        return cls(None if pc is None else {e: PlaceboCorrected.from_json(p)
                                            for e, p in pc.items()},
                   None if rr is None else RunToRun.from_json(rr))


@dataclass(frozen=True)
class StatsResult:
    settings: Settings
    expected_source: str
    rows: RowsSummary
    variants: Mapping[str, VariantStats]
    edits: Mapping[str, EditStats]
    extras: StatsExtras
    extra: Mapping[str, Any] = field(default_factory=dict)  # what the caller adds (run_dir ...)

    def with_extra(self, **extra: Any) -> StatsResult:
        return replace(self, extra={**self.extra, **extra})

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StatsResult:
        """The inverse of ``to_json``: a stats.json object of this schema."""
        if data.get("schema") != SCHEMA:
            raise InputError(f"stats schema {data.get('schema')!r} is not {SCHEMA!r}",
                             field="schema")
        intervals = data["settings"]["intervals"]
        known = {"schema", "settings", "rows", "variants", "edits", "extras"}
        return cls(
            settings=Settings(intervals["replicates"], intervals["seed"],
                              intervals["confidence"]),
            expected_source=data["settings"]["expected_rows"],
            rows=RowsSummary.from_json(data["rows"]),
            variants={v: VariantStats.from_json(s) for v, s in data["variants"].items()},
            edits={e: EditStats.from_json(v) for e, v in data["edits"].items()},
            extras=StatsExtras.from_json(data["extras"]),
            extra={k: v for k, v in data.items() if k not in known},
        )

    def to_frame(self) -> Any:
        """One row per figure (count/denominator or interval), dotted path first."""
        return stats_frame(self.to_json())

    def export(self, path: str | Path) -> Path:
        """``to_frame()`` as CSV or Parquet (by suffix), written atomically."""
        return write_table(self.to_frame(), path)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "settings": {
                "decision": "strict: score != 0; missing/errored/invalid rows fail closed (1)",
                "pairs": "per base, bases in sorted base_sample_id order",
                "intervals": self.settings.to_json(),
                "expected_rows": self.expected_source,
            },
            "rows": self.rows.to_json(),
            "variants": {v: s.to_json() for v, s in self.variants.items()},
            "edits": {e: s.to_json() for e, s in self.edits.items()},
            "extras": self.extras.to_json(),
            **self.extra,
        }
