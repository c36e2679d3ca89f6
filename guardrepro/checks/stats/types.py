"""The typed result of the run statistics (``checks.stats.compute.compute_stats``).

Input: the figures ``compute_stats`` computes, or a ``stats.json`` object read
back (``StatsResult.from_dict``).

Output: frozen values whose ``to_dict()`` is exactly the ``stats.json``
object (schema ``guardrepro.stats/2``; contract in ``checks.stats.compute``;
``to_json()`` is its text): ``StatsResult`` holding the interval
``Settings``, a ``RowsSummary``, one ``VariantStats`` per variant (a strict
``ConfusionSummary`` and status counts), one ``EditStats`` per edit (two
``ViewStats`` of ``checks.core.figure.Figure`` values with their intervals and
``FlipCounts``, and the ``ExactScore`` extra) and the labelled
``StatsExtras`` (``PlaceboCorrected``, ``RunToRun``). Every value but the
top level is (de)serialised by ``checks.core.serde`` from its fields.

Invariants: ``from_dict(to_dict())`` rebuilds an equal value.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

from guardrepro.checks.core.bootstrap import (
    BATCH,
    DEFAULT_CONFIDENCE,
    DEFAULT_REPLICATES,
    DEFAULT_SEED,
)
from guardrepro.checks.core.figure import COUNT, POINT, RATIO, STATISTIC, Figure, encode
from guardrepro.checks.core.metrics import ConfusionSummary
from guardrepro.checks.core.serde import (
    JsonValue,
    as_json_value,
    from_json_value,
    load_json_value,
    opt,
)
from guardrepro.checks.core.tables import stats_frame, write_table
from guardrepro.checks.stats.definitions import STATISTICS, VIEWS, stratified
from guardrepro.checks.stats.scores import ScoreStats
from guardrepro.errors import InputError

SCHEMA = "guardrepro.stats/2"
COUNTED = ("flip_rate", "safe_to_unsafe", "unsafe_to_safe")
STRATA = "domain:gold_label"


@dataclass(frozen=True)
class Settings(JsonValue):
    """The intervals' settings; written with how the intervals are made."""

    JSON_DERIVED: ClassVar[tuple[Any, ...]] = ("method", "alpha", "batch", "rng", "clusters",
                                               "strata")
    method: ClassVar[str] = "cluster bootstrap of a ratio of sums, nanquantile bounds"
    batch: ClassVar[int] = BATCH
    rng: ClassVar[str] = "numpy.random.default_rng(seed), fresh per interval"
    clusters: ClassVar[str] = "base_sample_id"

    replicates: int = DEFAULT_REPLICATES
    seed: int = DEFAULT_SEED
    confidence: float = DEFAULT_CONFIDENCE

    @property
    def alpha(self) -> float:
        return (1 - self.confidence) / 2

    @property
    def strata(self) -> dict[str, dict[str, str | None]]:
        """view -> statistic -> the strata of its interval (None: unstratified)."""
        return {v: {s: STRATA if stratified(v, s) else None for s in STATISTICS} for v in VIEWS}


@dataclass(frozen=True)
class CountBlock(JsonValue):
    """Flip counts of one group of pairs (a domain or an original gold label)."""

    flip_rate: Figure = opt(shape=COUNT)
    safe_to_unsafe: Figure = opt(shape=COUNT)
    unsafe_to_safe: Figure = opt(shape=COUNT)
    pairs: int = opt()


@dataclass(frozen=True)
class FlipCounts(JsonValue):
    """Flip counts by domain and by original gold label (sorted keys)."""

    by_domain: Mapping[str, CountBlock]
    by_gold_label: Mapping[str, CountBlock]


@dataclass(frozen=True)
class ViewStats(JsonValue):
    """The statistics of one edit in one view (``all_pairs`` or ``valid_both_only``):
    each a ``Figure`` with its interval, keyed by statistic in the view's object."""

    statistics: Mapping[str, Figure] = opt(shape=STATISTIC, spread=True)
    pairs: int = opt()
    counts: FlipCounts = opt()

    @property
    def flip_rate(self) -> Figure:
        return self.statistics["flip_rate"]


@dataclass(frozen=True)
class Transitions:
    """Original score (rows) by edited score (columns)."""

    labels: tuple[str, ...]
    matrix: tuple[tuple[int, ...], ...]
    rows: str = "original score"
    columns: str = "edit score"


@dataclass(frozen=True)
class ExactScore(JsonValue):
    """Exact-score changes among pairs valid on both sides, and the transition
    matrix of original (rows) by edited score (columns)."""

    changed_valid_both: Figure = opt(shape=RATIO)
    transitions: Transitions = opt()


@dataclass(frozen=True)
class EditExtras:
    exact_score: ExactScore


@dataclass(frozen=True)
class EditStats(JsonValue):
    views: Mapping[str, ViewStats] = opt(spread=True)
    pairs: int = opt()
    valid_both_pairs: int = opt()
    unpaired_edit_rows: int = opt()
    unpaired_original_rows: int = opt()
    extras: EditExtras = opt()

    @property
    def exact_score(self) -> ExactScore:
        return self.extras.exact_score


@dataclass(frozen=True)
class VariantStats(JsonValue):
    """Strict confusion (fail-closed), coverage and metrics of one variant's
    rows, and its rows by status (the summary's keys sit in the variant's object)."""

    summary: ConfusionSummary = opt(spread=True)
    by_status: Mapping[str, int] = opt()

    @property
    def accuracy(self) -> Figure:
        return self.summary.metrics.accuracy

    @property
    def coverage(self) -> Figure:
        return self.summary.coverage

    def _dump(self, out: dict[str, Any]) -> dict[str, Any]:
        by_status = out.pop("by_status")
        out["strict_accuracy"] = encode(self.accuracy, POINT)
        out["by_status"] = by_status
        return out

    @classmethod
    def _load(cls, data: Mapping[str, Any]) -> dict[str, Any]:
        """``strict_accuracy`` repeats the summary's accuracy: not read back."""
        return {k: v for k, v in data.items() if k != "strict_accuracy"}


@dataclass(frozen=True)
class RowsSummary(JsonValue):
    """The expected rows, their statuses and the valid share."""

    expected: int
    by_status: Mapping[str, int]
    coverage: Figure = opt(shape=RATIO)


@dataclass(frozen=True)
class DifferenceInterval:
    lower: float | None
    upper: float | None
    strata: str = STRATA


@dataclass(frozen=True)
class PlaceboView(JsonValue):
    """Edit flips minus placebo flips over the bases having both pairs, in one view."""

    edit_flips: Figure = opt(shape=RATIO)
    placebo_flips: Figure = opt(shape=RATIO)
    effect: float | None = opt()
    interval: DifferenceInterval | None = opt()


@dataclass(frozen=True)
class PlaceboCorrected(JsonValue):
    bases: int = opt()
    views: Mapping[str, PlaceboView] = opt(spread=True)


@dataclass(frozen=True)
class RunToRun(JsonValue):
    """Disagreement of a ``repeat`` control with the original (see ``edits.repeat``)."""

    pairs: int = opt()
    strict_disagreement: Mapping[str, Figure] = opt(shape=STATISTIC)
    exact_score_disagreement_valid_both: Figure = opt(shape=RATIO)
    see: str = "edits.repeat"


@dataclass(frozen=True)
class StatsExtras(JsonValue):
    """The labelled extras: placebo-corrected flips per edit, run-to-run disagreement."""

    placebo_corrected: Mapping[str, PlaceboCorrected] | None = None
    run_to_run: RunToRun | None = None


@dataclass(frozen=True)
class StatsResult(JsonValue):
    settings: Settings
    expected_source: str
    rows: RowsSummary
    variants: Mapping[str, VariantStats]
    edits: Mapping[str, EditStats]
    extras: StatsExtras
    extra: Mapping[str, Any] = field(default_factory=dict)  # what the caller adds (run_dir ...)
    # the guard as a scored classifier (``checks.stats.scores``); None: no p_unsafe
    scores: ScoreStats | None = None

    def with_extra(self, **extra: Any) -> StatsResult:
        return replace(self, extra={**self.extra, **extra})

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, file: str | None = None) -> StatsResult:
        """The inverse of ``to_dict``: a stats.json object of this schema."""
        if data.get("schema") != SCHEMA:
            raise InputError(f"stats schema {data.get('schema')!r} is not {SCHEMA!r}",
                             file=file, field="schema")
        known = {"schema", "settings", "rows", "variants", "edits", "extras", "scores"}
        hints = {"variants": Mapping[str, VariantStats], "edits": Mapping[str, EditStats]}
        return cls(
            settings=load_json_value(Settings, data["settings"]["intervals"], file=file,
                                     at="settings.intervals"),
            expected_source=data["settings"]["expected_rows"],
            rows=from_json_value(RowsSummary, data["rows"]),
            variants=from_json_value(hints["variants"], data["variants"]),
            edits=from_json_value(hints["edits"], data["edits"]),
            extras=from_json_value(StatsExtras, data["extras"]),
            extra={k: v for k, v in data.items() if k not in known},
            scores=from_json_value(ScoreStats, data["scores"]) if "scores" in data else None,
        )

    def to_frame(self) -> Any:
        """One row per figure (count/denominator or interval), dotted path first."""
        return stats_frame(self.to_dict())

    def export(self, path: str | Path) -> Path:
        """``to_frame()`` as CSV or Parquet (by suffix), written atomically."""
        return write_table(self.to_frame(), path)

    def to_dict(self) -> dict[str, Any]:
        """The stats.json object."""
        return {
            "schema": SCHEMA,
            "settings": {
                "decision": "strict: score != 0; missing/errored/invalid rows fail closed (1)",
                "pairs": "per base, bases in sorted base_sample_id order",
                "intervals": self.settings.to_dict(),
                "expected_rows": self.expected_source,
            },
            "rows": as_json_value(self.rows),
            "variants": as_json_value(self.variants),
            "edits": as_json_value(self.edits),
            "extras": as_json_value(self.extras),
            **({} if self.scores is None else {"scores": as_json_value(self.scores)}),
            **self.extra,
        }
