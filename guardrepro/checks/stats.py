"""Per-variant strict accuracy and paired original-vs-edit statistics of one run.

Input: the rows of a run or of a predictions file (``runio.RowResult``; rows
with no record are present with status ``missing``), interval settings.

Output: a ``StatsResult`` (frozen); ``to_json()`` is the ``stats.json``
object. Its contract: ``edits.<edit>.<view>.<statistic>`` =
``{point, lower, upper, count, denominator, clusters}`` with <view> one of
``all_pairs``, ``valid_both_only`` and <statistic> one of ``flip_rate``,
``safe_to_unsafe``, ``unsafe_to_safe``, ``delta_accuracy``,
``delta_sensitivity``, ``delta_specificity``; ``count`` and ``denominator``
are the sums of the statistic's numerators and denominators, ``clusters``
the bases its interval resampled. Beside them, ``edits.<edit>.<view>.counts``
holds the flip counts by domain and by original gold label.

Definitions (docs/PROTOCOL.md, sections "Statistics vocabulary" and "Which
interval is which"):

- strict decision = score != 0; fail-closed: a missing, errored or invalid
  row is decision 1 and counts as invalid.
- a pair = the original row and the edit row of one base; bases in sorted
  base_sample_id order. Every non-original variant is an edit (placebo and
  repeat controls included). Edit rows without an original, and originals
  without the edit, are counted, never paired.
- views: ``all_pairs`` (every pair, fail-closed) and ``valid_both_only``
  (both rows valid).
- flip_rate: mean of [decisions differ] over the view's pairs; interval
  unstratified in all_pairs, stratified by ``"<domain>:<gold strict label>"``
  in valid_both_only.
- safe_to_unsafe: over the view's pairs whose original decision is 0, mean of
  [edited decision = 1]; unsafe_to_safe: over those whose original decision
  is 1, mean of [edited decision = 0]. Intervals unstratified (the pairs
  outside the subset are not observations of the interval).
- delta_accuracy: numerator [edited correct] - [original correct],
  denominator 1; delta_sensitivity: gold_unsafe x ([edited=1] - [original=1])
  over gold_unsafe; delta_specificity: gold_safe x ([edited=0] - [original=0])
  over gold_safe. Every pair of the view is an observation (other-class pairs
  contribute 0/0 in their stratum), stratified by domain:gold, one ratio of
  sums.
- every interval: ``bootstrap.ratio_interval``, clusters = base_sample_id.

Extras (labelled as such, not part of the published protocol): exact-score
transitions per edit, placebo-corrected flip rates (``extras.placebo_corrected``,
a ``bootstrap.difference_interval`` stratified by domain:gold) and
run-to-run disagreement of a ``repeat`` control.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tqdm import tqdm

from guardrepro.checks.bootstrap import (
    BATCH,
    DEFAULT_CONFIDENCE,
    DEFAULT_REPLICATES,
    DEFAULT_SEED,
    check_settings,
    ratio_interval,
)
from guardrepro.checks.formatting import fmt_num, ratio_text
from guardrepro.checks.metrics import Ratio, confusion
from guardrepro.checks.pairs import ORIGINAL, PLACEBO, REPEAT, Pair, make_pairs, ordered_variants
from guardrepro.checks.runio import RowResult
from guardrepro.checks.stats_extras import exact_score, placebo_corrected
from guardrepro.errors import InputError

SCHEMA = "guardrepro.stats/2"
VIEWS = ("all_pairs", "valid_both_only")
STATISTICS = ("flip_rate", "safe_to_unsafe", "unsafe_to_safe", "delta_accuracy",
              "delta_sensitivity", "delta_specificity")
COUNTED = ("flip_rate", "safe_to_unsafe", "unsafe_to_safe")
STRATA = "domain:gold_label"

# name -> (observation filter, numerator, denominator)
Obs = Callable[[Pair], bool]
Val = Callable[[Pair], int]
DEFINITIONS: dict[str, tuple[Obs, Val, Val]] = {
    "flip_rate": (lambda p: True, lambda p: int(p.d_orig != p.d_edit), lambda p: 1),
    "safe_to_unsafe": (lambda p: p.d_orig == 0, lambda p: int(p.d_edit == 1), lambda p: 1),
    "unsafe_to_safe": (lambda p: p.d_orig == 1, lambda p: int(p.d_edit == 0), lambda p: 1),
    "delta_accuracy": (lambda p: True,
                       lambda p: int(p.d_edit == p.gold_strict) - int(p.d_orig == p.gold_strict),
                       lambda p: 1),
    "delta_sensitivity": (lambda p: True, lambda p: p.gold_strict * (p.d_edit - p.d_orig),
                          lambda p: p.gold_strict),
    "delta_specificity": (lambda p: True,
                          lambda p: (1 - p.gold_strict) * ((1 - p.d_edit) - (1 - p.d_orig)),
                          lambda p: 1 - p.gold_strict),
}


def stratified(view: str, statistic: str) -> bool:
    """Which intervals are stratified by domain:gold (module docstring)."""
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
        return {"point": self.point, "lower": self.lower, "upper": self.upper,
                "count": self.count, "denominator": self.denominator,
                "clusters": self.clusters}


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
class ViewStats:
    pairs: int
    statistics: Mapping[str, Statistic]
    counts: Mapping[str, Any]

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ViewStats:
        stats = {k: Statistic(**v) for k, v in data.items() if k not in ("pairs", "counts")}
        return cls(data["pairs"], stats, data["counts"])

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {name: s.to_json() for name, s in self.statistics.items()}
        out["pairs"] = self.pairs
        out["counts"] = dict(self.counts)
        return out


@dataclass(frozen=True)
class EditStats:
    pairs: int
    valid_both_pairs: int
    unpaired_edit_rows: int
    unpaired_original_rows: int
    views: Mapping[str, ViewStats]
    extras: Mapping[str, Any]

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EditStats:
        own = ("pairs", "valid_both_pairs", "unpaired_edit_rows", "unpaired_original_rows",
               "extras")
        return cls(data["pairs"], data["valid_both_pairs"], data["unpaired_edit_rows"],
                   data["unpaired_original_rows"],
                   {k: ViewStats.from_json(v) for k, v in data.items() if k not in own},
                   data["extras"])

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {v: s.to_json() for v, s in self.views.items()}
        out.update(pairs=self.pairs, valid_both_pairs=self.valid_both_pairs,
                   unpaired_edit_rows=self.unpaired_edit_rows,
                   unpaired_original_rows=self.unpaired_original_rows,
                   extras=dict(self.extras))
        return out


@dataclass(frozen=True)
class StatsResult:
    settings: Settings
    expected_source: str
    rows: Mapping[str, Any]
    variants: Mapping[str, Any]
    edits: Mapping[str, EditStats]
    extras: Mapping[str, Any]
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
            rows=data["rows"],
            variants=data["variants"],
            edits={e: EditStats.from_json(v) for e, v in data["edits"].items()},
            extras=data["extras"],
            extra={k: v for k, v in data.items() if k not in known},
        )

    def to_frame(self) -> Any:
        """One row per figure (count/denominator or interval), dotted path first."""
        from guardrepro.checks.frames import stats_frame

        return stats_frame(self.to_json())

    def export(self, path: str | Path) -> Path:
        """``to_frame()`` as CSV or Parquet (by suffix), written atomically."""
        from guardrepro.checks.frames import write_table

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
            "rows": dict(self.rows),
            "variants": dict(self.variants),
            "edits": {e: s.to_json() for e, s in self.edits.items()},
            "extras": dict(self.extras),
            **self.extra,
        }


class _Engine:
    """Computes statistics with the shared settings and a progress bar."""

    def __init__(self, settings: Settings, progress: bool) -> None:
        self.settings = settings
        self.bar = tqdm(desc="intervals", unit="interval", disable=not progress, leave=False)

    def statistic(self, pairs: Sequence[Pair], name: str, strat: bool) -> Statistic:
        keep, num, den = DEFINITIONS[name]
        obs = [p for p in pairs if keep(p)]
        nums, dens = [num(p) for p in obs], [den(p) for p in obs]
        if not obs:
            return Statistic(None, None, None, 0, 0, 0)
        iv = ratio_interval(
            nums, dens, [p.base_sample_id for p in obs],
            [p.stratum for p in obs] if strat else None,
            replicates=self.settings.replicates, seed=self.settings.seed,
            confidence=self.settings.confidence,
        )
        self.bar.update()
        return Statistic(iv.point, iv.lower, iv.upper, sum(nums), sum(dens), iv.clusters)


def _counts(pairs: Sequence[Pair]) -> dict[str, Any]:
    def block(sub: Sequence[Pair]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in COUNTED:
            keep, num, den = DEFINITIONS[name]
            obs = [p for p in sub if keep(p)]
            out[name] = {"count": sum(num(p) for p in obs),
                         "denominator": sum(den(p) for p in obs)}
        out["pairs"] = len(sub)
        return out

    by: dict[str, dict[str, list[Pair]]] = {"by_domain": {}, "by_gold_label": {}}
    for p in pairs:
        by["by_domain"].setdefault(p.domain, []).append(p)
        by["by_gold_label"].setdefault(str(p.gold_strict), []).append(p)
    return {k: {g: block(groups[g]) for g in sorted(groups)} for k, groups in by.items()}


def edit_stats(pairs: Sequence[Pair], engine: _Engine, unpaired: tuple[int, int]) -> EditStats:
    views = {}
    for view in VIEWS:
        sub = list(pairs) if view == "all_pairs" else [p for p in pairs if p.valid_both]
        views[view] = ViewStats(
            pairs=len(sub),
            statistics={s: engine.statistic(sub, s, stratified(view, s)) for s in STATISTICS},
            counts=_counts(sub),
        )
    return EditStats(
        pairs=len(pairs), valid_both_pairs=sum(1 for p in pairs if p.valid_both),
        unpaired_edit_rows=unpaired[0], unpaired_original_rows=unpaired[1], views=views,
        extras={"exact_score": exact_score(pairs)},
    )


def variant_summary(rows: Sequence[RowResult]) -> dict[str, Any]:
    """Strict confusion (fail-closed), coverage and metrics of one variant's rows."""
    summary = confusion([r.gold_label for r in rows], [r.score for r in rows]).to_dict()
    summary["strict_accuracy"] = {
        "count": summary["metrics"]["accuracy"]["numerator"],
        "denominator": summary["metrics"]["accuracy"]["denominator"],
        "point": summary["metrics"]["accuracy"]["value"],
    }
    summary["by_status"] = {s: sum(1 for r in rows if r.status == s)
                            for s in sorted({r.status for r in rows})}
    return summary


def compute_stats(
    rows: Sequence[RowResult],
    *,
    replicates: int = DEFAULT_REPLICATES,
    seed: int = DEFAULT_SEED,
    confidence: float = DEFAULT_CONFIDENCE,
    progress: bool = False,
    expected_source: str = "unknown",
) -> StatsResult:
    """The statistics of one run's rows (see the module docstring)."""
    if not rows:
        raise InputError("no rows to compute statistics on")
    check_settings(replicates, seed, confidence)
    settings = Settings(replicates, seed, confidence)
    engine = _Engine(settings, progress)
    variants = ordered_variants(rows)
    status_counts: dict[str, int] = {}
    for r in rows:
        status_counts[r.status] = status_counts.get(r.status, 0) + 1
    per_variant = {v: variant_summary([r for r in rows if r.variant == v]) for v in variants}
    edits: dict[str, EditStats] = {}
    pair_sets: dict[str, list[Pair]] = {}
    if ORIGINAL in variants:
        originals = sum(1 for r in rows if r.variant == ORIGINAL)
        for v in variants:
            if v == ORIGINAL:
                continue
            pair_sets[v] = make_pairs(rows, v)
            n = len(pair_sets[v])
            unpaired = (sum(1 for r in rows if r.variant == v) - n, originals - n)
            edits[v] = edit_stats(pair_sets[v], engine, unpaired)
    extras: dict[str, Any] = {"placebo_corrected": None, "run_to_run": None}
    if PLACEBO in pair_sets:
        extras["placebo_corrected"] = {
            v: placebo_corrected(pair_sets[v], pair_sets[PLACEBO], settings.replicates,
                                 settings.seed, settings.confidence)
            for v in pair_sets if v not in (PLACEBO, REPEAT)
        }
    if REPEAT in edits:
        rep = edits[REPEAT]
        extras["run_to_run"] = {
            "pairs": rep.pairs,
            "strict_disagreement": {v: rep.views[v].statistics["flip_rate"].to_json()
                                    for v in VIEWS},
            "exact_score_disagreement_valid_both": rep.extras["exact_score"][
                "changed_valid_both"],
            "see": "edits.repeat",
        }
    engine.bar.close()
    valid = sum(1 for r in rows if r.valid)
    return StatsResult(
        settings=settings, expected_source=expected_source,
        rows={"expected": len(rows), "by_status": dict(sorted(status_counts.items())),
              "coverage": Ratio(valid, len(rows)).to_dict()},
        variants=per_variant, edits=edits, extras=extras,
    )


def format_table(stats: Mapping[str, Any]) -> str:
    """A plain-text summary of a stats.json object: strict accuracy per variant,
    then every statistic of every edit with its interval."""
    conf = stats["settings"]["intervals"]["confidence"]
    lines = [f"{'variant':<20} {'valid':<10} {'strict accuracy (fail-closed)':<30}"]
    for v, s in stats["variants"].items():
        a = s["strict_accuracy"]
        valid = ratio_text(s["coverage"]["numerator"], s["coverage"]["denominator"])
        acc = ratio_text(a["count"], a["denominator"]) + " = " + fmt_num(a["point"])
        lines.append(f"{v:<20} {valid:<10} {acc:<30}")
    cov = stats["rows"]["coverage"]
    lines.append(f"coverage: {ratio_text(cov['numerator'], cov['denominator'])} rows valid")
    if stats["edits"]:
        lines += ["", f"{'edit':<18} {'view':<16} {'statistic':<18} {'count':<8} "
                  f"{'point':<10} {f'{conf:g} interval':<22} clusters"]
        for e, block in stats["edits"].items():
            for view in VIEWS:
                for name in STATISTICS:
                    s = block[view][name]
                    ci = "-" if s["lower"] is None else (
                        f"[{fmt_num(s['lower'])}, {fmt_num(s['upper'])}]")
                    lines.append(f"{e:<18} {view:<16} {name:<18} "
                                 f"{ratio_text(s['count'], s['denominator']):<8} "
                                 f"{fmt_num(s['point']):<10} {ci:<22} {s['clusters']}")
    return "\n".join(lines)


__all__ = ["STATISTICS", "VIEWS", "EditStats", "Settings", "Statistic", "StatsResult",
           "ViewStats", "compute_stats", "fmt_num", "format_table"]
