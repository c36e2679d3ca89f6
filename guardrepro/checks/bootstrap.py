"""Seeded percentile cluster bootstrap of a ratio of sums (optionally stratified).

Input: per-row numerator and denominator values, the row's cluster id
(``base_sample_id`` for cohort statistics) and optionally the row's stratum
(``(domain, gold strict label)`` in the published stratified view).

Output: an ``Interval`` (percentile bounds, the settings that produced them and
how many replicates were undefined).

The algorithm, exactly (reproducing an interval depends on every step):

1. Rows are summed per cluster: each cluster contributes one vector
   ``(sum of numerators, sum of denominators)`` (for a difference of two
   ratios, four sums). Every row of a cluster must share one stratum.
2. Strata are ordered by sorting their keys ascending (keys are tuples of
   strings, so ``("banking", "0") < ("banking", "1") < ("slack", "0")``);
   the unstratified view is one stratum holding every cluster. Within a
   stratum, clusters are ordered by sorting their ids ascending.
3. ``rng = numpy.random.default_rng(seed)`` is created afresh for every
   interval (each statistic is bootstrapped from the same seed). Draw order
   ``"stratum"`` (the default, vectorised): for each stratum in order, one
   call ``rng.integers(0, n_s, size=(replicates, n_s))`` draws, for every
   replicate at once, ``n_s`` cluster positions with replacement (``n_s`` =
   clusters in the stratum); replicate ``b`` sums the cluster vectors at row
   ``b`` of every stratum's draw. Draw order ``"replicate"`` (a plain loop, as
   hand-written bootstraps usually are; ``rng.choice(ids, n_s)`` makes the same
   draws): for each replicate, for each stratum in order, one call
   ``rng.integers(0, n_s, size=n_s)``. The two orders consume the generator
   differently, so their intervals differ at the edges while having the same
   distribution; the published implementation's order is not published.
4. The replicate statistic is the ratio of the summed numerators to the summed
   denominators (a ratio of sums, not a mean of per-cluster ratios); for a
   difference, ``sum(a)/sum(b) - sum(c)/sum(d)``. A replicate whose
   denominator sums to 0 is undefined: it is excluded from the percentiles and
   counted in ``undefined_replicates`` (never silently).
5. Bounds are ``numpy.percentile(defined, [2.5, 97.5])`` with NumPy's default
   ``linear`` interpolation; with no defined replicate both bounds are None.

Defaults are the published ones: 10,000 replicates, seed 260828.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from guardrepro.errors import InputError

DEFAULT_REPLICATES = 10_000
DEFAULT_SEED = 260828
DEFAULT_PERCENTILES = (2.5, 97.5)
DRAW_ORDERS = ("stratum", "replicate")
DEFAULT_DRAW_ORDER = "stratum"

StratumKey = tuple[str, ...]


@dataclass(frozen=True)
class Interval:
    low: float | None
    high: float | None
    percentiles: tuple[float, float]
    replicates: int
    seed: int
    stratified: bool
    strata: int
    clusters: int
    undefined_replicates: int
    draw_order: str = DEFAULT_DRAW_ORDER

    def to_dict(self) -> dict[str, Any]:
        return {
            "low": self.low,
            "high": self.high,
            "percentiles": list(self.percentiles),
            "replicates": self.replicates,
            "seed": self.seed,
            "stratified": self.stratified,
            "strata": self.strata,
            "clusters": self.clusters,
            "undefined_replicates": self.undefined_replicates,
            "draw_order": self.draw_order,
            "method": "percentile cluster bootstrap, ratio of sums",
        }


@dataclass(frozen=True)
class ClusterTable:
    """Cluster sums in bootstrap order: strata sorted, clusters sorted within."""

    strata: list[StratumKey]
    cluster_ids: list[list[str]]
    sums: list[np.ndarray]  # one (n_s, k) float64 array per stratum


def cluster_table(
    values: Sequence[Sequence[float]],
    clusters: Sequence[str],
    strata: Sequence[StratumKey] | None = None,
) -> ClusterTable:
    """Sum per-row value vectors per cluster and order clusters as documented."""
    if len(values) != len(clusters) or (strata is not None and len(strata) != len(clusters)):
        raise InputError("values, clusters and strata must have one entry per row")
    if not values:
        raise InputError("no rows to bootstrap")
    width = len(values[0])
    sums: dict[str, np.ndarray] = {}
    stratum_of: dict[str, StratumKey] = {}
    for i, (vec, cid) in enumerate(zip(values, clusters, strict=True)):
        if len(vec) != width:
            raise InputError(f"row has {len(vec)} values, expected {width}", row=i)
        key: StratumKey = tuple(str(k) for k in strata[i]) if strata is not None else ()
        if cid in stratum_of and stratum_of[cid] != key:
            raise InputError(
                f"cluster {cid!r} spans strata {stratum_of[cid]} and {key}", row=i, field="strata"
            )
        stratum_of[cid] = key
        arr = np.asarray(vec, dtype=np.float64)
        sums[cid] = sums[cid] + arr if cid in sums else arr.copy()
    by_stratum: dict[StratumKey, list[str]] = {}
    for cid, key in stratum_of.items():
        by_stratum.setdefault(key, []).append(cid)
    keys = sorted(by_stratum)
    ids = [sorted(by_stratum[k]) for k in keys]
    return ClusterTable(
        strata=keys,
        cluster_ids=ids,
        sums=[np.stack([sums[c] for c in group]) for group in ids],
    )


def replicate_sums(table: ClusterTable, replicates: int, seed: int,
                   order: str = DEFAULT_DRAW_ORDER) -> np.ndarray:
    """(replicates, k) array: each replicate's summed cluster vectors (step 3)."""
    if replicates < 1:
        raise InputError("replicates must be >= 1", field="replicates")
    if order not in DRAW_ORDERS:
        raise InputError(f"draw order must be one of {DRAW_ORDERS}, got {order!r}",
                         field="draw_order")
    rng = np.random.default_rng(seed)
    width = table.sums[0].shape[1]
    totals = np.zeros((replicates, width), dtype=np.float64)
    if order == "replicate":
        sizes = [block.shape[0] for block in table.sums]
        for b in range(replicates):
            for n, block in zip(sizes, table.sums, strict=True):
                totals[b] += block[rng.integers(0, n, size=n)].sum(axis=0)
        return totals
    for block in table.sums:
        n = block.shape[0]
        idx = rng.integers(0, n, size=(replicates, n))
        for j in range(width):
            totals[:, j] += block[:, j][idx].sum(axis=1)
    return totals


def _interval(
    stat: np.ndarray,
    defined: np.ndarray,
    table: ClusterTable,
    *,
    replicates: int,
    seed: int,
    percentiles: tuple[float, float],
    stratified: bool,
    order: str,
) -> Interval:
    good = stat[defined]
    low = high = None
    if good.size:
        lo, hi = np.percentile(good, list(percentiles))
        low, high = float(lo), float(hi)
    return Interval(
        low=low,
        high=high,
        percentiles=(float(percentiles[0]), float(percentiles[1])),
        replicates=replicates,
        seed=seed,
        stratified=stratified,
        strata=len(table.strata),
        clusters=sum(len(g) for g in table.cluster_ids),
        undefined_replicates=int(replicates - good.size),
        draw_order=order,
    )


def ratio_interval(
    numerators: Sequence[float],
    denominators: Sequence[float],
    clusters: Sequence[str],
    strata: Sequence[StratumKey] | None = None,
    *,
    replicates: int = DEFAULT_REPLICATES,
    seed: int = DEFAULT_SEED,
    percentiles: tuple[float, float] = DEFAULT_PERCENTILES,
    order: str = DEFAULT_DRAW_ORDER,
) -> Interval:
    """Percentile interval of sum(numerators)/sum(denominators) over resampled
    clusters; ``strata`` None = unstratified view."""
    rows = [(float(n), float(d)) for n, d in zip(numerators, denominators, strict=True)]
    table = cluster_table(rows, clusters, strata)
    totals = replicate_sums(table, replicates, seed, order)
    defined = totals[:, 1] != 0
    stat = np.divide(totals[:, 0], totals[:, 1], out=np.zeros(replicates), where=defined)
    return _interval(stat, defined, table, replicates=replicates, seed=seed,
                     percentiles=percentiles, stratified=strata is not None, order=order)


def difference_interval(
    num_a: Sequence[float],
    den_a: Sequence[float],
    num_b: Sequence[float],
    den_b: Sequence[float],
    clusters: Sequence[str],
    strata: Sequence[StratumKey] | None = None,
    *,
    replicates: int = DEFAULT_REPLICATES,
    seed: int = DEFAULT_SEED,
    percentiles: tuple[float, float] = DEFAULT_PERCENTILES,
    order: str = DEFAULT_DRAW_ORDER,
) -> Interval:
    """Interval of sum(num_a)/sum(den_a) - sum(num_b)/sum(den_b), both ratios
    taken over the same resampled clusters (a paired difference)."""
    rows = [
        (float(a), float(b), float(c), float(d))
        for a, b, c, d in zip(num_a, den_a, num_b, den_b, strict=True)
    ]
    table = cluster_table(rows, clusters, strata)
    totals = replicate_sums(table, replicates, seed, order)
    defined = (totals[:, 1] != 0) & (totals[:, 3] != 0)
    ra = np.divide(totals[:, 0], totals[:, 1], out=np.zeros(replicates), where=defined)
    rb = np.divide(totals[:, 2], totals[:, 3], out=np.zeros(replicates), where=defined)
    return _interval(ra - rb, defined, table, replicates=replicates, seed=seed,
                     percentiles=percentiles, stratified=strata is not None, order=order)


def both_views(
    numerators: Sequence[float],
    denominators: Sequence[float],
    clusters: Sequence[str],
    strata: Sequence[StratumKey],
    *,
    replicates: int = DEFAULT_REPLICATES,
    seed: int = DEFAULT_SEED,
    order: str = DEFAULT_DRAW_ORDER,
) -> dict[str, Any]:
    """{"stratified": ..., "unstratified": ...} interval dicts for one ratio."""
    return {
        name: ratio_interval(numerators, denominators, clusters, st, replicates=replicates,
                             seed=seed, order=order).to_dict()
        for name, st in (("stratified", strata), ("unstratified", None))
    }

