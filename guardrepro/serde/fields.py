"""Plain JSON values of the project's frozen dataclasses, derived from their fields.

Input: a dataclass instance (``as_json_value``) or a class and a JSON value
(``from_json_value``); the per-field options live in ``dataclasses.field``
metadata made by ``opt``: ``key`` (the JSON key, default the field name),
``shape`` (how a value of a registered codec is written, e.g. a ``Figure``:
``checks.core.serde``), ``spread`` (a mapping field whose items sit in the
parent object itself; on reading it takes every key no other field claims),
``skip`` (not written; read back from its default), ``omit_none`` (not written
while it is None, or while every field it names is None; read back as its
default), ``group`` (written inside a nested object of that key, with the
group's other fields) and ``write``/``read`` (a function turning the field's
value into its JSON value and back).

Class options (class attributes): ``JSON_DERIVED``, the properties (or class
constants) written after the fields, each a name or a ``(key, attribute)``
pair; they are recomputed, so on reading their keys are accepted and not
read. ``JSON_ASCII``: ``to_json`` escapes non-ASCII characters.

Output: dicts, lists and scalars (``json.dumps`` ready; a ``Path`` is written
as its string), or the rebuilt value. A nested object of a class that defines
its own ``to_dict`` is written by it.

Hooks, for a shape that fields alone cannot say: a class may define
``_dump(self, out: dict) -> dict`` (adjusts the derived object) and
``_load(cls, data) -> dict`` (turns the JSON object into the fields' object
before the generic reading). ``JsonValue`` gives ``to_dict()``,
``from_dict(data, file=...)`` and ``to_json()`` (the JSON text, as written to
files). ``register_codec`` adds a value type written by its own functions
(with the field's ``shape``).

Invariants: ``from_json_value(type(x), as_json_value(x)) == x`` for every
class written with these options; key order follows field order (files are
written with sorted keys anyway). Reading is strict: a missing key, a key no
field or derived value claims (``spec.check_keys``), and a scalar of the
wrong JSON type are each an ``InputError`` naming the dotted field path (and
the file, given one).
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from collections.abc import Callable, Mapping
from functools import cache
from pathlib import Path
from typing import Any, TypeVar, Union, cast

from guardrepro.errors import InputError
from guardrepro.spec import check_keys

T = TypeVar("T")

Encoder = Callable[[Any, "str | None"], Any]
Decoder = Callable[[Any, Any, "str | None"], Any]
# (value types, writer, reader): the reader gets the annotation (a type, or the
# frozenset of a union's types) and the JSON value
_CODECS: list[tuple[tuple[type, ...], Encoder, Decoder]] = []


def register_codec(kinds: tuple[type, ...], encode: Encoder, decode: Decoder) -> None:
    """Write values of ``kinds`` with ``encode(value, shape)`` and read an annotation
    made of them with ``decode(annotation, data, shape)``."""
    if not any(k == kinds for k, _, _ in _CODECS):
        _CODECS.append((kinds, encode, decode))


def _codec_for_value(value: Any) -> Encoder | None:
    for kinds, enc, _ in _CODECS:
        if isinstance(value, kinds):
            return enc
    return None


def _codec_for_type(types_: frozenset[Any]) -> Decoder | None:
    for kinds, _, dec in _CODECS:
        if types_ <= set(kinds):
            return dec
    return None

# scalar annotations checked on reading: the JSON types each accepts (bool is
# not a number here, although Python says it is an int)
_SCALARS: dict[Any, tuple[type, ...]] = {str: (str,), bool: (bool,), int: (int,),
                                         float: (int, float)}


def opt(*, key: str | None = None, shape: str | None = None, spread: bool = False,
        skip: bool = False, omit_none: bool | tuple[str, ...] = False,
        group: str | None = None, write: Callable[[Any], Any] | None = None,
        read: Callable[[Any], Any] | None = None, **kwargs: Any) -> Any:
    """A ``dataclasses.field`` with serialisation options (module docstring)."""
    meta = {"key": key, "shape": shape, "spread": spread, "skip": skip,
            "omit_none": omit_none, "group": group, "write": write, "read": read}
    return dataclasses.field(metadata={k: v for k, v in meta.items() if v}, **kwargs)


def _omitted(value: Any, f: dataclasses.Field[Any]) -> bool:
    omit = f.metadata.get("omit_none")
    if not omit:
        return False
    names = (f.name,) if omit is True else omit
    return all(getattr(value, name) is None for name in names)


def _derived(cls: Any) -> list[tuple[str, str]]:
    """(JSON key, attribute) of each of the class's ``JSON_DERIVED`` values."""
    return [(d, d) if isinstance(d, str) else d for d in getattr(cls, "JSON_DERIVED", ())]


def _own_to_dict(value: Any) -> Callable[[], Any] | None:
    own = getattr(type(value), "to_dict", None)
    if own is None or own is JsonValue.to_dict:
        return None
    return cast(Callable[[], Any], value.to_dict)


def _dataclass_value(value: Any) -> Any:
    out: dict[str, Any] = {}
    for f in dataclasses.fields(value):
        if f.metadata.get("skip") or _omitted(value, f):
            continue
        item = getattr(value, f.name)
        write = f.metadata.get("write")
        item = write(item) if write is not None else as_json_value(item, f.metadata.get("shape"))
        group = f.metadata.get("group")
        if f.metadata.get("spread"):
            out.update(item)
        elif group is not None:
            out.setdefault(group, {})[f.metadata.get("key", f.name)] = item
        else:
            out[f.metadata.get("key", f.name)] = item
    for key, attr in _derived(type(value)):
        out[key] = as_json_value(getattr(value, attr))
    dump = getattr(value, "_dump", None)
    return dump(out) if dump is not None else out


def as_json_value(value: Any, shape: str | None = None) -> Any:
    """The plain JSON value of ``value`` (dataclasses by their fields)."""
    enc = _codec_for_value(value)
    if enc is not None:
        return enc(value, shape)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        own = _own_to_dict(value)
        return own() if own is not None else _dataclass_value(value)
    if isinstance(value, Mapping):
        return {k: as_json_value(v, shape) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [as_json_value(v, shape) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


@cache
def _hints(cls: Any) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _kind(data: Any) -> str:
    return "null" if data is None else type(data).__name__


def _expect(data: Any, kinds: tuple[type, ...] | type, what: str, at: str) -> None:
    if not isinstance(data, kinds) or (isinstance(data, bool) and bool not in (
            kinds if isinstance(kinds, tuple) else (kinds,))):
        raise InputError(f"expected {what}, got {_kind(data)}", field=at or None)


def _sub(at: str, key: Any) -> str:
    return f"{at}.{key}" if at else str(key)


def from_json_value(tp: Any, data: Any, shape: str | None = None, *, at: str = "") -> Any:
    """``data`` read back as type ``tp`` (the inverse of ``as_json_value``);
    ``at`` is the dotted path of ``data``, named in errors."""
    origin = typing.get_origin(tp)
    if tp is Any or tp is None or tp is type(None):
        return data
    if origin in (Union, types.UnionType):
        present = [a for a in typing.get_args(tp) if a is not type(None)]
        if data is None:
            return None
        dec = _codec_for_type(frozenset(present)) if len(present) > 1 else None
        if dec is not None:
            return dec(frozenset(present), data, shape)
        return from_json_value(present[0], data, shape, at=at) if len(present) == 1 else data
    dec = _codec_for_type(frozenset([tp])) if isinstance(tp, type) else None
    if dec is not None:
        return dec(tp, data, shape)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _load_dataclass(tp, data, at)
    if origin in (Mapping, dict):
        _expect(data, Mapping, "an object", at)
        _, vt = typing.get_args(tp)
        return {k: from_json_value(vt, v, shape, at=_sub(at, k)) for k, v in data.items()}
    if origin in (tuple, list):
        _expect(data, (list, tuple), "a list", at)
        args: tuple[Any, ...] = typing.get_args(tp)
        if origin is list or (len(args) == 2 and args[1] is Ellipsis):
            items = [from_json_value(args[0], v, shape, at=_sub(at, i))
                     for i, v in enumerate(data)]
            return items if origin is list else tuple(items)
        if len(args) != len(data):
            raise InputError(f"expected {len(args)} items, got {len(data)}", field=at or None)
        return tuple(from_json_value(a, v, shape, at=_sub(at, i))
                     for i, (a, v) in enumerate(zip(args, data, strict=True)))
    if tp is Path:
        _expect(data, str, "a path string", at)
        return Path(data)
    if tp in _SCALARS:
        _expect(data, _SCALARS[tp], tp.__name__, at)
    return data


def _field_value(f: dataclasses.Field[Any], hint: Any, data: Any, at: str) -> Any:
    read = f.metadata.get("read")
    if read is not None:
        return read(data)
    return from_json_value(hint, data, f.metadata.get("shape"), at=at)


def _load_dataclass(cls: type[T], data: Any, at: str = "") -> T:
    load = getattr(cls, "_load", None)
    if load is not None:
        data = load(data)
    if not isinstance(data, Mapping):
        raise InputError(f"{cls.__name__} needs a JSON object, got {_kind(data)}",
                         field=at or None)
    hints = _hints(cast(Any, cls))
    flds = [f for f in dataclasses.fields(cls) if f.init]  # type: ignore[arg-type]
    spread = any(f.metadata.get("spread") for f in flds)
    claimed = {f.metadata.get("group") or f.metadata.get("key", f.name)
               for f in flds if not f.metadata.get("spread")}
    derived = {key for key, _ in _derived(cls)}
    if not spread:
        check_keys(data, claimed | derived, where=at)
    groups: dict[str, set[str]] = {}
    for f in flds:
        if f.metadata.get("group"):
            groups.setdefault(f.metadata["group"], set()).add(f.metadata.get("key", f.name))
    for name, keys in groups.items():
        inner = data.get(name, {})
        _expect(inner, Mapping, "an object", _sub(at, name))
        check_keys(inner, keys, where=_sub(at, name))
    kwargs: dict[str, Any] = {}
    for f in flds:
        if f.metadata.get("skip"):
            continue
        if f.metadata.get("spread"):
            rest = {k: v for k, v in data.items() if k not in claimed and k not in derived}
            kwargs[f.name] = from_json_value(hints[f.name], rest, f.metadata.get("shape"), at=at)
            continue
        key, group = f.metadata.get("key", f.name), f.metadata.get("group")
        source = data if group is None else data.get(group, {})
        if key not in source:
            if (f.default is not dataclasses.MISSING
                    or f.default_factory is not dataclasses.MISSING):
                continue
            where = _sub(_sub(at, group) if group else at, key)
            raise InputError(f"{cls.__name__} needs {key!r}", field=where)
        where = _sub(_sub(at, group) if group else at, key)
        kwargs[f.name] = _field_value(f, hints[f.name], source[key], where)
    return cls(**kwargs)


def load_json_value(cls: Any, data: Any, *, file: str | None = None, at: str = "") -> Any:
    """``data`` (found at the dotted path ``at`` of ``file``) read back as the
    annotation ``cls`` (``from_json_value``); an error names the file and path."""
    try:
        return from_json_value(cls, data, at=at)
    except InputError as exc:
        if file is None or exc.file is not None:
            raise
        raise InputError(exc.message, file=file, row=exc.row, field=exc.field,
                         line=exc.line) from None


class JsonValue:
    """``to_dict()`` / ``from_dict()`` / ``to_json()`` of a dataclass (mixin)."""

    JSON_ASCII: typing.ClassVar[bool] = False

    def to_dict(self) -> Any:
        """The plain JSON value (a dict for every dataclass)."""
        return _dataclass_value(self)

    def to_json(self) -> str:
        """The JSON text, as the project writes it to files (sorted keys, indent 2)."""
        return json.dumps(self.to_dict(), indent=2, sort_keys=True,
                          ensure_ascii=self.JSON_ASCII) + "\n"

    @classmethod
    def from_dict(cls: type[T], data: Mapping[str, Any], *, file: str | None = None) -> T:
        return load_json_value(cls, data, file=file)
