"""Extra paired statistics, reported beside the published ones (not part of
the published protocol; stats.json files them under ``extras``).

Input: ``pairs.Pair`` values of one edit (and of a placebo control).

Output: typed values (``checks.stats.types``; ``to_dict()`` is the JSON):

- ``exact_score``: among pairs valid on both sides, how many changed score
  (0 / 0.5 / 1), and the transition matrix of original by edited score with
  ``invalid`` and ``missing`` columns.
- ``placebo_corrected``: flip rate of the edit minus flip rate of the placebo
  over the bases having both pairs, each a ratio of sums, in both views; its
  interval resamples those bases once for both ratios
  (``bootstrap.difference_interval``, clusters = base, stratified by
  domain:gold).
"""

from __future__ import annotations

from collections.abc import Sequence

from guardrepro.checks.core.bootstrap import difference_interval
from guardrepro.checks.core.figure import Figure
from guardrepro.checks.stats.pairs import Pair
from guardrepro.checks.stats.types import (
    DifferenceInterval,
    ExactScore,
    PlaceboCorrected,
    PlaceboView,
    Transitions,
)
from guardrepro.rundir.read import MISSING, RowResult

SCORE_LABELS = ("0.0", "0.5", "1.0", "invalid", "missing")
VIEWS = ("all_pairs", "valid_both_only")


def _score_label(r: RowResult) -> str:
    if r.status == MISSING:
        return "missing"
    if r.score is None or not r.valid:
        return "invalid"
    return str(float(r.score))


def exact_score(pairs: Sequence[Pair]) -> ExactScore:
    matrix = [[0] * len(SCORE_LABELS) for _ in SCORE_LABELS]
    for p in pairs:
        i = SCORE_LABELS.index(_score_label(p.original))
        j = SCORE_LABELS.index(_score_label(p.edit))
        matrix[i][j] += 1
    valid = [p for p in pairs if p.valid_both]
    changed = sum(1 for p in valid if p.original.score != p.edit.score)
    return ExactScore(Figure.of(changed, len(valid)),
                      Transitions(SCORE_LABELS, tuple(tuple(r) for r in matrix)))


def placebo_corrected(edit: Sequence[Pair], placebo: Sequence[Pair], replicates: int,
                      seed: int, confidence: float) -> PlaceboCorrected:
    by_base = {p.base_sample_id: p for p in placebo}
    joint = [(e, by_base[e.base_sample_id]) for e in edit if e.base_sample_id in by_base]
    views: dict[str, PlaceboView] = {}
    for view in VIEWS:
        def den(p: Pair, v: str = view) -> int:
            return 1 if v == "all_pairs" else int(p.valid_both)

        def num(p: Pair, v: str = view) -> int:
            return int(p.d_orig != p.d_edit) * den(p, v)

        r_e = Figure.of(sum(num(e) for e, _ in joint), sum(den(e) for e, _ in joint))
        r_p = Figure.of(sum(num(p) for _, p in joint), sum(den(p) for _, p in joint))
        interval: DifferenceInterval | None = None
        if joint and r_e.denominator and r_p.denominator:
            iv = difference_interval(
                [num(e) for e, _ in joint], [den(e) for e, _ in joint],
                [num(p) for _, p in joint], [den(p) for _, p in joint],
                [e.base_sample_id for e, _ in joint], [e.stratum for e, _ in joint],
                replicates=replicates, seed=seed, confidence=confidence)
            interval = DifferenceInterval(iv.lower, iv.upper)
        effect = None if r_e.point is None or r_p.point is None else r_e.point - r_p.point
        views[view] = PlaceboView(r_e, r_p, effect, interval)
    return PlaceboCorrected(len(joint), views)
