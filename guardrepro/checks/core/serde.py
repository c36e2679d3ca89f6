"""Plain JSON values of the checks' frozen dataclasses, derived from their fields.

Input: a dataclass instance (``as_json_value``) or a class and a JSON value
(``from_json_value``); the per-field options live in ``dataclasses.field``
metadata made by ``opt``: ``key`` (the JSON key, default the field name),
``shape`` (how a ``Figure`` in the field, or in its mapping/tuple, is written:
``checks.core.figure.SHAPES`` and ``TABLE_SHAPES``), ``spread`` (a mapping field
whose items sit in the parent object itself; on reading it takes every key no
other field claims)
and ``skip`` (not written; read back from its default).

Output: dicts, lists and scalars (``json.dumps`` ready), or the rebuilt value.

Hooks, for a shape that fields alone cannot say: a class may define
``_dump(self, out: dict) -> dict`` (adjusts the derived object) and
``_load(cls, data) -> dict`` (turns the JSON object into the fields' object
before the generic reading). ``JsonValue`` gives ``to_dict()``,
``from_dict()`` and ``to_json()`` (the JSON text, as written to files).

Invariants: ``from_json_value(type(x), as_json_value(x)) == x`` for every
class written with these options; key order follows field order (files are
written with sorted keys anyway); a missing key is an ``InputError`` naming
it.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from collections.abc import Mapping
from functools import cache
from typing import Any, TypeVar, Union, cast

from guardrepro.checks.core.figure import CI, Average, Figure, decode, decode_value, encode
from guardrepro.errors import InputError

T = TypeVar("T")


def opt(*, key: str | None = None, shape: str | None = None, spread: bool = False,
        skip: bool = False, **kwargs: Any) -> Any:
    """A ``dataclasses.field`` with serialisation options (module docstring)."""
    meta = {"key": key, "shape": shape, "spread": spread, "skip": skip}
    return dataclasses.field(metadata={k: v for k, v in meta.items() if v}, **kwargs)


def as_json_value(value: Any, shape: str | None = None) -> Any:
    """The plain JSON value of ``value`` (dataclasses by their fields)."""
    if isinstance(value, Figure | Average):
        if shape is None:
            raise TypeError("a Figure field needs opt(shape=...)")
        return encode(value, shape)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out: dict[str, Any] = {}
        for f in dataclasses.fields(value):
            if f.metadata.get("skip"):
                continue
            item = as_json_value(getattr(value, f.name), f.metadata.get("shape"))
            if f.metadata.get("spread"):
                out.update(item)
            else:
                out[f.metadata.get("key", f.name)] = item
        dump = getattr(value, "_dump", None)
        return dump(out) if dump is not None else out
    if isinstance(value, Mapping):
        return {k: as_json_value(v, shape) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [as_json_value(v, shape) for v in value]
    return value


@cache
def _hints(cls: Any) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def from_json_value(tp: Any, data: Any, shape: str | None = None) -> Any:
    """``data`` read back as type ``tp`` (the inverse of ``as_json_value``)."""
    origin = typing.get_origin(tp)
    if tp is Any or tp is None or tp is type(None):
        return data
    if origin in (Union, types.UnionType):
        present = [a for a in typing.get_args(tp) if a is not type(None)]
        if data is None:
            return None
        if set(present) == {Figure, Average}:
            return decode_value(data)
        return from_json_value(present[0], data, shape) if len(present) == 1 else data
    if tp is Figure:
        return decode(data, shape or "")
    if tp is CI or (isinstance(tp, type) and dataclasses.is_dataclass(tp)):
        return _load_dataclass(tp, data)
    if origin in (Mapping, dict):
        _, vt = typing.get_args(tp)
        return {k: from_json_value(vt, v, shape) for k, v in data.items()}
    if origin is tuple:
        args: tuple[Any, ...] = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(from_json_value(args[0], v, shape) for v in data)
        return tuple(from_json_value(a, v, shape) for a, v in zip(args, data, strict=True))
    if origin is list:
        item = typing.get_args(tp)[0]
        return [from_json_value(item, v, shape) for v in data]
    return data


def _load_dataclass(cls: type[T], data: Any) -> T:
    load = getattr(cls, "_load", None)
    if load is not None:
        data = load(data)
    if not isinstance(data, Mapping):
        raise InputError(f"{cls.__name__} needs a JSON object, got {type(data).__name__}")
    hints = _hints(cast(Any, cls))
    flds = [f for f in dataclasses.fields(cls) if f.init]  # type: ignore[arg-type]
    claimed = {f.metadata.get("key", f.name) for f in flds if not f.metadata.get("spread")}
    kwargs: dict[str, Any] = {}
    for f in flds:
        if f.metadata.get("skip"):
            continue
        shape = f.metadata.get("shape")
        if f.metadata.get("spread"):
            rest = {k: v for k, v in data.items() if k not in claimed}
            kwargs[f.name] = from_json_value(hints[f.name], rest, shape)
            continue
        key = f.metadata.get("key", f.name)
        if key not in data:
            if (f.default is not dataclasses.MISSING
                    or f.default_factory is not dataclasses.MISSING):
                continue
            raise InputError(f"{cls.__name__} needs {key!r}", field=key)
        kwargs[f.name] = from_json_value(hints[f.name], data[key], shape)
    return cls(**kwargs)


class JsonValue:
    """``to_dict()`` / ``from_dict()`` / ``to_json()`` of a dataclass (mixin)."""

    def to_dict(self) -> Any:
        """The plain JSON value (a dict for every dataclass)."""
        return as_json_value(self)

    def to_json(self) -> str:
        """The JSON text, as the project writes it to files (sorted keys, indent 2)."""
        return json.dumps(self.to_dict(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"

    @classmethod
    def from_dict(cls: type[T], data: Mapping[str, Any]) -> T:
        return _load_dataclass(cls, data)
