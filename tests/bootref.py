"""An independent plain-Python re-implementation of the interval engine
(docs/PROTOCOL.md, "Interval engine"), for tests: cluster sums in dicts, strata and
clusters sorted with ``sorted``, one ``default_rng(seed)`` making the same
``integers`` calls in the same order (batches of 512, strata in order), each
replicate summed in a Python loop, and NumPy's documented ``linear``
quantile (virtual index (n - 1) q, interpolated from the nearer end) written
out by hand."""

from __future__ import annotations

import math

import numpy as np

Row = tuple[str, str | None, float, float]  # cluster, stratum, numerator, denominator


def _linear_quantile(values: list[float], q: float) -> float:
    xs = sorted(values)
    pos = (len(xs) - 1) * q
    lo = math.floor(pos)
    if pos >= len(xs) - 1:
        return xs[-1]
    a, b, g = xs[lo], xs[lo + 1], pos - lo
    return b - (b - a) * (1 - g) if g >= 0.5 else a + (b - a) * g


def reference_interval(rows: list[Row], replicates: int, seed: int,
                       confidence: float = 0.95) -> tuple[float | None, float | None, int]:
    sums: dict[tuple[str, str], list[float]] = {}
    for cluster, stratum, num, den in rows:
        key = ("" if stratum is None else stratum, cluster)
        acc = sums.setdefault(key, [0.0, 0.0])
        acc[0] += num
        acc[1] += den
    strata = sorted({s for s, _ in sums})
    members = {s: sorted(c for t, c in sums if t == s) for s in strata}
    rng = np.random.default_rng(seed)
    estimates: list[float] = []
    done = 0
    while done < replicates:
        size = min(512, replicates - done)
        draws = {s: rng.integers(0, len(members[s]), size=(size, len(members[s])))
                 for s in strata}
        for b in range(size):
            num = den = 0.0
            for s in strata:
                for j in draws[s][b]:
                    num += sums[(s, members[s][int(j)])][0]
                    den += sums[(s, members[s][int(j)])][1]
            estimates.append(num / den if den != 0 else math.nan)
        done += size
    defined = [e for e in estimates if not math.isnan(e)]
    alpha = (1 - confidence) / 2
    if not defined:
        return None, None, len(estimates)
    return (_linear_quantile(defined, alpha), _linear_quantile(defined, 1 - alpha),
            len(estimates) - len(defined))
