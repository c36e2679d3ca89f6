"""The one strict reader of TOML and JSON specs.

Input: a parsed table (a ``dict`` from ``tomllib`` or ``json``) or the path of a
TOML file. Output: typed values taken one key at a time, or an ``InputError``
(or the subclass a caller names, e.g. ``LockError``) that names the file, the row
or line where one applies, the dotted field path and the problem, always in the
same words:

- ``unknown key 'x' (known: a, b)`` (plus ``did you mean 'y'?`` when one is close)
- ``missing key``
- ``expected an integer, got 'x'``
- ``invalid TOML: ...`` / ``not UTF-8: ...``

- ``this is a run profile, not a lock (expected by `fetch`)`` when a file of one
  spec kind is given where another is read (``expect_kind``)

Spec kinds. A spec's kind is what its own ``kind`` key declares where its
format has one (a lock's ``checkpoint`` / ``files``, a cohort's ``split``),
else it is inferred from the top-level keys only that kind has (``KINDS``).
Every reader calls ``expect_kind`` before its key checks, so a file of the
wrong kind is named as such instead of failing on its first unknown key.

Invariants: a key is never coerced (``true`` is not an integer, ``1`` is not a
string, an integer is accepted where a float is meant and returned as given);
every key of a table must be taken, or declared with ``only``, before ``done``
passes. The hex patterns every pin uses (40-hex revisions, 64-hex SHA-256 digests)
are defined here once.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from guardrepro.errors import InputError
from guardrepro.limits import parse_toml_text

HEX40 = re.compile(r"^[0-9a-f]{40}$")
"""A git revision (commit or tree id): 40 lowercase hex digits."""
HEX64 = re.compile(r"^[0-9a-f]{64}$")
"""A SHA-256 digest: 64 lowercase hex digits."""

REQUIRED: Any = object()
"""Default of ``Table.take`` meaning the key must be present."""

_NAMES: dict[type, str] = {
    str: "a string",
    int: "an integer",
    float: "a number",
    bool: "true or false",
    dict: "a table",
    list: "a list",
}


def kind_name(kind: type | tuple[type, ...]) -> str:
    """``int`` -> 'an integer'; ``(int, float)`` -> 'a number'."""
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if set(kinds) == {int, float}:
        return "a number"
    return " or ".join(_NAMES.get(k, k.__name__) for k in kinds)


def is_kind(value: Any, kind: type | tuple[type, ...]) -> bool:
    """``isinstance`` without the bool-is-an-int trap (unless bool is asked for)."""
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if isinstance(value, bool) and bool not in kinds:
        return False
    return isinstance(value, kinds)


def type_problem(value: Any, kind: type | tuple[type, ...]) -> str:
    """The one wording of a type mismatch."""
    return f"expected {kind_name(kind)}, got {value!r}"


def unknown_problem(key: str, known: Iterable[str]) -> str:
    """The one wording of a key that is not part of the format."""
    names = sorted(known)
    close = difflib.get_close_matches(key, names, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"unknown key {key!r} (known: {', '.join(names)}){hint}"


def check_keys(
    data: Mapping[str, Any],
    known: Iterable[str],
    *,
    file: str | None = None,
    where: str = "",
    row: int | None = None,
    line: int | None = None,
    required: Iterable[str] = (),
    error: type[InputError] = InputError,
) -> None:
    """Refuse keys outside ``known`` (the first in sorted order), then missing ones.

    ``where`` is the dotted path of ``data`` ('' for the top level); the error's
    field is ``where.key``.
    """
    names = set(known)
    prefix = f"{where}." if where else ""
    unknown = sorted(set(data) - names)
    if unknown:
        raise error(unknown_problem(unknown[0], names), file=file, row=row, line=line,
                    field=prefix + unknown[0])
    missing = sorted(set(required) - set(data))
    if missing:
        raise error("missing key", file=file, row=row, line=line, field=prefix + missing[0])


# kind -> (name in messages, declared ``kind`` values, keys whose presence infers it);
# tested in order, the first whose signature keys are all present wins.
KINDS: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {
    "lock": ("a lock", ("checkpoint", "files"), ("source", "file")),
    "run_profile": ("a run profile", (), ("backend", "decoding")),
    "cohort": ("a cohort spec", ("split",), ("benchmark", "data_lock")),
    "gate": ("a gate spec", (), ("reference", "thresholds")),
    "published": ("a published-figures spec", (), ("figure",)),
    "published_tables": ("a published-tables spec", (), ("row", "aliases")),
    "sweep": ("a sweep spec", (), ("sweep",)),
    "recipe": ("a quantization recipe", (), ("recipe",)),
    "guard": ("a guard spec", ("guard",), ("prompt", "parser")),
    "cohort_rows": ("a cohort (JSONL rows)", (), ("sample", "axis")),
    "records": ("a run's records", (), ("provenance", "attempts")),
    "predictions": ("a predictions file", (), ("base_sample_id", "variant", "score")),
}


def infer_kind(data: Any) -> str | None:
    """The kind of a parsed spec or JSON row (a ``KINDS`` key), or None when unknown."""
    if not isinstance(data, Mapping):
        return None
    declared = data.get("kind")
    for kind, (_name, values, _keys) in KINDS.items():
        if isinstance(declared, str) and declared in values:
            return kind
    for kind, (_name, _values, keys) in KINDS.items():
        if all(k in data for k in keys):
            return kind
    return None


def _verb() -> str | None:
    """The CLI verb being run (``fetch``, ``cohort build``), None outside the CLI."""
    try:
        import click
    except ImportError:  # pragma: no cover - click is a core dependency
        return None
    ctx = click.get_current_context(silent=True)
    names = []
    while ctx is not None:
        names.append(ctx.info_name or "")
        ctx = ctx.parent
    path = " ".join(reversed(names[:-1])).strip()
    return path or None


def kind_problem(found: str, expected: str, verb: str | None = None) -> str:
    """The one wording of a file of the wrong kind."""
    by = f" (expected by `{verb}`)" if verb else ""
    return f"this is {KINDS[found][0]}, not {KINDS[expected][0]}{by}"


def expect_kind(data: Any, expected: str, *, file: str | None = None, row: int | None = None,
                line: int | None = None, error: type[InputError] = InputError) -> None:
    """Refuse ``data`` when it is recognisably another kind than ``expected``
    (unrecognised data passes on to the reader's own key checks)."""
    found = infer_kind(data)
    if found is not None and found != expected:
        raise error(kind_problem(found, expected, _verb()), file=file, row=row, line=line)


class Table:
    """Take typed values out of one table; ``done`` refuses whatever is left.

    ``where`` is the table's dotted path ('recipe', 'figure[2]'); errors carry
    ``file``, ``row``/``line`` and ``where.key`` as their field.
    """

    def __init__(
        self,
        data: Any,
        file: str | None,
        where: str = "",
        *,
        row: int | None = None,
        line: int | None = None,
        error: type[InputError] = InputError,
    ) -> None:
        self.file, self.where, self.row, self.line, self.error = file, where, row, line, error
        if not isinstance(data, Mapping):
            raise error(type_problem(data, dict), file=file, row=row, line=line,
                        field=where or None)
        self.data = dict(data)
        self._known: set[str] = set()

    def path(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def fail(self, key: str | None, problem: str) -> InputError:
        """An error (to raise) about ``key`` of this table (None: the table itself)."""
        field = self.path(key) if key is not None else (self.where or None)
        return self.error(problem, file=self.file, row=self.row, line=self.line, field=field)

    def only(self, *keys: str) -> None:
        """Refuse unknown keys now, before any value is read (the clearest error first)."""
        self._known.update(keys)
        check_keys(self.data, self._known, file=self.file, where=self.where, row=self.row,
                   line=self.line, error=self.error)

    def take(self, key: str, kind: type | tuple[type, ...], default: Any = REQUIRED) -> Any:
        """The value of ``key``, checked to be of ``kind``; ``default`` when absent
        (absent without a default is a 'missing key' error)."""
        self._known.add(key)
        if key not in self.data:
            if default is REQUIRED:
                raise self.fail(key, "missing key")
            return default
        value = self.data.pop(key)
        if not is_kind(value, kind):
            raise self.fail(key, type_problem(value, kind))
        return value

    def pattern(self, key: str, regex: re.Pattern[str], what: str,
                default: Any = REQUIRED) -> Any:
        """A string value that must fully match ``regex`` (``what`` names the format)."""
        value = self.take(key, str, default)
        if value is not default and not regex.fullmatch(value):
            raise self.fail(key, f"expected {what}, got {value!r}")
        return value

    def sub(self, key: str, default: Any = REQUIRED) -> Table:
        """The nested table under ``key`` (an empty one when absent and allowed)."""
        value = self.take(key, dict, {} if default is not REQUIRED else REQUIRED)
        return Table(value, self.file, self.path(key), row=self.row, line=self.line,
                     error=self.error)

    def done(self) -> None:
        """Every key must have been taken; anything left is an unknown key."""
        if self.data:
            leftover = sorted(self.data)
            raise self.fail(leftover[0], unknown_problem(leftover[0], self._known))


def read_toml(path: str | Path, what: str = "spec", *,
              error: type[InputError] = InputError) -> tuple[dict[str, Any], str]:
    """Parse a TOML file; returns the table and the text. Missing file, unreadable
    bytes, non-UTF-8 and invalid TOML are each an error naming the file."""
    file = str(path)
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        raise error(f"{what} not found", file=file) from None
    except OSError as exc:
        raise error(f"cannot read {what}: {exc.strerror or exc}", file=file) from None
    return parse_toml(raw, file, error=error)


def parse_toml(raw: bytes, file: str | None, *,
               error: type[InputError] = InputError) -> tuple[dict[str, Any], str]:
    """Decode and parse TOML bytes already read (e.g. to hash them too)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"not UTF-8: {exc}", file=file) from None
    return parse_toml_text(text, file=file, error=error), text


def load_toml(path: str | Path, what: str = "spec", *,
              error: type[InputError] = InputError) -> dict[str, Any]:
    """``read_toml`` without the text."""
    return read_toml(path, what, error=error)[0]


SPEC_PROBE_BYTES = 1 << 20  # a spec is small; a larger file is not read as one


def check_cohort_path(path: Path) -> None:
    """What ``--cohort`` names, checked before a verb's heavy imports: a missing
    file, a directory, or a spec (TOML) where the built cohort (JSONL rows) is
    expected is an InputError saying what to do; anything else is left to the
    cohort reader (``rundir.cohort.read_cohort``)."""
    file = str(path)
    if not path.exists():
        raise InputError("cohort file not found", file=file)
    if path.is_dir():
        raise InputError("a directory, not a cohort file (JSONL rows)", file=file)
    with path.open("rb") as handle:
        head = handle.read(SPEC_PROBE_BYTES + 1)
    if len(head) > SPEC_PROBE_BYTES or head.lstrip()[:1] in (b"{", b""):
        return
    try:
        data = parse_toml_text(head.decode("utf-8"), file=file)
    except (InputError, UnicodeDecodeError):
        return
    found = infer_kind(data)
    if found == "cohort":
        raise InputError(
            "this is a cohort spec, not a built cohort: build it first with `guardrepro "
            f"cohort build {path} --out cohort.jsonl`, then pass `--cohort cohort.jsonl`",
            file=file)
    if found is not None:
        raise InputError(kind_problem(found, "cohort_rows", _verb()), file=file)
