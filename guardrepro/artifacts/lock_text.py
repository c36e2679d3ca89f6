"""Reading a lock file of many entries quickly, with the same result as ``tomllib``.

Input: a lock file's path. Output: its TOML table and text, as
``spec.read_toml`` gives them (the same errors, naming the file, on a missing,
unreadable, non-UTF-8 or invalid file).

Why: ``tomllib`` is pure Python and took about 18 us an entry (3.7 s of a
200,000-file ``verify``). ``guardrepro lock`` writes its ``[[file]]`` tables
last, one like the next::

    [[file]]
    path = "d0000/f0000001.bin"
    sha256 = "<64 hex>"
    size = 2

When everything from the first ``[[file]]`` line to the end is such blocks
(separated by at most one blank line; a path without quote, backslash or
control character, so a TOML basic string with no escape whose value is its
text; a size of decimal digits without sign, underscore or leading zero), the
text before it is parsed with ``tomllib`` and the blocks with one regular
expression. Any other text (a comment among the entries, another key, an
escaped path, CRLF line ends, a ``file`` key in the part before) is parsed
whole by ``tomllib``, as before.

Why the split gives ``tomllib``'s table: the blocks' lines can neither close
nor continue anything opened before them (no quote, bracket or brace of
theirs is unbalanced), so a first part that parses is complete on its own,
and one that does not (a ``[[file]]`` line inside a multi-line string) sends
the whole text to ``tomllib``; the blocks then only append tables to the
array ``file``, which the first part must not define.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from guardrepro.errors import LockError
from guardrepro.limits import parse_toml_text
from guardrepro.spec import parse_toml, read_toml

_HEADER = "\n[[file]]\n"
_BLOCK = re.compile(
    r'\[\[file\]\]\n'
    r'path = "([^"\\\x00-\x1f\x7f]*)"\n'
    r'sha256 = "([0-9a-f]{64})"\n'
    r'size = (0|[1-9][0-9]*)\n'
    r'\n?')


def read_lock_toml(path: Path) -> tuple[dict[str, Any], str]:
    """``read_toml(path, "lock file", error=LockError)``, faster on many entries."""
    try:
        raw = path.read_bytes()
    except OSError:
        return read_toml(path, "lock file", error=LockError)  # its error, naming the file
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return parse_toml(raw, str(path), error=LockError)  # its error, naming the file
    data = fast_table(text)
    if data is None:  # the bytes already read, parsed whole (no second read)
        return parse_toml_text(text, file=str(path), error=LockError), text
    return data, text


def fast_table(text: str) -> dict[str, Any] | None:
    """The TOML table of ``text`` when its ``[[file]]`` part has the form above,
    else None (parse it with ``tomllib``)."""
    cut = text.find(_HEADER)
    if cut < 0:
        return None
    head, tail = text[:cut + 1], text[cut + 1:]
    files = _blocks(tail)
    if files is None:
        return None
    try:  # the nesting limit and tomllib, as for any TOML file
        data = parse_toml_text(head, file=None, error=LockError)
    except LockError:
        return None
    if "file" in data:
        return None
    data["file"] = files
    return data


def _blocks(tail: str) -> list[dict[str, Any]] | None:
    files: list[dict[str, Any]] = []
    at, end = 0, len(tail)
    match = _BLOCK.match
    while at < end:
        found = match(tail, at)
        if found is None:
            return None
        path, sha, size = found.groups()
        files.append({"path": path, "sha256": sha, "size": int(size)})
        at = found.end()
    return files
