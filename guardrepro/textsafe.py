"""Text from data on a terminal, and the rule for row ids.

Input: any text that came from a file (a row id, a variant, a guard's output, a
path) on its way to a terminal; a row id read from a cohort, predictions or
records file.
Output: ``shown(text)``, the one escaping function: every character that
``str.isprintable`` rejects (C0 and C1 controls such as ESC, NUL, newline and
carriage return, DEL, format characters such as the bidirectional override
U+202E, line and paragraph separators, unassigned code points, and every space
but U+0020) becomes its Python escape (``\\x1b``, ``\\u202e``, ``\\n``), so data
can neither move the cursor, recolour the terminal, reorder what follows, nor
start a line of its own. ``shown_lines`` applies it to each line of a text
composed by the program itself, keeping its own line breaks.
``id_problem(value)`` says why a row id is refused (None when it is fine);
``check_id`` raises the ``InputError`` naming file, row and field. The same
rule holds the other names a row carries to the terminal (a cohort row's
``cohort``, ``variant``, ``domain``, ``serialization``; a record's and a
predictions line's ``variant`` and ``domain``).

The row-id rule: a non-empty string of at most ``MAX_ID_CHARS`` characters,
every character printable (``str.isprintable``: no control, format or
separator character, no space but U+0020), no space at either end, and in
Unicode normalisation form NFC. NFC spellings are required rather than
normalised on read, so an id is never silently changed; with every id in NFC,
two spellings of one text (NFC "café" and NFD "café") can no longer be two
rows. The 20-hex derived ids of the published cohort (docs/PROTOCOL.md) and
the 20-hex base sample ids of whole-split cohorts satisfy the rule.
"""

from __future__ import annotations

import unicodedata

from guardrepro.errors import InputError

MAX_ID_CHARS = 256  # ids guardrepro derives are 20 characters


def _escape(char: str) -> str:
    return char if char.isprintable() else repr(char)[1:-1]


def shown(text: object) -> str:
    """``text`` (or ``str(text)``) with every non-printable character escaped."""
    value = text if isinstance(text, str) else str(text)
    if value.isprintable():
        return value
    return "".join(_escape(char) for char in value)


def shown_lines(text: str) -> str:
    """``shown`` applied to each line of ``text``; its line breaks stay."""
    if text.isprintable():
        return text
    return "\n".join(shown(line) for line in text.split("\n"))


def id_problem(value: object) -> str | None:
    """Why ``value`` is not an acceptable row id, or None."""
    if not isinstance(value, str) or not value:
        return f"expected a non-empty string, got {shown(repr(value))[:60]}"
    if len(value) > MAX_ID_CHARS:
        return f"is {len(value)} characters long; an id or name has at most {MAX_ID_CHARS}"
    if not value.isprintable():
        bad = next(char for char in value if not char.isprintable())
        name = unicodedata.name(bad, f"U+{ord(bad):04X}")
        return (f"'{shown(value)[:80]}' holds the non-printable character "
                f"{_escape(bad)} ({name}); an id or name is printable text")
    if value.strip() != value:
        return f"{value[:80]!r} starts or ends with a space"
    if not unicodedata.is_normalized("NFC", value):
        nfc = unicodedata.normalize("NFC", value)
        return (f"{ascii(value)[:80]} is not in Unicode NFC form (in NFC: {ascii(nfc)[:80]}); "
                "write ids in NFC, so that one text is one id")
    return None


def check_id(value: object, *, file: str | None = None, row: int | None = None,
             field: str = "sample.sample_id", line: int | None = None) -> str:
    """``value`` when it is an acceptable row id, else an InputError naming where."""
    problem = id_problem(value)
    if problem is not None:
        raise InputError(problem, file=file, row=row, field=field, line=line)
    assert isinstance(value, str)
    return value
