"""The rules defined once and used everywhere: the score check, the strict
decision and the fraction / number formatting of readable tables."""

from __future__ import annotations

import pytest

from guardrepro.checks.core.figure import RATE, RATIO, Figure, decode, encode
from guardrepro.checks.core.formatting import (
    fixed,
    fmt_num,
    frac,
    frac_equals,
    frac_percent,
    frac_value,
    sig3,
)
from guardrepro.errors import InputError
from guardrepro.schema import check_score, is_score


@pytest.mark.parametrize("value", [0, 0.5, 1, 0.0, 1.0])
def test_scores_are_0_half_or_1(value: float) -> None:
    assert is_score(value) and check_score(value) == float(value)


@pytest.mark.parametrize("value", [True, False, 0.7, 2, -1, "1", None, float("nan")])
def test_anything_else_is_refused_naming_where(value: object) -> None:
    with pytest.raises(InputError) as info:
        check_score(value, file="f.jsonl", row=4, field="gold_label")
    err = info.value
    assert (err.file, err.row, err.field) == ("f.jsonl", 4, "gold_label")
    assert "expected 0, 0.5 or 1, got" in str(err)


def test_null_only_where_a_prediction_may_be_invalid() -> None:
    assert check_score(None, nullable=True) is None
    with pytest.raises(InputError, match=r"expected 0, 0.5, 1 or null, got 0.25"):
        check_score(0.25, nullable=True, line=2)


def test_one_figure_in_every_file_shape() -> None:
    fig = Figure.of(3, 8)
    assert encode(fig, RATIO) == {"numerator": 3, "denominator": 8, "value": 0.375}
    assert encode(fig, RATE) == {"count": 3, "denominator": 8, "rate": 0.375}
    assert decode(encode(fig, RATE), RATE) == decode(encode(fig, RATIO), RATIO) == fig
    assert frac(fig) == frac(decode(encode(fig, RATE), RATE)) == "3/8"
    assert frac(None) == "-" and frac(None, "n/a") == "n/a"
    assert frac_value(fig) == "3/8 (0.3750)"
    assert frac_percent(fig) == "3/8 (37.5%)"
    assert frac_percent(Figure.of(0, 0)) == "0/0 (n/a)"
    assert frac_equals(fig) == "3/8 = 0.375" and frac_equals(None) == "n/a"
    assert frac(Figure.of(2.0, 4.0)) == "2/4"  # integral weighted sums print as integers


def test_numbers() -> None:
    assert fmt_num(0.171875) == "0.171875" and fmt_num(0.5) == "0.5" and fmt_num(0.0) == "0.0"
    assert fmt_num(None) == "-"
    assert fixed(0.12345) == "0.1235" and fixed(0.5, 4, sign=True) == "+0.5000"
    assert fixed(None) == "-"
    assert sig3(1234.5) == "1.23e+03" and sig3(7) == "7" and sig3(None) == "-"
