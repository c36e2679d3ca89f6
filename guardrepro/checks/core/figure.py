"""The one figure type: a count over a denominator, its point and an optional interval.

Input: a count and a denominator (integers, or weighted sums), the point
estimate (usually ``count / denominator``; a published zero-division value
when the denominator is 0) and, when a bootstrap ran, its ``CI``.

Output: a frozen ``Figure`` that every check computes and every formatter
(``checks.core.formatting``) prints, and its JSON in one of the shapes the
project's files have always used (``SHAPES``; the shape belongs to the file
format, not to the value):

- ``ratio``: ``{numerator, denominator, value}`` (metrics, coverage, gate
  figures; a gate figure with an interval adds ``interval: {point, lower,
  upper, clusters, strata}``, null for an interval over no clusters);
- ``rate``: ``{count, denominator, rate}`` (compare, frontier);
- ``count``: ``{count, denominator}`` (stats flip counts);
- ``point``: ``{count, denominator, point}`` (stats ``strict_accuracy``);
- ``statistic``: ``{point, lower, upper, count, denominator, clusters}``
  (stats intervals; no interval = null bounds over 0 clusters);
- ``rate_bounds``: ``{count, denominator, rate, lower, upper}`` (attribution;
  the clusters are named in its settings, so the interval's are not kept).
The tables' shapes (``TABLE_SHAPES``), whose interval is a ``TableCI`` (a
``CI`` with what the table records beside it):

- ``ratio_seeded``: the ratio shape whose ``interval`` is ``{lower, upper,
  replicates, seed}`` (the guard table; no interval key without a bootstrap);
- ``ratio_clustered``: the ratio shape whose ``interval`` is ``{lower, upper,
  clusters, strata}``, ``strata`` the number of strata (the gate's
  ``agreement`` section; no interval key over no rows);
- ``value_bounds``: ``{value, numerator, denominator, lower, upper,
  undefined_replicates}``, the bounds only when a bootstrap ran (ToolSafe's
  table).

A macro average (a mean of per-class ratios, ToolSafe's exact mode) has no
count and no denominator, so it is not a ``Figure``: it is an ``Average``
(point and optional ``CI``), written in the ``value_bounds`` shape without
``numerator`` and ``denominator``; the formatters read ``point``, ``lower``
and ``upper``, which both types have.

Invariants: ``decode(encode(f, s), s) == f`` for every shape that carries
the point (all but ``count``, whose point is recomputed) and the interval's
method (``ratio_seeded`` and ``value_bounds`` do not write it: read back, it is
the plain cluster bootstrap; ``decode_value`` reads ``value_bounds``); integral
counts are written as JSON integers; an undefined point is ``None``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from guardrepro.errors import InputError

Number = int | float

RATIO, RATE, COUNT, POINT, STATISTIC = "ratio", "rate", "count", "point", "statistic"
RATE_BOUNDS = "rate_bounds"
RATIO_SEEDED, RATIO_CLUSTERED, VALUE_BOUNDS = "ratio_seeded", "ratio_clustered", "value_bounds"
SHAPES = (RATIO, RATE, COUNT, POINT, STATISTIC, RATE_BOUNDS)
# the tables' shapes, whose intervals are a ``TableCI``; kept apart from SHAPES because
# the stats.json cache fingerprint hashes SHAPES and every type reachable from the
# stats result, and no stats figure uses these (a new table shape leaves caches valid)
TABLE_SHAPES = (RATIO_SEEDED, RATIO_CLUSTERED, VALUE_BOUNDS)
BOOTSTRAP = "cluster bootstrap of a ratio of sums"
STRATIFIED_BOOTSTRAP = "stratified cluster bootstrap of a ratio of sums"


@dataclass(frozen=True)
class CI:
    """A bootstrap interval: bounds (None when undefined), how it was made, the
    clusters it resampled and the strata it kept (None: unstratified)."""

    lower: float | None
    upper: float | None
    method: str = BOOTSTRAP
    clusters: int = 0
    strata: str | None = None


@dataclass(frozen=True)
class TableCI(CI):
    """An interval of a table (``TABLE_SHAPES``) with what that table records
    beside its bounds: the replicates and seed, the number of strata, the
    replicates whose estimate was undefined (None: not recorded)."""

    replicates: int | None = None
    seed: int | None = None
    strata_count: int | None = None
    undefined_replicates: int | None = None


@dataclass(frozen=True)
class Figure:
    """``count`` / ``denominator`` with its ``point`` and optional ``interval``."""

    count: Number
    denominator: Number
    point: float | None
    interval: CI | None = None

    @classmethod
    def of(cls, count: Number, denominator: Number, *, zero_division: float | None = None,
           interval: CI | None = None) -> Figure:
        """count / denominator; ``zero_division`` (None unless given) over a 0 denominator."""
        point = zero_division if denominator == 0 else count / denominator
        return cls(count, denominator, point, interval)

    @property
    def lower(self) -> float | None:
        return None if self.interval is None else self.interval.lower

    @property
    def upper(self) -> float | None:
        return None if self.interval is None else self.interval.upper

    @property
    def clusters(self) -> int:
        return 0 if self.interval is None else self.interval.clusters


@dataclass(frozen=True)
class Average:
    """A value that is no single count over a denominator (a macro average):
    its ``point`` and optional ``interval`` (module docstring)."""

    point: float | None
    interval: CI | None = None

    @property
    def lower(self) -> float | None:
        return None if self.interval is None else self.interval.lower

    @property
    def upper(self) -> float | None:
        return None if self.interval is None else self.interval.upper


def plain(x: Number) -> Number:
    """Integers stay integers in JSON; integral floats from unweighted sums too."""
    if isinstance(x, float) and x.is_integer() and abs(x) < 2**53:
        return int(x)
    return x


def _value_bounds(figure: Figure | Average) -> dict[str, Any]:
    out: dict[str, Any] = {"value": figure.point}
    if isinstance(figure, Figure):
        out["numerator"], out["denominator"] = plain(figure.count), plain(figure.denominator)
    if figure.interval is not None:
        iv = _table_ci(figure.interval)
        out.update(lower=iv.lower, upper=iv.upper, undefined_replicates=iv.undefined_replicates)
    return out


def _table_ci(iv: CI) -> TableCI:
    if not isinstance(iv, TableCI):
        raise ValueError("a table shape's interval is a TableCI")
    return iv


def _with_interval(out: dict[str, Any], iv: CI | None, keys: tuple[str, ...]) -> dict[str, Any]:
    if iv is not None:
        t = _table_ci(iv)
        values = {"lower": t.lower, "upper": t.upper, "replicates": t.replicates,
                  "seed": t.seed, "clusters": t.clusters, "strata": t.strata_count}
        out["interval"] = {k: values[k] for k in keys}
    return out


def encode(figure: Figure | Average, shape: str) -> dict[str, Any]:
    """The JSON object of ``figure`` in ``shape`` (module docstring)."""
    if shape == VALUE_BOUNDS:
        return _value_bounds(figure)
    if not isinstance(figure, Figure):
        raise ValueError(f"an average has no {shape} shape")
    count, den, point = plain(figure.count), plain(figure.denominator), figure.point
    if shape == RATIO_SEEDED:
        return _with_interval({"numerator": count, "denominator": den, "value": point},
                              figure.interval, ("lower", "upper", "replicates", "seed"))
    if shape == RATIO_CLUSTERED:
        return _with_interval({"numerator": count, "denominator": den, "value": point},
                              figure.interval, ("lower", "upper", "clusters", "strata"))
    if shape == RATIO:
        out: dict[str, Any] = {"numerator": count, "denominator": den, "value": point}
        if figure.interval is not None:
            iv = figure.interval
            out["interval"] = None if iv.clusters == 0 else {
                "point": point, "lower": iv.lower, "upper": iv.upper, "clusters": iv.clusters,
                "strata": iv.strata}
        return out
    if shape == RATE:
        return {"count": count, "denominator": den, "rate": point}
    if shape == COUNT:
        return {"count": count, "denominator": den}
    if shape == POINT:
        return {"count": count, "denominator": den, "point": point}
    if shape == STATISTIC:
        return {"point": point, "lower": figure.lower, "upper": figure.upper, "count": count,
                "denominator": den, "clusters": figure.clusters}
    if shape == RATE_BOUNDS:
        return {"count": count, "denominator": den, "rate": point, "lower": figure.lower,
                "upper": figure.upper}
    raise ValueError(f"unknown figure shape {shape!r}")


def decode(data: Mapping[str, Any], shape: str) -> Figure:
    """The inverse of ``encode``; a field the shape needs and ``data`` lacks is an
    ``InputError`` naming it."""
    try:
        if shape == RATIO:
            iv = data.get("interval", ...)
            ci = None if iv is ... else (
                CI(None, None, STRATIFIED_BOOTSTRAP, 0, None) if iv is None
                else CI(iv["lower"], iv["upper"], STRATIFIED_BOOTSTRAP, iv["clusters"],
                        iv["strata"]))
            return Figure(data["numerator"], data["denominator"], data["value"], ci)
        if shape == RATE:
            return Figure(data["count"], data["denominator"], data["rate"])
        if shape == COUNT:
            return Figure.of(data["count"], data["denominator"])
        if shape == POINT:
            return Figure(data["count"], data["denominator"], data["point"])
        if shape == STATISTIC:
            clusters = data["clusters"]
            ci = CI(data["lower"], data["upper"], BOOTSTRAP, clusters) if clusters else None
            return Figure(data["count"], data["denominator"], data["point"], ci)
        if shape == RATE_BOUNDS:
            return Figure(data["count"], data["denominator"], data["rate"],
                          CI(data["lower"], data["upper"]))
        if shape == VALUE_BOUNDS:
            value = decode_value(data)
            if not isinstance(value, Figure):
                raise InputError("a figure needs 'numerator'", field="numerator")
            return value
        if shape == RATIO_SEEDED:
            iv = data.get("interval")
            ci = None if iv is None else TableCI(iv["lower"], iv["upper"],
                                                 replicates=iv["replicates"], seed=iv["seed"])
            return Figure(data["numerator"], data["denominator"], data["value"], ci)
        if shape == RATIO_CLUSTERED:
            iv = data.get("interval")
            ci = None if iv is None else TableCI(iv["lower"], iv["upper"], STRATIFIED_BOOTSTRAP,
                                                 iv["clusters"], strata_count=iv["strata"])
            return Figure(data["numerator"], data["denominator"], data["value"], ci)
    except KeyError as exc:
        raise InputError(f"a {shape} figure needs {exc.args[0]!r}",
                         field=str(exc.args[0])) from exc
    raise ValueError(f"unknown figure shape {shape!r}")


def decode_value(data: Mapping[str, Any]) -> Figure | Average:
    """A ``value_bounds`` object read back: a ``Figure`` when it has a numerator,
    else an ``Average``."""
    try:
        ci = (TableCI(data["lower"], data["upper"],
                      undefined_replicates=data["undefined_replicates"])
              if "lower" in data else None)
        if "numerator" in data:
            return Figure(data["numerator"], data["denominator"], data["value"], ci)
        return Average(data["value"], ci)
    except KeyError as exc:
        raise InputError(f"a {VALUE_BOUNDS} figure needs {exc.args[0]!r}",
                         field=str(exc.args[0])) from exc
