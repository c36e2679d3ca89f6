"""Backend options as data: name, accepted types, default, help and the
constraints a value must meet (choices, pattern, minimum, maximum).

Input: a profile's ``[backend_options]`` table. Output:
``OptionTable.check(given, file=...)``, the options over their declared
defaults, or an ``InputError`` naming the file and
``backend_options.<key>``. This module imports no backend library, so
``doctor``, the registry and the profile reader can read and enforce a
runner's options while its dependencies are missing.

Invariants: a table's names are exactly the ``[backend_options]`` keys its
runner accepts, and its defaults are the only ones: a runner (and the
pipeline's chunk size, ``doctor``'s facts) fills an absent option from here and
keeps no default of its own. A default of ``None`` means "absent" (the runner
decides). A value is never coerced: ``true`` is not an integer and ``1`` is not
a string (``spec.is_kind``); an integer is accepted where a number is meant.
``choices`` constrain string values, ``minimum`` / ``maximum`` numbers
(``open_minimum``: the minimum itself is excluded), ``pattern`` (a regular
expression matched in full) strings. What a table cannot say (a runner's
device that must exist on this machine) the runner checks itself.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from guardrepro.errors import InputError
from guardrepro.spec import check_keys, is_kind, kind_name


@dataclass(frozen=True)
class Option:
    """One declared option; for a ``pattern`` option ``help`` names the accepted
    values (it is the message's "expected ...")."""

    name: str
    types: tuple[type, ...]
    default: Any
    help: str
    choices: tuple[str, ...] | None = None
    minimum: float | None = None
    maximum: float | None = None
    open_minimum: bool = False
    pattern: str | None = None
    required: bool = False

    def problem(self, value: Any) -> str | None:
        """What is wrong with ``value`` for this option, or None when it is valid."""
        if not is_kind(value, self.types):
            return self._expected(value)
        if isinstance(value, str):
            if self.choices is not None and value not in self.choices:
                return self._expected(value)
            if self.pattern is not None and re.fullmatch(self.pattern, value) is None:
                return f"expected {self.help}, got {value!r}"
            return None
        if isinstance(value, bool):
            return None
        low, high = self.minimum, self.maximum
        if (low is not None and (value <= low if self.open_minimum else value < low)) or (
                high is not None and value > high):
            return self._expected(value)
        return None

    def _expected(self, value: Any) -> str:
        kinds = tuple(t for t in self.types if t is not str or self.choices is None)
        parts = [kind_name(kinds) + self._range()] if kinds else []
        if self.choices is not None:
            parts.append("one of " + ", ".join(repr(c) for c in self.choices))
        return f"expected {' or '.join(parts)}, got {value!r}"

    def _range(self) -> str:
        low, high = self.minimum, self.maximum
        if low is not None and high is not None:
            return f" in {'(' if self.open_minimum else '['}{low:g}, {high:g}]"
        if low is not None:
            return f" {'>' if self.open_minimum else '>='} {low:g}"
        if high is not None:
            return f" <= {high:g}"
        return ""


class CheckedOptions(dict[str, Any]):
    """Options checked against the table of backend ``backend`` and filled with
    its defaults (``OptionTable.check``): that table's ``check`` returns them
    unchanged, so a runner handed them by ``registry.create_runner`` does not
    validate them a second time."""

    def __init__(self, backend: str, values: Mapping[str, Any]) -> None:
        super().__init__(values)
        self.backend = backend

    def __reduce__(self) -> Any:  # pickled for spawned workers and Ray actors
        return (CheckedOptions, (self.backend, dict(self)))


@dataclass(frozen=True)
class OptionTable:
    backend: str
    options: tuple[Option, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(o.name for o in self.options)

    def defaults(self) -> dict[str, Any]:
        return {o.name: o.default for o in self.options}

    def option(self, name: str) -> Option:
        for option in self.options:
            if option.name == name:
                return option
        raise KeyError(name)

    def default(self, name: str) -> Any:
        return self.option(name).default

    def filled(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """``given`` over the defaults (unchecked: see ``check``)."""
        return {**self.defaults(), **given}

    def value(self, given: Mapping[str, Any], name: str) -> Any:
        """Option ``name`` as given, else its declared default."""
        return given[name] if name in given else self.default(name)

    def check(self, given: Mapping[str, Any], *, file: str | None = None) -> CheckedOptions:
        """``given`` validated against the table and filled with the defaults
        (``given`` itself when it is already this table's ``CheckedOptions``).

        A key the table does not declare, a missing required option, a value of
        the wrong type, outside its choices, pattern or range raise
        ``InputError(file=file, field="backend_options.<key>")``."""
        if isinstance(given, CheckedOptions) and given.backend == self.backend:
            return given
        check_keys(given, self.names, file=file, where="backend_options")
        for option in self.options:
            if option.required and option.name not in given:
                raise InputError(f"backend {self.backend!r} needs an explicit {option.name}: "
                                 f"{option.help}",
                                 file=file, field=f"backend_options.{option.name}")
            if option.name in given:
                problem = option.problem(given[option.name])
                if problem is not None:
                    raise InputError(f"backend {self.backend!r}: {problem}", file=file,
                                     field=f"backend_options.{option.name}")
        return CheckedOptions(self.backend, self.filled(given))
