"""Strict confusion and metrics against hand-computed values."""

from __future__ import annotations

import math

import pytest

from guardrepro.checks.core.figure import RATIO, Figure, encode
from guardrepro.checks.core.metrics import confusion, interaction_weights, strict_decision
from guardrepro.errors import InputError

# row:       0    1    2     3    4    5    6    7
GOLD = [0, 0, 0, 1, 1, 1, 0.5, 0]
SCORES = [0, 1, None, 1, 0, 0.5, 1, 0]
# decisions: 0    1    1*    1    0    1    1    0     (* invalid, fail-closed)
# gold:      0    0    0     1    1    1    1    0
# cells:     tn   fp   fp    tp   fn   tp   tp   tn  -> tp 3, fp 2, tn 2, fn 1


def test_strict_decision_fails_closed() -> None:
    assert [strict_decision(s) for s in (0.0, 0.5, 1.0, None)] == [0, 1, 1, 1]


def test_confusion_and_metrics_by_hand() -> None:
    c = confusion(GOLD, SCORES)
    assert (c.tp, c.fp, c.tn, c.fn) == (3, 2, 2, 1)
    assert (c.rows, c.valid) == (8, 7)
    d = c.summary().to_dict()
    assert d["coverage"] == {"numerator": 7, "denominator": 8, "value": 7 / 8}
    m = d["metrics"]
    assert (m["accuracy"]["numerator"], m["accuracy"]["denominator"]) == (5, 8)
    assert (m["precision"]["numerator"], m["precision"]["denominator"]) == (3, 5)
    assert (m["recall"]["numerator"], m["recall"]["denominator"]) == (3, 4)
    assert (m["specificity"]["numerator"], m["specificity"]["denominator"]) == (2, 4)
    assert (m["f1"]["numerator"], m["f1"]["denominator"]) == (6, 9)
    # balanced accuracy = (3/4 + 2/4) / 2 = 5/8
    assert m["balanced_accuracy"]["value"] == pytest.approx(5 / 8)
    # MCC = (3*2 - 2*1) / sqrt(5*4*4*3)
    assert m["mcc"]["value"] == pytest.approx(4 / math.sqrt(240))


def test_equal_interaction_weights_by_hand() -> None:
    keys = ["a", "a", "b", "c", "c", "c", "d", "d"]
    w = interaction_weights(keys)
    assert w == [0.5, 0.5, 1.0, 1 / 3, 1 / 3, 1 / 3, 0.5, 0.5]
    c = confusion(GOLD, SCORES, w)
    # tp: rows 3, 5 (1/3 each), 6 (1/2) = 7/6; fp: rows 1 (1/2), 2 (1) = 3/2
    # tn: rows 0, 7 = 1; fn: row 4 = 1/3
    assert c.tp == pytest.approx(7 / 6)
    assert c.fp == pytest.approx(3 / 2)
    assert c.tn == pytest.approx(1.0)
    assert c.fn == pytest.approx(1 / 3)
    assert c.total == pytest.approx(4.0)  # one per interaction
    # F1 = 2*(7/6) / (2*(7/6) + 3/2 + 1/3) = 14/25
    assert c.f1().point == pytest.approx(14 / 25)
    assert c.coverage.denominator == 8  # coverage stays a row count


def test_zero_denominators() -> None:
    # nothing predicted unsafe and no gold unsafe: precision 0/0 and MCC 0/0
    # are 0.0 as in the published figures; recall 0/0 stays undefined
    c = confusion([0, 0], [0, 0])
    assert encode(c.precision(), RATIO) == {"numerator": 0, "denominator": 0, "value": 0.0}
    assert encode(c.mcc(), RATIO) == {"numerator": 0, "denominator": 0, "value": 0.0}
    assert c.recall().point is None
    assert encode(Figure.of(0, 0), RATIO) == {"numerator": 0, "denominator": 0, "value": None}
    # read back, the 0/0 figures keep their value
    summary = c.summary()
    assert type(summary).from_dict(summary.to_dict()) == summary


@pytest.mark.parametrize(("gold", "scores"), [
    ([0, 0, 0], [0, 0, 0]),        # no positive predictions, no positives
    ([1, 1, 0], [0, 0, 0]),        # no positive predictions
    ([1, 1, 1], [1, 0, None]),     # no gold negatives
    ([0, 1, 0.5], [1, None, 1]),   # everything predicted unsafe
    (GOLD, SCORES),
])
def test_precision_and_mcc_match_scikit_learn_zero_division(gold: list, scores: list) -> None:
    metrics = pytest.importorskip("sklearn.metrics")
    y = [int(g != 0) for g in gold]
    d = [1 if s is None or s != 0 else 0 for s in scores]
    c = confusion(gold, scores)
    assert c.precision().point == pytest.approx(
        metrics.precision_score(y, d, zero_division=0))
    assert c.mcc().point == pytest.approx(metrics.matthews_corrcoef(y, d))


@pytest.mark.parametrize(
    ("gold", "scores", "weights"),
    [([0, 1], [0], None), ([0.3], [0], None), ([0], [0.7], None), ([0], [0], [0.0]),
     ([0], [True], None)],
)
def test_bad_input_raises(gold: list, scores: list, weights: list | None) -> None:
    with pytest.raises(InputError):
        confusion(gold, scores, weights)
