"""The cluster bootstrap: derivable intervals and an independent re-implementation."""

from __future__ import annotations

import numpy as np
import pytest

from guardrepro.checks.bootstrap import (
    DEFAULT_SEED,
    cluster_table,
    difference_interval,
    ratio_interval,
    replicate_sums,
)
from guardrepro.errors import InputError


def test_identical_clusters_give_zero_width() -> None:
    # five clusters of two rows, each cluster 1 flip out of 2 -> every replicate 1/2
    nums = [1, 0] * 5
    dens = [1, 1] * 5
    clusters = [f"c{i // 2}" for i in range(10)]
    iv = ratio_interval(nums, dens, clusters, replicates=500)
    assert (iv.low, iv.high) == (0.5, 0.5)
    assert iv.undefined_replicates == 0


def test_two_clusters_enumerated_exactly() -> None:
    # Cluster A = 1/1, B = 0/1. A resample of two clusters is AA (ratio 1,
    # prob 1/4), AB or BA (1/2, prob 1/2) or BB (0, prob 1/4). The 2.5th
    # percentile lies in the BB mass and the 97.5th in the AA mass; the 30th
    # and 70th lie in the AB mass.
    args = ([1, 0], [1, 1], ["A", "B"])
    iv = ratio_interval(*args)
    assert (iv.low, iv.high) == (0.0, 1.0)
    mid = ratio_interval(*args, percentiles=(30.0, 70.0))
    assert (mid.low, mid.high) == (0.5, 0.5)
    # and the empirical distribution matches the enumeration (sd ~ 0.005)
    totals = replicate_sums(cluster_table([(1, 1), (0, 1)], ["A", "B"]), 10_000, DEFAULT_SEED)
    ratio = totals[:, 0] / totals[:, 1]
    for value, prob in ((0.0, 0.25), (0.5, 0.5), (1.0, 0.25)):
        assert abs(np.mean(ratio == value) - prob) < 0.02


def test_ratio_of_sums_not_mean_of_ratios() -> None:
    # A = 2/2, B = 0/1: AB gives (2+0)/(2+1) = 2/3 (a mean of ratios would give 1/2)
    iv = ratio_interval([1, 1, 0], [1, 1, 1], ["A", "A", "B"], percentiles=(30.0, 70.0))
    assert iv.low == pytest.approx(2 / 3)
    assert iv.high == pytest.approx(2 / 3)


def test_stratified_single_cluster_strata_have_zero_width() -> None:
    # one cluster per stratum: every stratified replicate is the full sample
    args = ([1, 0], [1, 1], ["A", "B"])
    strat = ratio_interval(*args, [("d1", "0"), ("d2", "1")])
    assert (strat.low, strat.high) == (0.5, 0.5)
    assert strat.stratified and strat.strata == 2
    unstrat = ratio_interval(*args)
    assert (unstrat.low, unstrat.high) == (0.0, 1.0)


def _reference_interval(values: dict[str, tuple[float, float]], stratum: dict[str, tuple],
                        replicates: int, seed: int, order: str) -> tuple[float, float]:
    """Independent re-implementation of the documented algorithm with plain
    Python loops and a hand-written linear percentile. ``order="replicate"``
    draws with ``rng.choice`` as a hand-written bootstrap would."""
    rng = np.random.default_rng(seed)
    strata = sorted(set(stratum.values()))
    ids = {s: sorted(c for c in values if stratum[c] == s) for s in strata}
    draws = {}
    if order == "stratum":
        for s in strata:
            draws[s] = rng.integers(0, len(ids[s]), size=(replicates, len(ids[s])))
    stats = []
    for b in range(replicates):
        num = den = 0.0
        for s in strata:
            if order == "stratum":
                picked = [ids[s][j] for j in draws[s][b]]
            else:
                picked = list(rng.choice(ids[s], size=len(ids[s]), replace=True))
            for c in picked:
                num += values[c][0]
                den += values[c][1]
        stats.append(num / den)
    stats.sort()

    def pct(p: float) -> float:
        pos = (len(stats) - 1) * p / 100
        lo = int(pos)
        hi = min(lo + 1, len(stats) - 1)
        return stats[lo] + (stats[hi] - stats[lo]) * (pos - lo)

    return pct(2.5), pct(97.5)


def test_matches_independent_reimplementation() -> None:
    # rows given in a scrambled order: the algorithm sorts strata and clusters
    rows = [  # (cluster, stratum, num, den)
        ("k3", ("slack", "1"), 1, 1), ("k1", ("banking", "0"), 0, 1),
        ("k5", ("slack", "1"), 0, 1), ("k2", ("banking", "0"), 1, 1),
        ("k4", ("banking", "1"), 1, 1), ("k6", ("slack", "0"), 0, 1),
        ("k7", ("slack", "0"), 1, 1), ("k1", ("banking", "0"), 1, 1),
        ("k8", ("banking", "1"), 0, 1), ("k9", ("slack", "1"), 1, 1),
    ]
    values: dict[str, tuple[float, float]] = {}
    stratum: dict[str, tuple] = {}
    for c, s, n, d in rows:
        old = values.get(c, (0.0, 0.0))
        values[c] = (old[0] + n, old[1] + d)
        stratum[c] = s
    nums, dens, clusters = [r[2] for r in rows], [r[3] for r in rows], [r[0] for r in rows]
    seen = set()
    for order in ("stratum", "replicate"):
        for seed in (DEFAULT_SEED, 7):
            want = _reference_interval(values, stratum, 400, seed, order)
            got = ratio_interval(nums, dens, clusters, [r[1] for r in rows], replicates=400,
                                 seed=seed, order=order)
            assert (got.low, got.high) == pytest.approx(want)
            assert got.draw_order == order
            # unstratified = one stratum holding every cluster
            want_u = _reference_interval(values, dict.fromkeys(values, ()), 400, seed, order)
            got_u = ratio_interval(nums, dens, clusters, replicates=400, seed=seed, order=order)
            assert (got_u.low, got_u.high) == pytest.approx(want_u)
            seen.add((order, seed, tuple(replicate_sums(
                cluster_table([(r[2], r[3]) for r in rows], clusters, [r[1] for r in rows]),
                50, seed, order)[:, 0])))
    # the two orders consume the generator differently
    assert len({s[2] for s in seen}) == 4


def test_zero_denominator_replicates_are_counted_not_used() -> None:
    # A = 1/1, B = 0/0: BB (prob 1/4) is undefined; every defined replicate is 1
    iv = ratio_interval([1, 0], [1, 0], ["A", "B"], replicates=4000)
    assert (iv.low, iv.high) == (1.0, 1.0)
    assert abs(iv.undefined_replicates / 4000 - 0.25) < 0.03


def test_difference_interval() -> None:
    # identical clusters: a = 1/2 and b = 1/4 in every replicate -> 0.25 exactly
    n = 4
    iv = difference_interval([1] * n, [2] * n, [1] * n, [4] * n, [f"c{i}" for i in range(n)],
                             replicates=300)
    assert (iv.low, iv.high) == (0.25, 0.25)


def test_cluster_in_two_strata_is_an_error() -> None:
    with pytest.raises(InputError, match="spans strata"):
        ratio_interval([1, 0], [1, 1], ["A", "A"], [("x", "0"), ("y", "0")])


def test_seed_reproducible_and_seed_sensitive() -> None:
    nums, dens = [1, 0, 1, 0, 0, 1, 1], [1] * 7
    clusters = list("abcdefg")
    a = ratio_interval(nums, dens, clusters, replicates=200, seed=1)
    b = ratio_interval(nums, dens, clusters, replicates=200, seed=1)
    assert a == b
    totals1 = replicate_sums(cluster_table([(n, 1) for n in nums], clusters), 200, 1)
    totals2 = replicate_sums(cluster_table([(n, 1) for n in nums], clusters), 200, 2)
    assert not np.array_equal(totals1, totals2)
