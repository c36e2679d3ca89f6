"""How counts, rates and numbers are written in every readable table.

Input: ``checks.core.figure.Figure`` values (a figure read from JSON is read
back by its result type's ``from_dict``) and plain numbers that may be None. Output:
short strings for text, Markdown and HTML tables.

Invariants: an undefined number prints as ``-`` (``n/a`` where a table says
so); a fraction is always ``count/denominator`` with the count first; the JSON
keeps every digit, these strings are for reading only.
"""

from __future__ import annotations

from typing import Any

from guardrepro.checks.core.figure import Figure
from guardrepro.checks.core.figure import plain as _json_number


def frac(figure: Figure | None, empty: str = "-") -> str:
    """``count/denominator``; ``empty`` for no figure."""
    if figure is None:
        return empty
    return f"{_json_number(figure.count)}/{_json_number(figure.denominator)}"


def frac_value(figure: Figure, digits: int = 4) -> str:
    """``count/denominator (value)``, the value with ``digits`` decimals when defined."""
    value = figure.point
    return frac(figure) + ("" if value is None else f" ({value:.{digits}f})")


def value_counts(figure: Figure, digits: int = 4) -> str:
    """``value (count/denominator)``: the decimal first, its counts in brackets;
    ``- (0/0)`` when the value is undefined."""
    value = figure.point
    return ("-" if value is None else f"{value:.{digits}f}") + f" ({frac(figure)})"


def frac_percent(figure: Figure) -> str:
    """``count/denominator (12.5%)``; ``(n/a)`` when the rate is undefined."""
    value = figure.point
    pct = "n/a" if value is None else f"{100 * value:.1f}%"
    return f"{frac(figure)} ({pct})"


def frac_equals(figure: Figure | None) -> str:
    """``count/denominator = 0.125``, ``n/a`` for a missing figure or value."""
    if figure is None:
        return "n/a"
    value = figure.point
    return f"{frac(figure)} = {'n/a' if value is None else f'{value:.3f}'}"


def fixed(value: float | None, digits: int = 4, *, sign: bool = False) -> str:
    """A fixed-point number (``+`` shown with ``sign``); ``-`` when undefined."""
    if value is None:
        return "-"
    return f"{value:+.{digits}f}" if sign else f"{value:.{digits}f}"


def sig3(value: Any) -> str:
    """Three significant digits for floats, other values as they are; ``-`` for None."""
    if value is None:
        return "-"
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def fmt_num(x: float | None) -> str:
    """A figure for reading: up to 6 decimals, trailing zeros dropped (0.171875,
    0.03125, 0.0); '-' when undefined."""
    if x is None:
        return "-"
    text = f"{x:.6f}".rstrip("0")
    return text + "0" if text.endswith(".") else text


def plain(x: Any) -> str:
    """An integral number without its ``.0``, any other with ``g`` formatting."""
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def yes_no_unpinned(matched: bool | None) -> str:
    """A pin check in words: ``yes``, ``no``, or ``not pinned`` (nothing to compare with)."""
    return "not pinned" if matched is None else "yes" if matched else "no"
