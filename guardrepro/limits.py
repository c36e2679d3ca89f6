"""The boundary for hostile bytes: JSON and TOML parsed under explicit limits.

Input: text from an untrusted file (a cohort row, a records line, a ``parse``
line, a manifest, a lock or profile), the file's name and the 1-based line.
Output: the parsed value, or an ``InputError`` naming the file, line and field.

Limits and policies (docs/FAULTS.md lists them):

- nesting: at most ``MAX_NESTING`` (64) levels of arrays/objects (JSON) or
  arrays/inline tables (TOML). Deeper input is refused before the parser runs
  (the parsers recurse, and a few thousand ``[`` raise ``RecursionError``); a
  ``RecursionError`` the pre-check did not foresee is refused the same way.
- text: one surrogate policy. JSON may spell a lone UTF-16 surrogate
  (``"\\ud800"``); such a string cannot be encoded, hashed or tokenized, so it is
  refused at read, naming the field that holds it. Paired surrogates decode to
  one character and are fine.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

from guardrepro.errors import InputError

MAX_NESTING = 64
MAX_REPLICATES = 100_000  # bounded work: bootstrap replicates, 10x the largest default
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_TOML_STRING = re.compile(
    r'"""(?:[^\\]|\\.)*?"""|\'\'\'.*?\'\'\'|"(?:[^"\\\n]|\\.)*"|\'[^\'\n]*\'|#[^\n]*', re.DOTALL
)
_BRACKET = re.compile(r"[\[\]{}]")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _too_deep(text: str, strings: re.Pattern[str], limit: int) -> bool:
    """Whether brackets outside strings (and TOML comments) nest deeper than ``limit``."""
    if text.count("[") + text.count("{") <= limit:
        return False  # cannot nest deeper than the number of openers
    depth = 0
    for match in _BRACKET.finditer(strings.sub('""', text)):
        if match.group() in "[{":
            depth += 1
            if depth > limit:
                return True
        else:
            depth = max(0, depth - 1)
    return False


def _nesting_error(file: str | None, row: int | None, line: int | None, kind: str
                   ) -> InputError:
    return InputError(f"{kind} nested deeper than {MAX_NESTING} levels (the limit)", file=file,
                      row=row, line=line)


def lone_surrogate_field(value: Any, where: str = "") -> str | None:
    """The path (``a.b[2]``) of the first string holding a lone surrogate, or None."""
    stack: list[tuple[str, Any]] = [(where, value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return path or "(the value)"
        elif isinstance(item, dict):
            for key, sub in item.items():
                if lone_surrogate_field(key) is not None:
                    return f"{path}.{key!r}" if path else repr(key)
                stack.append((f"{path}.{key}" if path else str(key), sub))
        elif isinstance(item, list):
            stack.extend((f"{path}[{i}]", sub) for i, sub in enumerate(item))
    return None


def load_json(text: str, *, file: str | None, line: int | None = None,
              row: int | None = None, what: str = "JSON") -> Any:
    """Parse one JSON document (a whole file, or one line of a JSON-lines file:
    ``line`` 1-based, ``row`` its 0-based index)."""
    if _too_deep(text, _JSON_STRING, MAX_NESTING):
        raise _nesting_error(file, row, line, what)
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"invalid {what}: {exc}", file=file, row=row, line=line) from None
    except RecursionError:
        raise _nesting_error(file, row, line, what) from None
    if _SURROGATE_ESCAPE.search(text):
        field = lone_surrogate_field(value)
        if field is not None:
            raise InputError("holds a lone UTF-16 surrogate (a \\ud800-\\udfff escape without"
                             " its pair), which is not text; refused", file=file, row=row,
                             line=line, field=field)
    return value


def read_json_file(path: str | Path, *, what: str = "JSON") -> Any:
    """A whole JSON file parsed by ``load_json``: the one "read JSON or raise
    ``InputError`` naming the file" (``not UTF-8: ...``, ``invalid JSON: ...``)."""
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8: {exc}", file=str(path)) from None
    return load_json(text, file=str(path), what=what)


def parse_toml_text(text: str, *, file: str | None, error: type[InputError] = InputError
              ) -> dict[str, Any]:
    """Parse TOML text under the nesting limit."""
    if _too_deep(text, _TOML_STRING, MAX_NESTING):
        raise error(f"TOML nested deeper than {MAX_NESTING} levels (the limit)", file=file)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise error(f"invalid TOML: {exc}", file=file) from None
    except RecursionError:
        raise error(f"TOML nested deeper than {MAX_NESTING} levels (the limit)",
                    file=file) from None


def at_line(exc: InputError, index: int) -> InputError:
    """``exc`` (raised for the 0-based row ``index`` of a JSON-lines file) pointing at
    the 1-based line instead, as editors and Python's json count."""
    if exc.row != index or exc.line is not None:
        return exc
    try:
        moved = type(exc)(exc.message, file=exc.file, row=index, line=index + 1,
                          field=exc.field)
    except TypeError:
        moved = InputError(exc.message, file=exc.file, row=index, line=index + 1,
                           field=exc.field)
    return moved
