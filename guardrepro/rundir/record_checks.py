"""Field-level checks of a record read back from ``records.jsonl``.

Input: a ``schema.Record`` built from one JSON line, the file and row it came from.
Output: nothing, or an error naming the file, row and field.

Invariants (checked on every read, so no check, merge or comparison sees them
broken): ``gold_label`` is 0, 0.5 or 1; ``prompt_tokens`` is a non-negative integer;
``output_token_ids`` is a list of non-negative integers; ``decision_margin`` is
null or a finite number; every attempt (``schema.Attempt``; keys checked, like those
of ``provenance`` and ``timings``, by ``schema.Record.from_dict``) has fields of the
right types, a known status, a score of null/0/0.5/1 set exactly when its status is ok.
Given ``parsers`` (guard name -> that guard's output parser, or None when the guard
is unknown or not scored by parsing: ``guards.registry.record_parser``, passed in by
the reader's caller so that reading records imports no guard), re-parsing
``output_text`` -- and each attempt's ``text`` -- must give back the recorded status
and score: a record whose score contradicts its own output is an IntegrityError
(exit 2), not a silently trusted value. The re-parse is a few regular-expression
searches over the output text, cheap next to reading the line.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from guardrepro.errors import InputError, IntegrityError
from guardrepro.schema import RECORD_STATUSES, Attempt, Record, check_score
from guardrepro.textsafe import check_id

if TYPE_CHECKING:
    from guardrepro.guards.base import ParseResult

# guard name -> its output parser, or None (unknown guard, or not scored by parsing)
ParserLookup = Callable[[str], "Callable[[str], ParseResult] | None"]

ATTEMPT_STATUSES = RECORD_STATUSES
# no verdict read: the output ended on its own (parse_error) or reached max_new_tokens
UNPARSED_STATUSES = ("parse_error", "truncated")
LENGTH_FINISH = "length"  # a generation's finish_reason when it reached max_new_tokens


def unparsed_status(finish_reason: str) -> str:
    """The status of an output no verdict was read from: ``truncated`` when the
    generation reached ``max_new_tokens`` (the verdict may have been cut off),
    else ``parse_error``."""
    return "truncated" if finish_reason == LENGTH_FINISH else "parse_error"


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _count(value: Any, where: dict[str, Any], name: str) -> None:
    if not _is_int(value) or value < 0:
        raise InputError(f"expected a non-negative integer, got {value!r}", field=name, **where)


def _token_ids(value: Any, where: dict[str, Any], name: str) -> None:
    if not isinstance(value, list):
        raise InputError(f"expected a list of token ids, got {value!r:.60}", field=name, **where)
    for i, token in enumerate(value):
        if not _is_int(token) or token < 0:
            raise InputError(
                f"token id {i} is {token!r}, expected a non-negative integer",
                field=name,
                **where,
            )


def _margin(value: Any, where: dict[str, Any], name: str) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InputError(
            f"expected null or a finite number, got {value!r:.60}", field=name, **where
        )


def _probability(value: Any, where: dict[str, Any], name: str) -> None:
    if value is None:
        return
    if (isinstance(value, bool) or not isinstance(value, int | float)
            or not math.isfinite(value) or not 0.0 <= value <= 1.0):
        raise InputError(f"expected null or a probability in [0, 1], got {value!r:.60}",
                         field=name, **where)


def _decision_scores(record: Record, where: dict[str, Any]) -> None:
    """``p_unsafe``, ``expected_score`` and every ``label_probs`` value are
    probabilities; a record without ``p_unsafe`` says why (``p_unsafe_reason``)."""
    _probability(record.p_unsafe, where, "p_unsafe")
    _probability(record.expected_score, where, "expected_score")
    if record.label_probs is not None:
        if not isinstance(record.label_probs, dict):
            raise InputError(f"expected an object, got {record.label_probs!r:.60}",
                             field="label_probs", **where)
        for label, p in record.label_probs.items():
            _probability(p, where, f"label_probs.{label}")
    if record.p_unsafe is None and record.label_probs is not None:
        raise InputError("label_probs without p_unsafe", field="p_unsafe", **where)
    reason = record.p_unsafe_reason
    if reason is not None and not isinstance(reason, str):
        raise InputError(f"expected null or a string, got {reason!r:.60}",
                         field="p_unsafe_reason", **where)


def _score(value: Any, where: dict[str, Any], name: str) -> None:
    check_score(value, nullable=True, field=name, **where)


def _string(value: Any, where: dict[str, Any], name: str) -> None:
    if not isinstance(value, str):
        raise InputError(f"expected a string, got {value!r:.60}", field=name, **where)


def _attempt(attempt: Attempt, where: dict[str, Any], prefix: str) -> None:
    _string(attempt.text, where, f"{prefix}.text")
    _token_ids(attempt.token_ids, where, f"{prefix}.token_ids")
    _string(attempt.finish_reason, where, f"{prefix}.finish_reason")
    if attempt.status not in ATTEMPT_STATUSES:
        raise InputError(
            f"expected one of {ATTEMPT_STATUSES}, got {attempt.status!r:.60}",
            field=f"{prefix}.status",
            **where,
        )
    _score(attempt.score, where, f"{prefix}.score")
    if (attempt.status == "ok") != (attempt.score is not None):
        raise InputError(
            "score is set exactly when status is ok", field=f"{prefix}.score", **where
        )
    _margin(attempt.decision_margin, where, f"{prefix}.decision_margin")
    if attempt.seed is not None and not _is_int(attempt.seed):
        raise InputError(f"expected null or an integer, got {attempt.seed!r:.60}",
                         field=f"{prefix}.seed", **where)


def _consistent(
    text: str, finish_reason: str, status: str, score: float | None, guard: str,
    parse: Callable[[str], ParseResult], where: dict[str, Any], name: str
) -> None:
    """Re-parse ``text`` with ``parse``; the recorded status/score must be what it
    gives (the caller looks ``parse`` up only for guards scored by parsing their
    output: a logit guard's score comes from its recorded probability and a rule
    guard's from its rule). An unparsed output that reached ``max_new_tokens`` is
    ``truncated``; records written before that status existed say ``parse_error``
    there, which is accepted."""
    if status == "inference_error":
        return
    parsed = parse(text)
    expected = "ok" if parsed.status == "ok" else unparsed_status(finish_reason)
    if expected == "truncated" and status == "parse_error":
        expected = status
    if (status, score) != (expected, parsed.score):
        file, row = where.get("file"), where.get("row")
        line = None if row is None else f"line {row + 1}"  # row: the 0-based index
        place = ", ".join(str(x) for x in (file, line) if x)
        raise IntegrityError(
            f"{place}: field {name!r}: the record says status {status!r} score {score!r}, but"
            f" its output text parses ({guard} parser) to status {expected!r} score"
            f" {parsed.score!r}: the record contradicts its own output"
        )


def once_per_guard(parsers: ParserLookup | None) -> ParserLookup | None:
    """``parsers`` looked up once per guard name (for one read of a file: the
    lookup finds the guard's spec on disk, which cost more than the record's own
    checks on a 1M-row file)."""
    if parsers is None:
        return None
    lookup = parsers
    found: dict[str, Callable[[str], ParseResult] | None] = {}

    def cached(name: str) -> Callable[[str], ParseResult] | None:
        if name not in found:
            found[name] = lookup(name)
        return found[name]

    return cached


def check_record(record: Record, *, file: str | None, row: int | None,
                 parsers: ParserLookup | None = None) -> None:
    """Raise InputError / IntegrityError (file, row, field named) on a bad record;
    with ``parsers``, also when its score contradicts its output text."""
    where: dict[str, Any] = {"file": file, "row": row}
    for name in ("row_id", "base_sample_id", "variant", "domain"):
        check_id(getattr(record, name), field=name, **where)
    _score(record.gold_label, where, "gold_label")
    if record.gold_label is None:
        raise InputError("expected 0, 0.5 or 1, got null", field="gold_label", **where)
    _count(record.prompt_tokens, where, "prompt_tokens")
    _token_ids(record.output_token_ids, where, "output_token_ids")
    _margin(record.decision_margin, where, "decision_margin")
    _decision_scores(record, where)
    _string(record.output_text, where, "output_text")
    if record.status not in RECORD_STATUSES:  # also enforced by Record itself
        raise InputError(f"unknown status {record.status!r}", field="status", **where)
    for i, attempt in enumerate(record.attempts):
        _attempt(attempt, where, f"attempts[{i}]")
    guard = record.provenance.guard
    parse = parsers(guard) if parsers is not None else None
    if parse is None:
        return
    _consistent(record.output_text, record.finish_reason, record.status, record.score, guard,
                parse, where, "score")
    for i, attempt in enumerate(record.attempts):
        _consistent(attempt.text, attempt.finish_reason, attempt.status, attempt.score, guard,
                    parse, where, f"attempts[{i}].score")


def duplicate_row(row_id: str, first: int, *, file: str, row: int) -> InputError:
    """The error for a records file's second line of ``row_id`` (0-based line
    ``row``; ``first``: the 0-based line of its first)."""
    return InputError(f"duplicate row_id {row_id!r} (first at line {first + 1})",
                      file=file, row=row, line=row + 1, field="row_id")


def torn_last_line(*, file: str, row: int) -> InputError:
    """The error for a records file whose last line (0-based ``row``) has no line break."""
    return InputError("final line is incomplete (the writing process was interrupted); "
                      "resuming the run truncates it", file=file, row=row, line=row + 1)
