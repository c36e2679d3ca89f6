"""The split of a run's rows between its workers (``run.balance``, ``workers.split_rows``).

Expectations are worked out by hand from the rule: largest first, each to the
worker with the least size so far, ties to the lower worker.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from runner_helpers import cohort_row

from guardrepro.run.balance import balanced_parts, row_size
from guardrepro.run.workers import recorded_ids, split_rows
from guardrepro.schema import CohortRow


def test_largest_first_to_the_least_loaded_worker() -> None:
    # 9 (index 1) -> 0; 9 (index 3) -> 1; 5 -> 0 (9 vs 9: the lower); 3 -> 1 (14 vs 9);
    # 1 -> 1 (14 vs 12)
    assert balanced_parts([5, 9, 1, 9, 3], 2) == [0, 0, 1, 1, 1]
    assert balanced_parts([4, 4, 4, 4], 3) == [0, 1, 2, 0]
    assert balanced_parts([3, 1, 2], 1) == [0, 0, 0]
    assert balanced_parts([], 2) == []
    # one row larger than all the others together: alone on the first worker
    assert balanced_parts([1, 2, 100, 3, 4], 2) == [1, 1, 0, 1, 1]
    with pytest.raises(ValueError):
        balanced_parts([1], 0)


def _row(index: int, extra: str = "") -> CohortRow:
    line = cohort_row(index)
    line["sample"]["instruction"] += extra
    return CohortRow.from_dict(line)


def test_a_rows_size_grows_with_its_texts() -> None:
    assert row_size(_row(3, "x" * 100)) - row_size(_row(3)) == 100
    assert row_size(_row(3, "é" * 10)) - row_size(_row(3)) == 10  # characters, not bytes


def test_split_rows_leaves_out_what_any_worker_recorded() -> None:
    rows = [_row(0), _row(1), _row(2, "y" * 5000), _row(3), _row(4)]
    assigned = split_rows(rows, [frozenset({"row000"}), frozenset({"row003"})])
    # to do: row001, row002 (far the largest), row004: row002 alone, the others together
    assert assigned == [frozenset({"row002"}), frozenset({"row001", "row004"})]
    assert split_rows(rows, [frozenset({r.row_id for r in rows}), frozenset()]) == [
        frozenset(), frozenset()]


def test_recorded_ids_reads_whole_lines_only(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    assert recorded_ids(path, tmp_path) == frozenset()  # no file yet
    lines = [json.dumps({"row_id": "a", "status": "ok"}), "not a record",
             json.dumps({"row_id": "b"}), '{"row_id": "c", "sta']  # the last one torn
    path.write_text("\n".join(lines), encoding="utf-8")
    assert recorded_ids(path, tmp_path) == frozenset({"a", "b"})
