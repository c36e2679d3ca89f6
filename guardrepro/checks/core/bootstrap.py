"""The interval engine: a seeded cluster bootstrap of a ratio of sums.

Every interval guardrepro reports comes from this one engine (the protocol
account is docs/PROTOCOL.md, section "Interval engine").

Input, one entry per observation: a numerator value, a denominator value, a
cluster id (a string; ``base_sample_id`` for cohort statistics) and
optionally a stratum id (a string such as ``"banking:0"``; no strata = one
stratum holding every observation). Settings: replicates (default 10,000),
seed (default 260828), confidence (default 0.95).

Output: an ``Interval`` (point estimate, bounds, the counts and settings that
produced them).

The algorithm, step by step (reproducing an interval digit for digit depends
on every step):

1. Strata are the distinct stratum ids in sorted order (``numpy.unique``).
   Within a stratum the distinct cluster ids of its observations are sorted
   (``numpy.unique``), and each cluster is summarised by the sum of its
   numerators and the sum of its denominators.
2. ``rng = numpy.random.default_rng(seed)`` is created afresh for every
   interval.
3. Replicates are drawn in batches of 512 (the last batch holds the rest).
   For each batch, for each stratum in order, one call
   ``rng.integers(0, k, size=(batch, k))`` (k = clusters in the stratum) draws
   k cluster positions with replacement for every replicate of the batch.
4. A replicate's estimate is (sum of the drawn clusters' numerator sums) /
   (sum of their denominator sums) over all strata; NaN when that
   denominator is 0.
5. Bounds: ``numpy.nanquantile(estimates, alpha)`` and
   ``numpy.nanquantile(estimates, 1 - alpha)`` with
   ``alpha = (1 - confidence) / 2`` computed in floating point and NumPy's
   default ``linear`` method. Replicates whose estimate is NaN are counted in
   ``undefined_replicates``; when every replicate is NaN the bounds are None.
6. Point = total numerator / total denominator (None when that is 0).

A mean is the ratio with denominator 1. ``difference_interval`` resamples the
same clusters with the same draws for two ratios and reports their
difference (an extra, used for placebo-corrected effects and pooled
differences). ``statistic_interval`` makes the same draws (steps 1-3) and
hands each replicate's cluster counts, as one weight per observation, to a
statistic that is not a ratio of sums (AUROC, AUPRC, ECE, a chosen
threshold); steps 5 and 6 are unchanged, the point being the statistic at
weight 1.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from guardrepro.checks.core.serde import JsonValue, opt
from guardrepro.errors import InputError
from guardrepro.limits import MAX_REPLICATES

DEFAULT_REPLICATES = 10_000
DEFAULT_SEED = 260828
DEFAULT_CONFIDENCE = 0.95
# the quicker default of the demo, the guard table and sweeps
QUICK_REPLICATES = 2000
# The fewest rows behind a verdict: a paired "better" / "worse" claim needs at
# least this many rows (and an interval of non-zero width), and a sweep ranks
# configurations by their decisions only when at least this many valid
# decisions back the ranking. Rule of three: 0 disagreements in 30 rows bound
# the disagreement rate below 10% at 95% confidence; fewer rows bound nothing
# useful.
MIN_VERDICT_ROWS = 30
NOT_ENOUGH_ROWS = "not enough rows"
BATCH = 512


def _plain(x: float | None) -> int | float | None:
    if x is None:
        return None
    return int(x) if float(x).is_integer() and abs(x) < 2**53 else float(x)


@dataclass(frozen=True)
class Interval(JsonValue):
    """A point estimate with its bootstrap bounds and how they were made (its
    sums are written as integers where they are integral)."""

    point: float | None
    lower: float | None
    upper: float | None
    numerator: float | None = opt(write=_plain)
    denominator: float | None = opt(write=_plain)
    clusters: int = opt()
    strata: int = opt()
    replicates: int = opt()
    seed: int = opt()
    confidence: float = opt()
    undefined_replicates: int = opt()


@dataclass(frozen=True)
class ClusterTable:
    """Cluster sums in draw order: strata sorted, clusters sorted within each.

    ``sums[s]`` is a (clusters in stratum s, width) float64 array; width is 2
    for a ratio (numerator, denominator) and 4 for a difference of ratios."""

    strata: list[str]
    cluster_ids: list[list[str]]
    sums: list[np.ndarray]

    @property
    def clusters(self) -> int:
        """The number of distinct cluster ids (a cluster in two strata counts once)."""
        return len({cid for ids in self.cluster_ids for cid in ids})


def check_settings(replicates: int, seed: int, confidence: float) -> None:
    """Refuse settings the engine cannot honour (InputError naming the setting)."""
    if isinstance(replicates, bool) or not isinstance(replicates, int) or replicates < 1:
        raise InputError(f"must be an integer >= 1, got {replicates!r}", field="replicates")
    if replicates > MAX_REPLICATES:
        raise InputError(f"{replicates} exceeds the maximum of {MAX_REPLICATES} replicates",
                         field="replicates")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise InputError(f"must be an integer >= 0, got {seed!r}", field="seed")
    if isinstance(confidence, bool) or not isinstance(confidence, int | float) or not (
        0 < confidence < 1
    ):
        raise InputError(f"must lie strictly between 0 and 1, got {confidence!r}",
                         field="confidence")


def cluster_table(
    values: Sequence[Sequence[float]],
    clusters: Sequence[str],
    strata: Sequence[str] | None = None,
) -> ClusterTable:
    """Sum per-observation value vectors per (stratum, cluster), in draw order."""
    n = len(values)
    if len(clusters) != n or (strata is not None and len(strata) != n):
        raise InputError("values, clusters and strata need one entry per observation")
    if n == 0:
        raise InputError("no observations to bootstrap")
    matrix = np.asarray(values, dtype=np.float64)
    if matrix.ndim != 2 or not np.all(np.isfinite(matrix)):
        raise InputError("every observation needs the same number of finite values")
    for name, given in (("clusters", clusters), ("strata", strata)):
        if given is not None:
            bad = next((i for i, x in enumerate(given) if not isinstance(x, str)), None)
            if bad is not None:
                raise InputError(f"ids must be strings, got {given[bad]!r}", row=bad,
                                 field=name)
    cluster_arr = np.asarray(list(clusters), dtype=object).astype(str)
    stratum_arr = (np.full(n, "", dtype=object) if strata is None
                   else np.asarray(list(strata), dtype=object)).astype(str)
    keys: list[str] = []
    ids: list[list[str]] = []
    sums: list[np.ndarray] = []
    for stratum in np.unique(stratum_arr):
        inside = stratum_arr == stratum
        members, inverse = np.unique(cluster_arr[inside], return_inverse=True)
        block = np.zeros((len(members), matrix.shape[1]), dtype=np.float64)
        np.add.at(block, inverse, matrix[inside])
        keys.append(str(stratum))
        ids.append([str(m) for m in members])
        sums.append(block)
    return ClusterTable(strata=keys, cluster_ids=ids, sums=sums)


def replicate_sums(table: ClusterTable, replicates: int, seed: int) -> np.ndarray:
    """(replicates, width) array: each replicate's summed drawn cluster vectors
    (steps 2 and 3 of the module docstring)."""
    check_settings(replicates, seed, DEFAULT_CONFIDENCE)
    rng = np.random.default_rng(seed)
    width = table.sums[0].shape[1]
    totals = np.zeros((replicates, width), dtype=np.float64)
    for start in range(0, replicates, BATCH):
        size = min(BATCH, replicates - start)
        for block in table.sums:
            k = block.shape[0]
            idx = rng.integers(0, k, size=(size, k))
            for j in range(width):
                totals[start:start + size, j] += block[:, j][idx].sum(axis=1)
    return totals


def ratio_estimates(numerators: np.ndarray, denominators: np.ndarray) -> np.ndarray:
    """numerators / denominators elementwise, NaN where the denominator is 0."""
    out = np.full(numerators.shape, np.nan, dtype=np.float64)
    np.divide(numerators, denominators, out=out, where=denominators != 0)
    return out


def bounds(estimates: np.ndarray, confidence: float) -> tuple[float | None, float | None]:
    """nanquantile bounds at alpha and 1 - alpha, alpha = (1 - confidence) / 2."""
    if np.all(np.isnan(estimates)):
        return None, None
    alpha = (1 - confidence) / 2
    return (float(np.nanquantile(estimates, alpha)),
            float(np.nanquantile(estimates, 1 - alpha)))


def _point(num: float, den: float) -> float | None:
    return None if den == 0 else float(num) / float(den)


def ratio_interval(
    numerators: Sequence[float],
    denominators: Sequence[float],
    clusters: Sequence[str],
    strata: Sequence[str] | None = None,
    *,
    replicates: int = DEFAULT_REPLICATES,
    seed: int = DEFAULT_SEED,
    confidence: float = DEFAULT_CONFIDENCE,
) -> Interval:
    """The interval of sum(numerators) / sum(denominators); ``strata`` None =
    one stratum (unstratified)."""
    check_settings(replicates, seed, confidence)
    if len(numerators) != len(denominators):
        raise InputError("numerators and denominators need one entry per observation")
    table = cluster_table(list(zip(numerators, denominators, strict=True)), clusters, strata)
    totals = replicate_sums(table, replicates, seed)
    estimates = ratio_estimates(totals[:, 0], totals[:, 1])
    lower, upper = bounds(estimates, confidence)
    num = math.fsum(float(x) for x in numerators)
    den = math.fsum(float(x) for x in denominators)
    return Interval(
        point=_point(num, den), lower=lower, upper=upper, numerator=num, denominator=den,
        clusters=table.clusters, strata=len(table.strata), replicates=replicates, seed=seed,
        confidence=confidence, undefined_replicates=int(np.isnan(estimates).sum()),
    )


def difference_interval(
    num_a: Sequence[float],
    den_a: Sequence[float],
    num_b: Sequence[float],
    den_b: Sequence[float],
    clusters: Sequence[str],
    strata: Sequence[str] | None = None,
    *,
    replicates: int = DEFAULT_REPLICATES,
    seed: int = DEFAULT_SEED,
    confidence: float = DEFAULT_CONFIDENCE,
) -> Interval:
    """Interval of sum(num_a)/sum(den_a) - sum(num_b)/sum(den_b), both ratios
    over the same drawn clusters (one draw per replicate, as in
    ``ratio_interval``). The result's ``numerator`` and ``denominator`` are
    None: a difference of two ratios is not one ratio."""
    check_settings(replicates, seed, confidence)
    rows = list(zip(num_a, den_a, num_b, den_b, strict=True))
    table = cluster_table(rows, clusters, strata)
    totals = replicate_sums(table, replicates, seed)
    estimates = (ratio_estimates(totals[:, 0], totals[:, 1])
                 - ratio_estimates(totals[:, 2], totals[:, 3]))
    lower, upper = bounds(estimates, confidence)
    sa, sb = math.fsum(map(float, num_a)), math.fsum(map(float, den_a))
    sc, sd = math.fsum(map(float, num_b)), math.fsum(map(float, den_b))
    pa, pb = _point(sa, sb), _point(sc, sd)
    return Interval(
        point=None if pa is None or pb is None else pa - pb, lower=lower, upper=upper,
        numerator=None, denominator=None, clusters=table.clusters, strata=len(table.strata),
        replicates=replicates, seed=seed, confidence=confidence,
        undefined_replicates=int(np.isnan(estimates).sum()),
    )


def replicate_weights(clusters: Sequence[str], strata: Sequence[str] | None, replicates: int,
                      seed: int) -> Iterator[np.ndarray]:
    """Per batch of replicates, a (batch, observations) array: how many times
    each observation's cluster was drawn, from exactly the draws of
    ``replicate_sums`` over the same clusters and strata."""
    check_settings(replicates, seed, DEFAULT_CONFIDENCE)
    n = len(clusters)
    if n == 0 or (strata is not None and len(strata) != n):
        raise InputError("clusters and strata need one entry per observation")
    cluster_arr = np.asarray(list(clusters), dtype=object).astype(str)
    stratum_arr = (np.full(n, "", dtype=object) if strata is None
                   else np.asarray(list(strata), dtype=object)).astype(str)
    blocks = []  # (observation indices, their cluster position, clusters in the stratum)
    for stratum in np.unique(stratum_arr):
        inside = np.flatnonzero(stratum_arr == stratum)
        members, inverse = np.unique(cluster_arr[inside], return_inverse=True)
        blocks.append((inside, inverse, len(members)))
    rng = np.random.default_rng(seed)
    for start in range(0, replicates, BATCH):
        size = min(BATCH, replicates - start)
        weights = np.zeros((size, n), dtype=np.float64)
        rows = np.arange(size)[:, None]
        for inside, inverse, k in blocks:
            idx = rng.integers(0, k, size=(size, k))
            counts = np.zeros((size, k), dtype=np.float64)
            np.add.at(counts, (np.broadcast_to(rows, idx.shape), idx), 1.0)
            weights[:, inside] = counts[:, inverse]
        yield weights


def statistic_interval(
    statistic: Callable[[np.ndarray], np.ndarray],
    clusters: Sequence[str],
    strata: Sequence[str] | None = None,
    *,
    replicates: int = DEFAULT_REPLICATES,
    seed: int = DEFAULT_SEED,
    confidence: float = DEFAULT_CONFIDENCE,
) -> Interval:
    """The interval of ``statistic`` ((replicates, observations) weights ->
    (replicates,) estimates, NaN where undefined) over the engine's draws;
    the point is ``statistic`` at weight 1 for every observation."""
    check_settings(replicates, seed, confidence)
    estimates = np.concatenate([statistic(w) for w in
                                replicate_weights(clusters, strata, replicates, seed)])
    lower, upper = bounds(estimates, confidence)
    point = float(statistic(np.ones((1, len(clusters))))[0])
    n_clusters = len(set(clusters))
    n_strata = 1 if strata is None else len(set(strata))
    return Interval(
        point=None if math.isnan(point) else point, lower=lower, upper=upper, numerator=None,
        denominator=None, clusters=n_clusters, strata=n_strata, replicates=replicates,
        seed=seed, confidence=confidence,
        undefined_replicates=int(np.isnan(estimates).sum()),
    )
