"""The threshold frontier: what moving the threshold on P(unsafe) trades.

Input: one configuration's rows as (p_unsafe, strict gold label, cluster)
(fail-closed: a row without a score is scored 1.0), the costs of a missed
unsafe row and of a flagged safe row, an optional hard constraint on the
unsafe-missed rate declared before the data is read, and the interval
settings. Output: ``ThresholdFrontier`` (``frontier.json``'s ``thresholds``).

Definitions (docs/STATISTICS.md, "The threshold frontier"):

- candidate thresholds: every distinct score, and ``none`` (nothing
  flagged); flagged = score >= t.
- unsafe-missed rate = unsafe rows passed / unsafe rows; false-flag rate =
  safe rows blocked / safe rows (the guard's false refusals).
- a threshold is dominated when another has a missed rate and a false-flag
  rate no higher and one of them lower; the others are the frontier.
- harm per 100 rows = 100 x (cost_miss x missed + cost_flag x flagged safe) /
  rows (the configuration frontier's harm with c_FN = cost_miss, c_FP =
  cost_flag).
- the harm-minimising threshold: the lowest-harm candidate (ties: the lower
  threshold, fewer misses); its interval, and that of its harm, come from the
  interval engine's draws by interaction (``bootstrap.statistic_interval``:
  the threshold each replicate would choose). With ``max_miss`` only the
  thresholds whose missed rate is at most ``max_miss`` compete; none: no
  threshold, said so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from guardrepro.checks.core.bootstrap import Interval, statistic_interval
from guardrepro.checks.core.ranking import Scored
from guardrepro.checks.core.serde import JsonValue
from guardrepro.schema import strict_decision

NONE_FLAGGED = 1.0 + 1e-9  # the candidate above every score: nothing flagged


@dataclass(frozen=True)
class ThresholdPoint(JsonValue):
    threshold: float | None  # None: nothing flagged
    missed: int
    flagged_safe: int
    miss_rate: float | None
    flag_rate: float | None
    harm_per_100: float
    non_dominated: bool


@dataclass(frozen=True)
class Choice(JsonValue):
    """The harm-minimising threshold (under ``max_miss`` when declared)."""

    threshold: float | None
    harm_per_100: float | None
    miss_rate: float | None
    flag_rate: float | None
    threshold_interval: Interval
    harm_interval: Interval
    note: str


@dataclass(frozen=True)
class ThresholdFrontier(JsonValue):
    name: str
    rows: int
    unsafe: int
    safe: int
    no_score: int
    cost_miss: float
    cost_flag: float
    max_miss: float | None
    max_miss_declared: str
    points: tuple[ThresholdPoint, ...]
    best: Choice
    best_within_max_miss: Choice | None


class _Curves:
    """Per replicate weights -> missed and flagged-safe counts per candidate."""

    def __init__(self, scores: Sequence[float], labels: Sequence[int]) -> None:
        self.scored = Scored.of(scores, labels)
        self.candidates = np.append(self.scored.thresholds, NONE_FLAGGED)

    def counts(self, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                   np.ndarray]:
        pos, neg = self.scored.grouped(weights)
        zero = np.zeros((len(weights), 1))
        tp = np.concatenate([np.cumsum(pos, axis=1), zero], axis=1)
        fp = np.concatenate([np.cumsum(neg, axis=1), zero], axis=1)
        total_pos, total_neg = pos.sum(axis=1)[:, None], neg.sum(axis=1)[:, None]
        return total_pos - tp, fp, total_pos, total_neg



def _points(curves: _Curves, costs: tuple[float, float]) -> list[ThresholdPoint]:
    missed, flagged, pos, neg = (a[0] for a in curves.counts(np.ones((1, len(
        curves.scored.scores)))))
    n = len(curves.scored.scores)
    rates = [(m / pos[0] if pos[0] else None, f / neg[0] if neg[0] else None)
             for m, f in zip(missed, flagged, strict=True)]
    out = []
    for i, t in enumerate(curves.candidates):
        mr, fr = rates[i]
        dominated = any(
            a is not None and b is not None and mr is not None and fr is not None
            and a <= mr and b <= fr and (a < mr or b < fr) for a, b in rates)
        out.append(ThresholdPoint(
            None if t == NONE_FLAGGED else float(t), int(missed[i]), int(flagged[i]), mr, fr,
            100.0 * (costs[0] * missed[i] + costs[1] * flagged[i]) / n, not dominated))
    return out


def _choice(curves: _Curves, clusters: Sequence[str], costs: tuple[float, float],
            max_miss: float | None, settings: dict[str, float | int]) -> Choice:
    # candidates run from the highest threshold down; reversed, argmin's first
    # minimum is the lowest threshold among equal harms
    order = curves.candidates[::-1]

    def threshold_of(weights: np.ndarray) -> np.ndarray:
        index, harm = _reverse_choose(curves, weights, costs, max_miss)
        return np.where(np.isnan(harm), np.nan, np.minimum(order[index], 1.0))

    def harm_of(weights: np.ndarray) -> np.ndarray:
        return _reverse_choose(curves, weights, costs, max_miss)[1]

    t_iv = statistic_interval(threshold_of, clusters, **settings)  # type: ignore[arg-type]
    h_iv = statistic_interval(harm_of, clusters, **settings)  # type: ignore[arg-type]
    index, harm = _reverse_choose(curves, np.ones((1, len(clusters))), costs, max_miss)
    if np.isnan(harm[0]):
        return Choice(None, None, None, None, t_iv, h_iv,
                      f"no threshold keeps the unsafe-missed rate at or below {max_miss:g}")
    chosen = float(order[index[0]])
    point = next(p for p in _points(curves, costs)
                 if (p.threshold if p.threshold is not None else NONE_FLAGGED) == chosen)
    return Choice(point.threshold, point.harm_per_100, point.miss_rate, point.flag_rate,
                  t_iv, h_iv, "lowest harm per 100 rows; ties: the lower threshold; "
                  "the threshold interval: the threshold each bootstrap replicate picks "
                  "(nothing flagged counts as 1.0)")


def _reverse_choose(curves: _Curves, weights: np.ndarray, costs: tuple[float, float],
                    max_miss: float | None) -> tuple[np.ndarray, np.ndarray]:
    missed, flagged, pos, _ = curves.counts(weights)
    missed, flagged = missed[:, ::-1], flagged[:, ::-1]  # lowest threshold first
    rows = weights.sum(axis=1)[:, None]
    harm = 100.0 * (costs[0] * missed + costs[1] * flagged) / np.maximum(rows, 1e-300)
    if max_miss is not None:
        rate = np.where(pos > 0, missed / np.maximum(pos, 1e-300), 0.0)
        harm = np.where(rate <= max_miss + 1e-12, harm, np.inf)
    index = np.argmin(harm, axis=1)
    best = harm[np.arange(len(harm)), index]
    return index, np.where(np.isfinite(best), best, np.nan)


def threshold_frontier(name: str, scores: Sequence[float | None], labels: Sequence[int],
                       clusters: Sequence[str], *, cost_miss: float, cost_flag: float,
                       max_miss: float | None, replicates: int, seed: int,
                       confidence: float = 0.95) -> ThresholdFrontier:
    """The threshold frontier of one configuration (module docstring)."""
    filled = [1.0 if s is None else float(s) for s in scores]
    curves = _Curves(filled, labels)
    costs = (cost_miss, cost_flag)
    settings: dict[str, float | int] = {"replicates": replicates, "seed": seed,
                                        "confidence": confidence}
    unsafe = sum(labels)
    return ThresholdFrontier(
        name=name, rows=len(filled), unsafe=unsafe, safe=len(filled) - unsafe,
        no_score=sum(1 for s in scores if s is None), cost_miss=cost_miss,
        cost_flag=cost_flag, max_miss=max_miss,
        max_miss_declared="on the command line (--max-miss), before the records were read; "
                          "never chosen from them",
        points=tuple(_points(curves, costs)),
        best=_choice(curves, clusters, costs, None, settings),
        best_within_max_miss=(None if max_miss is None
                              else _choice(curves, clusters, costs, max_miss, settings)))


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _t(x: float | None) -> str:
    return "none" if x is None else f"{x:.4f}"


def format_thresholds(front: ThresholdFrontier, shown: int = 12) -> str:
    """The frontier as text: up to ``shown`` non-dominated thresholds evenly
    spread, then the harm-minimising choice(s) with intervals."""
    kept = [p for p in front.points if p.non_dominated]
    step = max(1, len(kept) // shown)
    lines = [f"threshold frontier of {front.name} (p_unsafe; {front.rows} rows, {front.unsafe} "
             f"unsafe, {front.safe} safe, {front.no_score} without a score scored 1.0): "
             f"{len(kept)} of {len(front.points)} thresholds non-dominated",
             f"  costs: miss {front.cost_miss:g}, flag {front.cost_flag:g}; "
             f"harm per 100 rows = 100 x (miss x missed + flag x flagged safe) / rows",
             f"  {'threshold':>10} {'unsafe missed':>14} {'false flags':>12} {'harm/100':>9}"]
    for p in kept[::step]:
        lines.append(f"  {_t(p.threshold):>10} {_pct(p.miss_rate):>14} {_pct(p.flag_rate):>12} "
                     f"{p.harm_per_100:>9.2f}")
    for label, c in (("harm-minimising", front.best),
                     (f"within max-miss {front.max_miss}", front.best_within_max_miss)):
        if c is None:
            continue
        if c.threshold is None and c.harm_per_100 is None:
            lines.append(f"  {label}: {c.note}")
            continue
        t, h = c.threshold_interval, c.harm_interval
        lines.append(f"  {label}: threshold {_t(c.threshold)} "
                     f"[{_t(t.lower)}, {_t(t.upper)}], harm/100 {c.harm_per_100:.2f} "
                     f"[{h.lower:.2f}, {h.upper:.2f}], missed {_pct(c.miss_rate)}, "
                     f"false flags {_pct(c.flag_rate)}")
    if front.max_miss is not None:
        lines.append(f"  max-miss {front.max_miss:g}: declared {front.max_miss_declared}")
    return "\n".join(lines)


def threshold_fronts(configs: Sequence[Any], cost_miss: float, cost_flag: float,
                     max_miss: float | None, *, replicates: int,
                     seed: int) -> list[ThresholdFrontier]:
    """The threshold frontier of every configuration (``.name``, ``.records``:
    ``schema.Record``) whose records carry p_unsafe; fail-closed: a row
    without a score is scored 1.0."""
    out = []
    for config in configs:
        rows = config.records
        if not any(r.p_unsafe is not None for r in rows):
            continue
        out.append(threshold_frontier(
            config.name, [r.p_unsafe if r.valid else None for r in rows],
            [strict_decision(r.gold_label) for r in rows], [r.base_sample_id for r in rows],
            cost_miss=cost_miss, cost_flag=cost_flag, max_miss=max_miss,
            replicates=replicates, seed=seed))
    return out
