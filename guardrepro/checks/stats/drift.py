"""Score drift: how far each row's P(unsafe) moved between two runs.

Input: per row in both runs, P(unsafe) on each side (None when a side has
none), the cluster (``base_sample_id``: the interaction), both sides' strict
decisions and the threshold. Output: ``ScoreDrift`` (compare, attribute and
the sweep summary; docs/STATISTICS.md, "Score drift").

Definitions:

- drift of a row = |p_unsafe_b - p_unsafe_a|, over the rows where both sides
  carry p_unsafe (``rows``; ``missing`` counts the others).
- ``mean`` with its cluster-bootstrap interval by interaction
  (``bootstrap.ratio_interval``, denominator 1); ``p95`` (inverted CDF: the
  smallest drift with at least 95% of the rows at or below it) and ``max``
  with theirs (``bootstrap.statistic_interval``, same draws).
- crossings: rows whose p_unsafe lies on different sides of the threshold
  (p >= t on one side only); ``flipped``: rows whose strict decisions differ;
  ``moved_but_held``: rows that drifted by more than ``HELD_TOLERANCE`` and
  kept their strict decision.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from guardrepro.checks.core.bootstrap import (
    QUICK_REPLICATES,
    Interval,
    ratio_interval,
    statistic_interval,
)
from guardrepro.checks.core.serde import JsonValue

HELD_TOLERANCE = 1e-6  # a drift above this is "moved" (float32 logits round near 1e-7)
DRIFT_THRESHOLD = 0.5


@dataclass(frozen=True)
class ScoreDrift(JsonValue):
    rows: int
    missing: int
    mean: Interval
    p95: Interval
    max: Interval
    largest_row: str | None
    threshold: float
    crossings: int
    crossing_rows: tuple[str, ...]
    flipped: int
    moved_but_held: int
    held_tolerance: float = HELD_TOLERANCE


Stat = Callable[[np.ndarray], np.ndarray]


def _p95(values: np.ndarray) -> Stat:
    order = np.argsort(values, kind="stable")
    ordered = values[order]

    def stat(weights: np.ndarray) -> np.ndarray:
        w = weights[:, order]
        cum = np.cumsum(w, axis=1)
        total = cum[:, -1:]
        index = np.argmax(cum >= 0.95 * total - 1e-12, axis=1)
        out = ordered[index].astype(float)
        return np.where(total[:, 0] > 0, out, np.nan)

    return stat


def _max(values: np.ndarray) -> Stat:
    def stat(weights: np.ndarray) -> np.ndarray:
        masked = np.where(weights > 0, values[None, :], -np.inf)
        out = masked.max(axis=1)
        return np.where(np.isfinite(out), out, np.nan)

    return stat


def score_drift(row_ids: Sequence[str], p_a: Sequence[float | None],
                p_b: Sequence[float | None], clusters: Sequence[str],
                strict_a: Sequence[int], strict_b: Sequence[int], *,
                threshold: float = DRIFT_THRESHOLD, replicates: int = QUICK_REPLICATES,
                seed: int = 260828, confidence: float = 0.95) -> ScoreDrift | None:
    """The drift of the rows carrying p_unsafe on both sides (None: no such row)."""
    pairs = {i: (a, b) for i, (a, b) in enumerate(zip(p_a, p_b, strict=True))
             if a is not None and b is not None}
    keep = list(pairs)
    if not keep:
        return None
    drift = np.asarray([abs(b - a) for a, b in pairs.values()])
    cl = [clusters[i] for i in keep]
    crossing = [row_ids[i] for i, (a, b) in pairs.items()
                if (a >= threshold) != (b >= threshold)]
    flipped = sum(1 for i in range(len(row_ids)) if strict_a[i] != strict_b[i])
    held = sum(1 for j, i in enumerate(keep)
               if drift[j] > HELD_TOLERANCE and strict_a[i] == strict_b[i])
    return ScoreDrift(
        rows=len(keep), missing=len(row_ids) - len(keep),
        mean=ratio_interval(drift.tolist(), [1.0] * len(keep), cl, replicates=replicates,
                            seed=seed, confidence=confidence),
        p95=statistic_interval(_p95(drift), cl, replicates=replicates, seed=seed,
                               confidence=confidence),
        max=statistic_interval(_max(drift), cl, replicates=replicates, seed=seed,
                               confidence=confidence),
        largest_row=row_ids[keep[int(np.argmax(drift))]],
        threshold=threshold, crossings=len(crossing), crossing_rows=tuple(crossing),
        flipped=flipped, moved_but_held=held)


def drift_line(d: ScoreDrift) -> str:
    """One line of text: mean, p95 and max |delta p_unsafe| with intervals."""
    def iv(x: Interval) -> str:
        if x.point is None:
            return "-"
        return f"{x.point:.3g} [{x.lower:.3g}, {x.upper:.3g}]"
    return (f"p_unsafe drift on {d.rows} rows: mean |delta| {iv(d.mean)}, p95 {iv(d.p95)}, "
            f"max {iv(d.max)} ({d.largest_row}); {d.crossings} cross {d.threshold:g}, "
            f"{d.flipped} flipped, {d.moved_but_held} moved but held")


def record_drift(reference: Mapping[str, Any], records: Sequence[Any], *,
                 replicates: int = QUICK_REPLICATES, seed: int = 260828) -> ScoreDrift | None:
    """The drift of ``records`` (``schema.Record``) against the reference
    records of the same row ids (None: no shared row with p_unsafe on both)."""
    pairs = [(reference[r.row_id], r) for r in records if r.row_id in reference]

    def p(rec: Any) -> float | None:
        return rec.p_unsafe if rec.valid else None

    return score_drift([b.row_id for _, b in pairs], [p(a) for a, _ in pairs],
                       [p(b) for _, b in pairs], [b.base_sample_id for _, b in pairs],
                       [a.strict_decision for a, _ in pairs],
                       [b.strict_decision for _, b in pairs], replicates=replicates, seed=seed)
