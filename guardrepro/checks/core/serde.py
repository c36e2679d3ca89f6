"""The checks' figures in ``guardrepro.serde``'s derived JSON.

Input: the figure types of ``checks.core.figure``. Output: ``Figure`` and
``Average`` registered as a ``guardrepro.serde`` codec, so a field holding
one (alone, in a mapping or in a tuple) is written in the ``shape`` its
``opt(shape=...)`` names (``checks.core.figure.SHAPES`` and
``TABLE_SHAPES``); a ``Figure | Average`` field is read by its keys.

Invariant: the checks import the helper from here, so the codec is
registered before any of their classes is written or read.
"""

from __future__ import annotations

from typing import Any

from guardrepro.checks.core.figure import Average, Figure, decode, decode_value, encode
from guardrepro.serde.fields import (
    JsonValue,
    as_json_value,
    from_json_value,
    load_json_value,
    opt,
    register_codec,
)

__all__ = ["JsonValue", "as_json_value", "from_json_value", "load_json_value", "opt"]


def _write(value: Figure | Average, shape: str | None) -> Any:
    if shape is None:
        raise TypeError("a Figure field needs opt(shape=...)")
    return encode(value, shape)


def _read(annotation: Any, data: Any, shape: str | None) -> Figure | Average:
    if annotation is Figure:
        return decode(data, shape or "")
    return decode_value(data)  # an Average, or a union told apart by its keys


register_codec((Figure, Average), _write, _read)
