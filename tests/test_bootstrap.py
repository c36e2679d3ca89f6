"""The interval engine against an independent plain-Python loop
(``bootref.reference_interval``) and against intervals derivable by hand.

That loop re-implements the documented algorithm without the engine's
arrays: cluster sums in dicts, strata and clusters sorted with ``sorted``,
one ``default_rng(seed)`` making the same ``integers`` calls in the same
order (batches of 512, strata in order), each replicate summed in Python,
and NumPy's documented ``linear`` quantile (virtual index (n - 1) q; the
interpolation from the nearer end) written out by hand.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from bootref import Row, reference_interval

from guardrepro.checks.core.bootstrap import (
    DEFAULT_SEED,
    check_settings,
    cluster_table,
    difference_interval,
    ratio_interval,
    replicate_sums,
)
from guardrepro.errors import InputError


def _engine(rows: list[Row], stratified: bool, **kw: object) -> tuple[float | None, ...]:
    iv = ratio_interval([r[2] for r in rows], [r[3] for r in rows], [r[0] for r in rows],
                        [r[1] or "" for r in rows] if stratified else None, **kw)  # type: ignore[arg-type]
    return iv.lower, iv.upper, iv.undefined_replicates


# scrambled order, clusters of several rows, uneven strata, a 0/0 cluster
ROWS: list[Row] = [
    ("k3", "slack:1", 1, 1), ("k1", "banking:0", 0, 1), ("k5", "slack:1", 0, 1),
    ("k2", "banking:0", 1, 1), ("k4", "banking:1", 1, 1), ("k6", "slack:0", 0, 1),
    ("k7", "slack:0", 1, 1), ("k1", "banking:0", 1, 1), ("k8", "banking:1", 0, 0),
    ("k9", "slack:1", 1, 1), ("k10", "slack:1", 0, 1), ("k11", "banking:1", 1, 2),
]


@pytest.mark.parametrize("replicates", [1, 511, 512, 513, 1100])
@pytest.mark.parametrize("stratified", [False, True])
def test_engine_equals_independent_loop_exactly(replicates: int, stratified: bool) -> None:
    rows = ROWS if stratified else [(c, None, n, d) for c, _, n, d in ROWS]
    for seed in (DEFAULT_SEED, 7):
        want = reference_interval(rows, replicates, seed)
        got = _engine(rows, stratified, replicates=replicates, seed=seed)
        assert got == want  # exact equality, not approx


def test_zero_denominator_replicates_are_nan_and_counted() -> None:
    # A = 1/1, B = 0/0: a replicate drawing B twice has denominator 0 (NaN)
    rows: list[Row] = [("A", None, 1, 1), ("B", None, 0, 0)]
    want = reference_interval(rows, 1100, DEFAULT_SEED)
    got = _engine(rows, False, replicates=1100)
    assert got == want
    assert got[:2] == (1.0, 1.0)
    assert 0 < got[2] < 1100  # about a quarter of the replicates
    assert abs(got[2] / 1100 - 0.25) < 0.05


def test_batches_interleave_the_strata() -> None:
    # drawing each stratum's 1,100 replicates in one call would consume the
    # generator in another order than 512 + 512 + 76 per stratum in turn
    strata = [r[1] or "" for r in ROWS]
    table = cluster_table([(r[2], r[3]) for r in ROWS], [r[0] for r in ROWS], strata)
    got = replicate_sums(table, 1100, DEFAULT_SEED)
    rng = np.random.default_rng(DEFAULT_SEED)
    whole = np.zeros((1100, 2))
    for block in table.sums:
        k = block.shape[0]
        whole += block[rng.integers(0, k, size=(1100, k))].sum(axis=1)
    assert got.shape == whole.shape
    assert not np.array_equal(got, whole)


def test_alpha_is_computed_in_floating_point() -> None:
    # (1 - 0.95) / 2 is 0.025000000000000022, not 0.025: the engine uses it
    rows = [(f"c{i}", None, float(i % 7), 1.0 + (i % 3)) for i in range(40)]
    iv = ratio_interval([r[2] for r in rows], [r[3] for r in rows], [r[0] for r in rows],
                        replicates=2000)
    totals = replicate_sums(cluster_table([(r[2], r[3]) for r in rows], [r[0] for r in rows]),
                            2000, DEFAULT_SEED)
    est = totals[:, 0] / totals[:, 1]
    assert iv.lower == float(np.nanquantile(est, (1 - 0.95) / 2))
    assert iv.upper == float(np.nanquantile(est, 1 - (1 - 0.95) / 2))


def test_point_counts_and_shape() -> None:
    iv = ratio_interval([r[2] for r in ROWS], [r[3] for r in ROWS], [r[0] for r in ROWS],
                        [r[1] or "" for r in ROWS], replicates=50)
    assert iv.point == 7 / 12  # numerators 7, denominators 12
    assert (iv.numerator, iv.denominator) == (7, 12)
    assert (iv.clusters, iv.strata) == (11, 4)
    assert iv.to_dict()["numerator"] == 7 and isinstance(iv.to_dict()["numerator"], int)


def test_two_clusters_enumerated() -> None:
    # A = 1/1, B = 0/1: replicates are 0 (BB, 1/4), 1/2 (AB/BA, 1/2), 1 (AA, 1/4)
    iv = ratio_interval([1, 0], [1, 1], ["A", "B"])
    assert (iv.lower, iv.upper) == (0.0, 1.0)
    narrow = ratio_interval([1, 0], [1, 1], ["A", "B"], confidence=0.4)  # 30th/70th
    assert (narrow.lower, narrow.upper) == (0.5, 0.5)


def test_single_cluster_strata_have_zero_width() -> None:
    iv = ratio_interval([1, 0], [1, 1], ["A", "B"], ["d1:0", "d2:1"])
    assert (iv.lower, iv.upper, iv.strata) == (0.5, 0.5, 2)


def test_strata_sort_as_strings() -> None:
    # "a-b:0" sorts before "a:0" as a string ('-' < ':'), unlike the tuple order
    table = cluster_table([(1, 1), (0, 1)], ["x", "y"], ["a:0", "a-b:0"])
    assert table.strata == ["a-b:0", "a:0"]


def test_all_replicates_undefined() -> None:
    iv = ratio_interval([0, 0], [0, 0], ["A", "B"], replicates=20)
    assert (iv.point, iv.lower, iv.upper, iv.undefined_replicates) == (None, None, None, 20)


def test_difference_interval_identical_clusters() -> None:
    n = 4
    iv = difference_interval([1] * n, [2] * n, [1] * n, [4] * n, [f"c{i}" for i in range(n)],
                             replicates=300)
    assert (iv.point, iv.lower, iv.upper) == (0.25, 0.25, 0.25)


@pytest.mark.parametrize("kw", [{"replicates": 0}, {"seed": -1}, {"confidence": 1.0},
                                {"confidence": 0.0}, {"confidence": -0.5}])
def test_bad_settings_are_input_errors(kw: dict[str, float]) -> None:
    settings: dict[str, float] = {"replicates": 10, "seed": 1, "confidence": 0.95} | kw
    with pytest.raises(InputError, match=next(iter(kw))):
        check_settings(int(settings["replicates"]), int(settings["seed"]),
                       settings["confidence"])
    with pytest.raises(InputError):
        ratio_interval([1], [1], ["A"], **kw)  # type: ignore[arg-type]


def test_bad_inputs() -> None:
    with pytest.raises(InputError, match="no observations"):
        ratio_interval([], [], [])
    with pytest.raises(InputError, match="finite"):
        ratio_interval([math.nan], [1], ["A"])
    with pytest.raises(InputError, match="strings"):
        ratio_interval([1], [1], [3])  # type: ignore[list-item]


def test_clusters_counts_distinct_ids() -> None:
    # cluster "a" sits in two strata: three (stratum, cluster) sums, two clusters
    iv = ratio_interval([1, 0, 1], [1, 1, 1], ["a", "a", "b"], ["x", "y", "x"],
                        replicates=20, seed=1)
    assert iv.clusters == 2
    assert ratio_interval([1, 0, 1], [1, 1, 1], ["a", "a", "b"], replicates=20,
                          seed=1).clusters == 2
