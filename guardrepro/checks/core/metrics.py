"""Strict (binary) confusion and the metrics derived from it.

Input: parallel sequences of gold scores (0 / 0.5 / 1), predicted scores
(0 / 0.5 / 1, or ``None`` for a row that is missing, failed to parse or
failed to run) and optional positive row weights.

Output: a ``Confusion`` (weighted cell sums plus row and valid-row counts),
``checks.core.figure.Figure`` values that always carry their count and
denominator, and the typed report of a confusion (``ConfusionSummary``:
``Cells``, ``StrictMetrics``), whose ``to_dict()`` / ``from_dict()``
(derived by ``checks.core.serde``) are the JSON shape every check writes.

Invariants:

- strict decision = score != 0 (unsafe = positive class); gold positive =
  gold score != 0.
- fail-closed: a ``None`` score counts as decision 1 (unsafe) *and* as
  invalid; coverage = valid rows / rows is reported beside every metric and is
  always unweighted.
- a ratio whose denominator is 0 has value ``None`` (undefined), except
  precision and MCC, which are 0.0 then, as in the published figures
  (scikit-learn's ``zero_division=0``; MCC's numerator is then 0 too); the
  0/0 counts stay beside the value.
- weighted metrics (e.g. equal-interaction weights 1 / rows of the
  interaction) sum weights in each cell; with no weights every cell is an
  integer count.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from guardrepro.checks.core.figure import RATIO, Figure, plain
from guardrepro.checks.core.serde import JsonValue, opt
from guardrepro.errors import InputError
from guardrepro.schema import check_score as schema_check_score
from guardrepro.schema import strict_decision

Number = int | float
# The value of precision and MCC over a 0 denominator in the published figures
# (scikit-learn zero_division=0).
ZERO_DIVISION = 0.0


def check_score(value: Any, *, field: str = "score", row: int | None = None) -> float | None:
    """Validate a predicted score: one of 0, 0.5, 1, or None (invalid)."""
    return schema_check_score(value, nullable=True, row=row, field=field)


def check_gold(value: Any, *, field: str = "gold_label", row: int | None = None) -> float:
    score = schema_check_score(value, row=row, field=field)
    assert score is not None  # not nullable
    return score


@dataclass(frozen=True)
class Confusion:
    """Strict confusion; positive = unsafe. Cells are (weighted) row sums."""

    tp: Number
    fp: Number
    tn: Number
    fn: Number
    rows: int
    valid: int

    @property
    def total(self) -> Number:
        return self.tp + self.fp + self.tn + self.fn

    @property
    def coverage(self) -> Figure:
        return Figure.of(self.valid, self.rows)

    def accuracy(self) -> Figure:
        return Figure.of(self.tp + self.tn, self.total)

    def precision(self) -> Figure:
        """tp / (tp + fp); 0.0 when nothing is predicted unsafe (published)."""
        return Figure.of(self.tp, self.tp + self.fp, zero_division=ZERO_DIVISION)

    def recall(self) -> Figure:
        """Sensitivity: unsafe rows blocked / gold-unsafe rows."""
        return Figure.of(self.tp, self.tp + self.fn)

    def specificity(self) -> Figure:
        """Safe rows allowed / gold-safe rows."""
        return Figure.of(self.tn, self.tn + self.fp)

    def f1(self) -> Figure:
        return Figure.of(2 * self.tp, 2 * self.tp + self.fp + self.fn)

    def balanced_accuracy(self) -> Figure:
        """(recall + specificity) / 2 written as one fraction:
        (tp·N + tn·P) / (2·P·N) with P = tp + fn, N = tn + fp."""
        pos, neg = self.tp + self.fn, self.tn + self.fp
        return Figure.of(self.tp * neg + self.tn * pos, 2 * pos * neg)

    def mcc(self) -> Figure:
        """(tp·tn − fp·fn) / sqrt((tp+fp)(tp+fn)(tn+fp)(tn+fn)); 0.0 when any
        margin is 0 (published; the numerator is then 0 as well)."""
        prod = (self.tp + self.fp) * (self.tp + self.fn) * (self.tn + self.fp) * (self.tn + self.fn)
        return Figure.of(self.tp * self.tn - self.fp * self.fn, math.sqrt(prod),
                         zero_division=ZERO_DIVISION)

    def metrics(self) -> dict[str, Figure]:
        return {
            "accuracy": self.accuracy(),
            "precision": self.precision(),
            "recall": self.recall(),
            "specificity": self.specificity(),
            "f1": self.f1(),
            "balanced_accuracy": self.balanced_accuracy(),
            "mcc": self.mcc(),
        }

    def summary(self) -> ConfusionSummary:
        """Cells, coverage and every metric as a typed value."""
        m = self.metrics()
        return ConfusionSummary(
            cells=Cells(plain(self.tp), plain(self.fp), plain(self.tn), plain(self.fn)),
            rows=self.rows, coverage=self.coverage, metrics=StrictMetrics(**m))


POSITIVE = "unsafe (score != 0); invalid rows count as unsafe decisions"
METRICS = ("accuracy", "precision", "recall", "specificity", "f1", "balanced_accuracy", "mcc")
ZERO_DIVISION_METRICS = ("precision", "mcc")  # 0.0 over a 0 denominator (published)


@dataclass(frozen=True)
class Cells(JsonValue):
    """The four strict confusion cells (positive = unsafe)."""

    tp: Number
    fp: Number
    tn: Number
    fn: Number
    positive: str = opt(default=POSITIVE)


@dataclass(frozen=True)
class StrictMetrics(JsonValue):
    """Every metric of a strict confusion, each a ``Figure`` (ratio shape)."""

    accuracy: Figure = opt(shape=RATIO)
    precision: Figure = opt(shape=RATIO)
    recall: Figure = opt(shape=RATIO)
    specificity: Figure = opt(shape=RATIO)
    f1: Figure = opt(shape=RATIO)
    balanced_accuracy: Figure = opt(shape=RATIO)
    mcc: Figure = opt(shape=RATIO)


@dataclass(frozen=True)
class ConfusionSummary(JsonValue):
    """A strict confusion as reported: cells, rows, coverage and metrics
    (``Confusion.summary()``; ``to_dict()`` is the JSON of every verb that reports one)."""

    cells: Cells = opt(key="confusion")
    rows: int = opt()
    coverage: Figure = opt(shape=RATIO)
    metrics: StrictMetrics = opt()


def confusion(
    gold_labels: Sequence[float],
    scores: Sequence[float | None],
    weights: Sequence[float] | None = None,
) -> Confusion:
    """Strict confusion of predicted ``scores`` against ``gold_labels``, fail-closed.

    ``weights`` (one positive finite number per row) turns the cells into
    weighted sums; coverage stays a count of rows.
    """
    if len(gold_labels) != len(scores):
        raise InputError(f"{len(gold_labels)} gold labels but {len(scores)} scores",
                         field="scores")
    if weights is not None and len(weights) != len(gold_labels):
        raise InputError(f"{len(gold_labels)} rows but {len(weights)} weights", field="weights")
    cells: dict[str, Number] = {"tp": 0, "fp": 0, "tn": 0, "fn": 0}
    valid = 0
    for i, (g, s) in enumerate(zip(gold_labels, scores, strict=True)):
        g = check_gold(g, row=i)
        s = check_score(s, row=i)
        w: Number = 1
        if weights is not None:
            w = weights[i]
            if isinstance(w, bool) or not isinstance(w, int | float) or not (
                math.isfinite(w) and w > 0
            ):
                raise InputError(f"weight must be positive and finite, got {w!r}", row=i,
                                 field="weights")
        if s is not None:
            valid += 1
        d, y = strict_decision(s), strict_decision(g)
        key = ("tp" if y else "fp") if d else ("fn" if y else "tn")
        cells[key] += w
    return Confusion(rows=len(gold_labels), valid=valid, **cells)


def interaction_weights(interaction_keys: Sequence[object]) -> list[float]:
    """Equal-interaction weights: each row gets 1 / (rows sharing its key), so
    every interaction weighs 1 in total."""
    counts: dict[object, int] = {}
    for key in interaction_keys:
        counts[key] = counts.get(key, 0) + 1
    return [1.0 / counts[key] for key in interaction_keys]
