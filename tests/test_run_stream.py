"""``run`` reads its cohort and its records as streams: rows are not all held at once.

The cohort scan (``rundir.cohort_stream``) against ``schema.read_cohort``; the
writer's record index (``rundir.record_index``) against the records file; a run
whose live cohort rows are counted while it generates; and (slow tier) the
peak traced memory of a rule run on 2,000 and on 20,000 rows.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import tracemalloc
import weakref
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from recordsets import cohort_line, grid, write_cohort

from guardrepro.errors import InputError, IntegrityError
from guardrepro.run import prepare
from guardrepro.run.pipeline import run_cohort
from guardrepro.run.runners.rule_runner import RuleRunner
from guardrepro.rundir import cohort_stream
from guardrepro.rundir.cohort import read_cohort
from guardrepro.rundir.cohort_stream import scan_cohort
from guardrepro.rundir.records import RecordWriter, read_records, record_line
from guardrepro.rundir.shard import parse_shard, select_shard
from guardrepro.schema import CohortRow

PROFILE = Path(__file__).resolve().parents[1] / "runners" / "rule-nuisance.toml"


def _cohort(path: Path, rows: int, history: str = "") -> Path:
    """``rows`` cohort rows (ids ``r00000``...), each with ``history`` as its history."""
    with open(path, "w", encoding="utf-8") as out:
        for i in range(rows):
            line = cohort_line(f"b{i}", "original", ("banking", "slack")[i % 2],
                               (0.0, 0.5, 1.0)[i % 3], rid=f"r{i:05d}")
            line["sample"]["history"] = history
            out.write(json.dumps(line, sort_keys=True) + "\n")
    return path


@pytest.mark.parametrize("shard", [None, "2/3"])
@pytest.mark.parametrize("final_newline", [True, False])
def test_scan_gives_the_rows_and_hash_read_cohort_gives(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shard: str | None,
        final_newline: bool) -> None:
    monkeypatch.setattr(cohort_stream, "BLOCK_LINES", 7)  # several blocks, a short last one
    path = _cohort(tmp_path / "c.jsonl", 50)
    if not final_newline:
        path.write_bytes(path.read_bytes()[:-1])
    whole = read_cohort(path)
    expected = whole if shard is None else select_shard(whole, *parse_shard(shard))
    with scan_cohort(path, shard) as scan:
        assert scan.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
        assert (scan.rows_in_cohort, scan.rows_selected) == (50, len(expected))
        assert scan.ids == {f"r{i:05d}" for i in range(50)}
        assert list(scan.rows()) == expected
        assert list(scan.rows(5)) == expected[:5]
        assert list(scan.rows(0)) == []
    assert 0 < len(expected) < 50 or shard is None


def test_scan_refuses_what_read_cohort_refuses(tmp_path: Path) -> None:
    path = _cohort(tmp_path / "c.jsonl", 5)
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    dup = tmp_path / "dup.jsonl"
    dup.write_text("".join([*lines[:4], lines[1]]), encoding="utf-8")
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join([*lines[:2], "{not json\n", *lines[2:]]), encoding="utf-8")
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    messages = []
    for case in (dup, bad, empty, tmp_path / "absent.jsonl"):
        with pytest.raises(InputError) as whole:
            read_cohort(case)
        with pytest.raises(InputError) as streamed:
            scan_cohort(case)
        assert str(streamed.value) == str(whole.value)
        messages.append(str(streamed.value))
    assert "duplicate sample_id 'r00001' (first at line 2)" in messages[0]
    assert "line 5" in messages[0] and "line 3" in messages[1]


def test_a_cohort_edited_after_the_scan_is_refused(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cohort_stream, "BLOCK_LINES", 4)
    path = _cohort(tmp_path / "c.jsonl", 10)
    with scan_cohort(path) as scan:
        data = bytearray(path.read_bytes())
        at = data.index(b'"banking"', len(data) // 2)  # in lines 5-8, the second block
        data[at + 1:at + 8] = b"BANKING"
        with open(path, "r+b") as fh:  # in place: the scan's descriptor sees it
            fh.write(bytes(data))
        rows = scan.rows()
        assert len([next(rows) for _ in range(4)]) == 4  # the first block is unchanged
        with pytest.raises(IntegrityError, match=r"lines 5-8 changed"):
            next(rows)


def test_the_writer_keeps_an_index_and_reads_records_back(tmp_path: Path) -> None:
    bases = [("b0", "banking", 0.0), ("b1", "banking", 0.5), ("b2", "slack", 1.0)]
    cohort = write_cohort(tmp_path / "c.jsonl", grid(bases, {"original": [0, 0, 0]}))
    run_cohort(PROFILE, cohort, tmp_path / "run", progress=False)
    records = read_records(tmp_path / "run")
    data = (tmp_path / "run" / "records.jsonl").read_bytes()
    with RecordWriter(tmp_path / "run") as writer:
        assert list(writer.records) == [r.row_id for r in records]
        offset = 0
        for record in records:
            line = record_line(record).encode("utf-8")
            assert writer.records.location(record.row_id) == (offset, len(line))
            assert data[offset:offset + len(line)] == line
            assert writer.records.input_sha256(record.row_id) == record.input_sha256
            assert writer.records.status(record.row_id) == record.status
            assert writer.read(record.row_id) == record
            offset += len(line)
        counts = {s: sum(r.status == s for r in records) for s in writer.records.status_counts}
        assert writer.records.status_counts == counts
        assert writer.rewrite_in_order([r.row_id for r in reversed(records)])
        for record in records:  # the index follows the lines
            assert writer.read(record.row_id) == record


def test_a_run_holds_a_few_cohort_rows_at_a_time(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cohort_stream, "BLOCK_LINES", 16)
    monkeypatch.setattr(prepare, "PREPARE_CHUNK", 8)
    live = [0]  # cohort rows made and not yet freed
    parse = CohortRow.from_dict

    def freed() -> None:
        live[0] -= 1

    def tracked(cls: type[CohortRow], *args: Any, **kwargs: Any) -> CohortRow:
        row = parse(*args, **kwargs)
        live[0] += 1
        weakref.finalize(row, freed)
        return row

    most: list[int] = []
    generate = RuleRunner.generate

    def counting(self: RuleRunner, *args: Any, **kwargs: Any) -> Any:
        most.append(live[0])
        return generate(self, *args, **kwargs)

    monkeypatch.setattr(CohortRow, "from_dict", classmethod(tracked))
    monkeypatch.setattr(RuleRunner, "generate", counting)
    cohort = _cohort(tmp_path / "c.jsonl", 300)
    summary = run_cohort(PROFILE, cohort, tmp_path / "run", progress=False, limit=200)
    assert (summary.generated, summary.rows_selected) == (200, 300)
    summary = run_cohort(PROFILE, cohort, tmp_path / "run", progress=False)  # a resume
    assert (summary.already_done, summary.generated, summary.remaining) == (200, 100, 0)
    assert [r.row_id for r in read_records(tmp_path / "run")] == [
        r.row_id for r in read_cohort(cohort)]
    # the rows of one prepared chunk, one generated chunk and the row being read;
    # a run that read the cohort into a list would hold all 300
    assert most and 1 <= max(most) <= 8 + 8 + 1 + 1


def _peak(tmp_path: Path, rows: int) -> int:
    cohort = _cohort(tmp_path / f"c{rows}.jsonl", rows, history="h" * 2000)
    tracemalloc.start()
    try:
        run_cohort(PROFILE, cohort, tmp_path / f"run{rows}", progress=False)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak


@pytest.mark.slow
def test_peak_memory_of_a_run_grows_by_a_few_hundred_bytes_a_row(tmp_path: Path) -> None:
    # each row's sample holds 2,000 characters: a run that kept its rows or
    # records would grow by more than that per row. The two runs are traced at
    # once, each in a fresh interpreter of its own (a peak is per process).
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        small, large = pool.map(_peak, [tmp_path, tmp_path], [2_000, 20_000])
    per_row = (large - small) / 18_000
    assert per_row < 600, f"{per_row:.0f} bytes a row ({small} -> {large})"


@pytest.mark.parametrize("name", ["rule-nuisance", "toy-guard", "llama-guard-3", "qwen3guard",
                                  "shieldgemma"])
def test_rendered_is_render_and_messages(name: str) -> None:
    from guardrepro.guards.base import GuardTemplate
    from guardrepro.guards.registry import get_guard

    template = GuardTemplate("U={user_request}\nA={agent_action}\nE={env_info}", "0" * 64)
    guard = get_guard(name, template if name == "toy-guard" else None)
    line = cohort_line("b0", "original", "banking", 1.0)
    line["sample"].update(instruction="pay the bill", history="<information>x</information>",
                          current_action='{"tool": "send_money"}')
    sample = CohortRow.from_dict(line).sample
    text, messages = guard.rendered(sample)  # type: ignore[attr-defined]
    assert (text, messages) == (guard.render(sample), guard.messages(sample))
    assert text and messages
