"""Predictions files: the checks' input when there is no run directory.

Input: a JSONL file, UTF-8, one JSON object per line, each with exactly the
keys ``base_sample_id`` (non-empty string), ``variant`` (non-empty string),
``domain`` (non-empty string), ``gold_label`` (0, 0.5 or 1) and ``score``
(0, 0.5, 1, or null when the prediction is invalid or missing).

Output: ``rundir.read.RowResult`` values (row id
``"<base_sample_id>:<variant>"``; status ``ok`` for a score, ``invalid`` for
null, so a null fails closed downstream) as the ``RunRows`` of
``expected_rows``, and, via ``load_rows`` (or ``stream_rows``, a line at a
time), the ``RunRows`` of either a run directory or a predictions file.

Expected rows of a predictions file (``expected_rows``), as for a run
directory: with a cohort (``--cohort``), every cohort row, in cohort order,
under the cohort's row id; without one, the grid of every base_sample_id in
the file times every variant in the file. An expected row the file lacks is
``status="missing"`` (score None): it fails closed (invalid, decision 1) in
every statistic and never drops out as unpaired. A prediction that is not a
cohort row, or that disagrees with the cohort on domain or gold label, is an
error naming the line.

Invariants: read strictly; any problem is an ``InputError`` naming the file,
the 1-based line and the field: bytes that are not UTF-8, a blank or
non-JSON line, a missing key or one outside the format, a value of the wrong type, a second
row for the same (base_sample_id, variant), or rows of one base that disagree
on domain or gold label. An empty file is an error. Nothing is skipped or
coerced (``true`` is not 1).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from guardrepro.checks.core.metrics import check_gold, check_score
from guardrepro.errors import InputError
from guardrepro.rundir.cohort import read_cohort
from guardrepro.rundir.read import MISSING, RowResult, RunData, RunRows, load_run_data
from guardrepro.rundir.stream import RunRowsRead, stream_run_rows
from guardrepro.spec import check_keys, expect_kind
from guardrepro.textsafe import check_id

KEYS = ("base_sample_id", "variant", "domain", "gold_label", "score")
INVALID = "invalid"


def parse_prediction(obj: Any, *, file: str, line: int) -> RowResult:
    """One predictions-file object as a RowResult (strict; see the module docstring)."""
    if not isinstance(obj, dict):
        raise InputError(f"expected a JSON object, got {type(obj).__name__}", file=file,
                         line=line)
    expect_kind(obj, "predictions", file=file, line=line)
    check_keys(obj, KEYS, file=file, line=line, required=KEYS)
    base = check_id(obj["base_sample_id"], file=file, line=line, field="base_sample_id")
    variant = check_id(obj["variant"], file=file, line=line, field="variant")
    domain = check_id(obj["domain"], file=file, line=line, field="domain")
    try:
        gold = check_gold(obj["gold_label"], field="gold_label")
        score = check_score(obj["score"], field="score")
    except InputError as exc:
        raise InputError(exc.message, file=file, line=line, field=exc.field) from None
    return RowResult(
        row_id=f"{base}:{variant}", base_sample_id=base, variant=variant, domain=domain,
        gold_label=gold, status="ok" if score is not None else INVALID, score=score,
    )


def _numbered_predictions(path: str | Path) -> list[tuple[RowResult, int]]:
    """Every row of a predictions file with its 1-based line."""
    path = Path(path)
    file = str(path)
    if not path.is_file():
        raise InputError("predictions file not found", file=file)
    rows: list[tuple[RowResult, int]] = []
    seen: dict[tuple[str, str], int] = {}
    bases: dict[str, tuple[str, float, int]] = {}
    raw_lines = path.read_bytes().split(b"\n")
    if raw_lines and raw_lines[-1] == b"":
        raw_lines.pop()
    for number, raw in enumerate(raw_lines, start=1):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(f"not UTF-8 ({exc.reason} at byte {exc.start})", file=file,
                             line=number) from None
        if not text.strip():
            raise InputError("blank line", file=file, line=number)
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(f"invalid JSON: {exc.msg} (column {exc.colno})", file=file,
                             line=number) from None
        row = parse_prediction(obj, file=file, line=number)
        key = (row.base_sample_id, row.variant)
        if key in seen:
            raise InputError(f"second row for base {key[0]!r} variant {key[1]!r} (first on "
                             f"line {seen[key]})", file=file, line=number, field="variant")
        seen[key] = number
        first = bases.setdefault(row.base_sample_id, (row.domain, row.gold_label, number))
        for field, got, want in (("domain", row.domain, first[0]),
                                 ("gold_label", row.gold_label, first[1])):
            if got != want:
                raise InputError(f"base {row.base_sample_id!r} has {field} {want!r} on line "
                                 f"{first[2]}, {got!r} here", file=file, line=number,
                                 field=field)
        rows.append((row, number))
    if not rows:
        raise InputError("no predictions in the file", file=file)
    return rows


def expected_rows(path: str | Path, cohort: str | Path | None = None) -> RunRows:
    """The expected rows of a predictions file joined with its predictions
    (module docstring); ``RunRows.records`` counts the predictions."""
    file = str(path)
    numbered = _numbered_predictions(path)
    by_key = {(r.base_sample_id, r.variant): (r, line) for r, line in numbered}
    out: list[RowResult] = []
    if cohort is not None:
        known = set()
        for c in read_cohort(cohort):
            known.add((c.base_sample_id, c.variant))
            found = by_key.get((c.base_sample_id, c.variant))
            if found is None:
                out.append(RowResult(c.row_id, c.base_sample_id, c.variant, c.domain,
                                     c.gold_label, MISSING, None))
                continue
            r, line = found
            for name, got, want in (("domain", r.domain, c.domain),
                                    ("gold_label", r.gold_label, c.gold_label)):
                if got != want:
                    raise InputError(f"{name} {got!r}, but the cohort ({cohort}) has {want!r}",
                                     file=file, line=line, field=name)
            out.append(RowResult(c.row_id, r.base_sample_id, r.variant, r.domain, r.gold_label,
                                 r.status, r.score))
        stray = [(r, line) for r, line in numbered if (r.base_sample_id, r.variant) not in known]
        if stray:
            r, line = stray[0]
            raise InputError(f"base {r.base_sample_id!r} variant {r.variant!r} is not a row of "
                             f"the cohort ({cohort}); {len(stray)} prediction(s) are not",
                             file=file, line=line, field="base_sample_id")
        return RunRows(out, f"cohort:{cohort} (predictions:{path})", len(numbered))
    variants = sorted({r.variant for r, _ in numbered})
    bases: dict[str, RowResult] = {}
    for r, _ in numbered:
        bases.setdefault(r.base_sample_id, r)
    for base, first in bases.items():
        for v in variants:
            found = by_key.get((base, v))
            out.append(found[0] if found is not None else RowResult(
                f"{base}:{v}", base, v, first.domain, first.gold_label, MISSING, None))
    return RunRows(out, f"predictions:{path}", len(numbered))


def load_rows(path: str | Path, cohort: str | Path | None = None) -> RunRows | RunData:
    """The rows to analyse (``.rows``, ``.expected_source``): a run directory,
    read once (``rundir.read.load_run_data``: its ``RunData``), or a predictions file
    (``expected_rows``), expected rows from ``cohort`` when given."""
    path = Path(path)
    if path.is_dir():
        return load_run_data(path, cohort)
    return expected_rows(path, cohort)


def stream_rows(path: str | Path, cohort: str | Path | None = None) -> RunRows | RunRowsRead:
    """``load_rows`` for a verb that needs the rows alone (``stats``): a run
    directory read a line at a time (``rundir.stream.stream_run_rows``: memory
    for the rows, not the records), or a predictions file (``expected_rows``)."""
    path = Path(path)
    if path.is_dir():
        return stream_run_rows(path, cohort)
    return expected_rows(path, cohort)
