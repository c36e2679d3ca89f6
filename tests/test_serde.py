"""The one figure type in every file shape, and the field-driven JSON helper."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

import pytest

from guardrepro.checks.core.figure import (
    CI,
    COUNT,
    POINT,
    RATE,
    RATE_BOUNDS,
    RATIO,
    SHAPES,
    STATISTIC,
    Figure,
    decode,
    encode,
)
from guardrepro.checks.core.serde import JsonValue, as_json_value, from_json_value, opt
from guardrepro.errors import InputError


@pytest.mark.parametrize("shape", SHAPES)
def test_every_shape_reads_back_what_it_wrote(shape: str) -> None:
    carried = {STATISTIC: Figure(3, 8, 0.375, CI(0.125, 0.625, clusters=8)),
               RATE_BOUNDS: Figure(3, 8, 0.375, CI(0.125, 0.625))}  # bounds, no clusters
    fig = carried.get(shape, Figure.of(3, 8))
    assert decode(json.loads(json.dumps(encode(fig, shape))), shape) == fig


def test_the_shapes_by_hand() -> None:
    fig = Figure(3, 8, 0.375, CI(0.125, 0.625, clusters=8))
    assert encode(fig, STATISTIC) == {"point": 0.375, "lower": 0.125, "upper": 0.625,
                                      "count": 3, "denominator": 8, "clusters": 8}
    assert encode(Figure(0, 0, None), STATISTIC) == {
        "point": None, "lower": None, "upper": None, "count": 0, "denominator": 0,
        "clusters": 0}
    assert encode(Figure.of(3, 8), COUNT) == {"count": 3, "denominator": 8}
    assert encode(Figure.of(3, 8), POINT) == {"count": 3, "denominator": 8, "point": 0.375}
    assert encode(Figure.of(0, 0), RATE) == {"count": 0, "denominator": 0, "rate": None}
    # a weighted count that is integral is written as an integer, 0/0 keeps its value
    assert encode(Figure.of(2.0, 4.0), RATIO) == {"numerator": 2, "denominator": 4,
                                                  "value": 0.5}
    assert encode(Figure.of(0, 0, zero_division=0.0), RATIO)["value"] == 0.0


def test_a_missing_figure_key_is_named() -> None:
    with pytest.raises(InputError) as info:
        decode({"count": 1, "rate": 0.5}, RATE)
    assert info.value.field == "denominator"


@dataclass(frozen=True)
class Inner(JsonValue):
    hits: Figure = opt(shape=RATE)
    label: str = "x"


@dataclass(frozen=True)
class Outer(JsonValue):
    per_key: Mapping[str, Figure] = opt(shape=STATISTIC, spread=True)
    inner: Inner = opt(key="nested")
    items: tuple[int, ...] = opt()
    maybe: Inner | None = None
    extra: Mapping[str, str] = field(default_factory=dict)


def test_fields_drive_the_json_and_its_reading() -> None:
    value = Outer({"a": Figure(1, 2, 0.5, CI(0.0, 1.0, clusters=2))}, Inner(Figure.of(1, 4)),
                  (1, 2), None, {"k": "v"})
    data = value.to_dict()
    assert data == {"a": {"point": 0.5, "lower": 0.0, "upper": 1.0, "count": 1,
                          "denominator": 2, "clusters": 2},
                    "nested": {"hits": {"count": 1, "denominator": 4, "rate": 0.25},
                               "label": "x"},
                    "items": [1, 2], "maybe": None, "extra": {"k": "v"}}
    assert Outer.from_dict(json.loads(value.to_json())) == value
    assert as_json_value(value) == data
    assert from_json_value(Outer, data) == value


def test_a_missing_key_is_named() -> None:
    with pytest.raises(InputError) as info:
        Inner.from_dict({"label": "y"})
    assert info.value.field == "hits"


def test_table_shapes_write_what_each_table_records() -> None:
    """The tables' shapes, written by hand from the files they reproduce: the
    guard table's interval keeps replicates and seed, the gate agreement's its
    clusters and number of strata, ToolSafe's figures their undefined replicates;
    a macro average has no counts."""
    from guardrepro.checks.core.figure import (
        RATIO_CLUSTERED,
        RATIO_SEEDED,
        VALUE_BOUNDS,
        Average,
        TableCI,
        decode_value,
    )

    seeded = Figure(3, 4, 0.75, TableCI(0.5, 1.0, replicates=200, seed=7))
    assert encode(seeded, RATIO_SEEDED) == {
        "numerator": 3, "denominator": 4, "value": 0.75,
        "interval": {"lower": 0.5, "upper": 1.0, "replicates": 200, "seed": 7}}
    assert decode(encode(seeded, RATIO_SEEDED), RATIO_SEEDED) == seeded
    assert encode(Figure(0, 0, None), RATIO_SEEDED) == {
        "numerator": 0, "denominator": 0, "value": None}  # no bootstrap: no interval key
    clustered = Figure(3, 8, 0.375, TableCI(0.1, 0.6, "stratified cluster bootstrap of a "
                                            "ratio of sums", 6, strata_count=4))
    assert encode(clustered, RATIO_CLUSTERED)["interval"] == {
        "lower": 0.1, "upper": 0.6, "clusters": 6, "strata": 4}
    assert decode(encode(clustered, RATIO_CLUSTERED), RATIO_CLUSTERED) == clustered
    macro = Average(0.5, TableCI(0.25, 0.75, undefined_replicates=2))
    assert encode(macro, VALUE_BOUNDS) == {"value": 0.5, "lower": 0.25, "upper": 0.75,
                                           "undefined_replicates": 2}
    assert decode_value(encode(macro, VALUE_BOUNDS)) == macro
    ratio = Figure(2.0, 4.0, 0.5)
    assert encode(ratio, VALUE_BOUNDS) == {"value": 0.5, "numerator": 2, "denominator": 4}
    assert encode(Average(None), VALUE_BOUNDS) == {"value": None}
    with pytest.raises(ValueError, match="average"):
        encode(macro, RATIO)
    with pytest.raises(ValueError, match="TableCI"):  # a table's interval records more
        encode(Figure(1, 2, 0.5, CI(0.0, 1.0)), RATIO_SEEDED)
