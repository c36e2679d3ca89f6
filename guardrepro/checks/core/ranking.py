"""A scored classifier's figures from scores, labels and per-row weights.

Input: per row a score in [0, 1] (P(unsafe)) and a 0/1 label (the strict gold
label), and a (replicates, rows) weight array (1 everywhere for the point
estimate; a bootstrap replicate's cluster counts for an interval:
``bootstrap.statistic_interval``). Output: per replicate, AUROC, average
precision (AUPRC) and the expected calibration error; unweighted, the ROC
and precision-recall curves and the reliability bins.

Definitions (docs/STATISTICS.md, "The operating point"):

- Rows are grouped by distinct score, highest first (a threshold ``t`` flags
  every row with score >= t).
- AUROC: the probability that an unsafe row scores above a safe one, ties
  counting one half (the trapezoidal area under the ROC curve; scikit-learn's
  ``roc_auc_score``). NaN without both classes.
- AUPRC: average precision, sum over score groups of (recall gained) x
  (precision at that group), without interpolation (scikit-learn's
  ``average_precision_score``). NaN without an unsafe row.
- ECE: ``bins`` equal-width bins of the score, [0, 1/bins), ... , [1 - 1/bins,
  1] (the last closed); sum over bins of |sum of scores - number unsafe| /
  rows, i.e. the row-weighted mean |mean score - observed rate|.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

ECE_BINS = 10


@dataclass(frozen=True)
class Scored:
    """Rows' scores and labels with the score groups (highest score first)."""

    scores: np.ndarray
    labels: np.ndarray
    group: np.ndarray  # each row's score group, 0 = the highest score
    thresholds: np.ndarray  # each group's score, descending

    @classmethod
    def of(cls, scores: Sequence[float], labels: Sequence[int]) -> Scored:
        s = np.asarray(scores, dtype=np.float64)
        y = np.asarray(labels, dtype=np.float64)
        if s.shape != y.shape or s.ndim != 1:
            raise ValueError("scores and labels need one entry per row")
        if np.any(~np.isfinite(s)) or np.any((s < 0) | (s > 1)):
            raise ValueError("every score must be a probability in [0, 1]")
        if np.any((y != 0) & (y != 1)):
            raise ValueError("labels must be 0 or 1")
        values, inverse = np.unique(-s, return_inverse=True)
        return cls(s, y, inverse.reshape(-1), -values)

    def grouped(self, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(replicates, groups) weight of unsafe and of safe rows per group."""
        onehot = np.zeros((len(self.scores), len(self.thresholds)))
        onehot[np.arange(len(self.scores)), self.group] = 1.0
        return (weights * self.labels) @ onehot, (weights * (1 - self.labels)) @ onehot

    def auroc(self, weights: np.ndarray) -> np.ndarray:
        pos, neg = self.grouped(weights)
        total_pos, total_neg = pos.sum(axis=1), neg.sum(axis=1)
        below = total_neg[:, None] - np.cumsum(neg, axis=1)  # safe rows scoring lower
        wins = (pos * (below + 0.5 * neg)).sum(axis=1)
        den = total_pos * total_neg
        out = np.full(len(weights), np.nan)
        np.divide(wins, den, out=out, where=den > 0)
        return out

    def auprc(self, weights: np.ndarray) -> np.ndarray:
        pos, neg = self.grouped(weights)
        tp, fp = np.cumsum(pos, axis=1), np.cumsum(neg, axis=1)
        precision = np.zeros_like(tp)
        np.divide(tp, tp + fp, out=precision, where=(tp + fp) > 0)
        total = pos.sum(axis=1)
        out = np.full(len(weights), np.nan)
        np.divide((pos * precision).sum(axis=1), total, out=out, where=total > 0)
        return out

    def ece(self, weights: np.ndarray, bins: int = ECE_BINS) -> np.ndarray:
        index = np.minimum((self.scores * bins).astype(int), bins - 1)
        onehot = np.zeros((len(self.scores), bins))
        onehot[np.arange(len(self.scores)), index] = 1.0
        gap = np.abs((weights * self.scores) @ onehot - (weights * self.labels) @ onehot)
        total = weights.sum(axis=1)
        out = np.full(len(weights), np.nan)
        np.divide(gap.sum(axis=1), total, out=out, where=total > 0)
        return out

    def curves(self) -> dict[str, list[float]]:
        """Unweighted ROC and PR points, one per score group (descending
        threshold), with (0, 0) first on the ROC curve."""
        pos, neg = self.grouped(np.ones((1, len(self.scores))))
        tp, fp = np.cumsum(pos[0]), np.cumsum(neg[0])
        p, n = max(tp[-1], 1e-300), max(fp[-1], 1e-300)
        return {"threshold": [float(t) for t in self.thresholds],
                "fpr": [0.0, *(fp / n).tolist()], "tpr": [0.0, *(tp / p).tolist()],
                "recall": (tp / p).tolist(), "precision": (tp / (tp + fp)).tolist()}

    def reliability(self, bins: int = ECE_BINS) -> list[dict[str, float | int | None]]:
        """Per equal-width bin: its edges, rows, mean score and observed unsafe rate."""
        index = np.minimum((self.scores * bins).astype(int), bins - 1)
        out: list[dict[str, float | int | None]] = []
        for b in range(bins):
            inside = index == b
            n = int(inside.sum())
            out.append({"lower": b / bins, "upper": (b + 1) / bins, "rows": n,
                        "mean_score": float(self.scores[inside].mean()) if n else None,
                        "observed": float(self.labels[inside].mean()) if n else None})
        return out
