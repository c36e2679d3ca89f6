"""The warning printed at the end of a run whose guard mostly did not answer in its format.

Input: a run's status counts (``pipeline.RunSummary.counts``) and its run directory.
Output: None when at most half the recorded rows are unparsed, else a warning
text naming the guard and its parser version, the unparsed counts (parse errors
and rows truncated at ``max_new_tokens``) and the first raw outputs, escaped as
JSON strings (newlines and non-ASCII shown as escapes) and cut at
``SHOWN_CHARS`` characters.

Invariants: given the counts, the records are read only when the warning is
due, and only to show outputs; nothing is changed. ``run_warning`` takes the
counts from a finished run's records (a sweep warns so for each configuration).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from guardrepro.rundir.record_checks import UNPARSED_STATUSES
from guardrepro.rundir.records import read_records

SHOWN_ROWS = 3
SHOWN_CHARS = 160


def unparsed_share_too_high(counts: Mapping[str, int]) -> bool:
    """More than half the recorded rows are unparsed (``parse_error`` or ``truncated``)."""
    unparsed = sum(counts.get(status, 0) for status in UNPARSED_STATUSES)
    return 2 * unparsed > sum(counts.values())


def parse_failure_warning(counts: Mapping[str, int], run_dir: str | Path) -> str | None:
    """The warning text (module docstring), or None."""
    if not counts or not unparsed_share_too_high(counts):
        return None
    failed = [r for r in read_records(run_dir) if r.status in UNPARSED_STATUSES]
    if not failed:
        return None
    provenance = failed[0].provenance
    parts = ", ".join(f"{status} {counts.get(status, 0)}" for status in UNPARSED_STATUSES)
    lines = [
        f"WARNING: {len(failed)} of {sum(counts.values())} rows were not parsed ({parts}): "
        f"guard {provenance.guard!r}'s parser ({provenance.parser_version}) did not read a "
        "verdict from most outputs. Does the guard's prompt and output format match this "
        "checkpoint (and is max_new_tokens long enough)? First raw outputs:"
    ]
    for record in failed[:SHOWN_ROWS]:
        text = record.output_text
        more = f" ... ({len(text)} characters)" if len(text) > SHOWN_CHARS else ""
        lines.append(f"  {record.row_id} [{record.status}, {record.finish_reason}]: "
                     f"{json.dumps(text[:SHOWN_CHARS])}{more}")
    return "\n".join(lines)


def run_warning(run_dir: str | Path) -> str | None:
    """``parse_failure_warning`` of a finished run, its counts taken from its records."""
    counts: dict[str, int] = {}
    for record in read_records(run_dir):
        counts[record.status] = counts.get(record.status, 0) + 1
    return parse_failure_warning(counts, run_dir)
