"""records.jsonl fsync'd in batches (rundir.record_sync): how often, what a crash loses.

Every fsync is observed by wrapping ``os.fsync`` and noting the records file's
size at that moment: the bytes a machine crash (power loss) cannot take away.
A crash is then simulated by cutting the file anywhere after the last such size,
which is the most a machine crash may take; the resumed run must hold every row
exactly once with the bytes of an uninterrupted run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from recordsets import grid, write_cohort
from test_records import record

import guardrepro.run.attempts as attempts_module
from guardrepro.errors import InputError, OutputError
from guardrepro.run.pipeline import run_cohort
from guardrepro.rundir.record_sync import ROWS_ENV, SECONDS_ENV
from guardrepro.rundir.records import RECORDS_FILE, RecordWriter, TornRecordWarning, read_records
from guardrepro.schema import SCORE_KEYS, Record

ROOT = Path(__file__).resolve().parents[1]
PROFILE = ROOT / "runners" / "rule-nuisance.toml"
# Fields that differ between two runs of the same rows (the run id is the
# directory's name; timings and created_at are measured).
VOLATILE = ("run_id", "created_at", "timings")


@pytest.fixture
def synced(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Sizes of every file fsync'd through ``os.fsync`` while the test runs."""
    sizes: list[int] = []
    real = os.fsync

    def spy(fd: int) -> None:
        real(fd)
        sizes.append(os.fstat(fd).st_size)

    monkeypatch.setattr(os, "fsync", spy)
    yield sizes


def _policy(monkeypatch: pytest.MonkeyPatch, rows: int, seconds: float) -> None:
    monkeypatch.setenv(ROWS_ENV, str(rows))
    monkeypatch.setenv(SECONDS_ENV, str(seconds))


def test_records_are_fsynced_every_n_rows_and_at_close(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, synced: list[int]) -> None:
    _policy(monkeypatch, 100, 3600)
    path = tmp_path / "run" / RECORDS_FILE
    sizes_after: list[int] = []
    with RecordWriter(tmp_path / "run") as writer:
        synced.clear()  # the writer's own set-up (fsync of the new file's directory)
        for i in range(250):
            writer.append(record(f"r{i}"))
            sizes_after.append(path.stat().st_size)
        # a sync after the 100th and the 200th append, each covering all of them
        assert synced == [sizes_after[99], sizes_after[199]]
    assert synced == [sizes_after[99], sizes_after[199], sizes_after[249]]  # close syncs
    assert len(read_records(path)) == 250


def test_one_row_policy_fsyncs_every_record_before_append_returns(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, synced: list[int]) -> None:
    _policy(monkeypatch, 1, 3600)
    path = tmp_path / "run" / RECORDS_FILE
    with RecordWriter(tmp_path / "run") as writer:
        synced.clear()
        for i in range(5):
            writer.append(record(f"r{i}"))
            assert synced[-1] == path.stat().st_size  # durable before append returned
        assert len(synced) == 5


def test_a_run_that_stalls_is_synced_within_the_time_bound(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, synced: list[int]) -> None:
    _policy(monkeypatch, 10**6, 0.2)
    path = tmp_path / "run" / RECORDS_FILE
    with RecordWriter(tmp_path / "run") as writer:
        synced.clear()
        writer.append(record("r0"))
        size = path.stat().st_size
        deadline = time.monotonic() + 5.0  # 0.2 s asked; generous under load
        while size not in synced and time.monotonic() < deadline:
            time.sleep(0.02)
        assert size in synced  # synced by the background thread, no append since


def test_an_interrupted_run_fsyncs_what_it_appended(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, synced: list[int]) -> None:
    _policy(monkeypatch, 10**6, 3600)  # only the close can sync
    cohort = write_cohort(tmp_path / "c.jsonl", _specs(40))
    real = attempts_module.make_record
    made = []

    def interrupt_at_25(*args: Any, **kwargs: Any) -> Any:
        if len(made) == 25:
            raise KeyboardInterrupt
        made.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(attempts_module, "make_record", interrupt_at_25)
    with pytest.raises(KeyboardInterrupt):
        run_cohort(PROFILE, cohort, tmp_path / "run", progress=False)
    path = tmp_path / "run" / RECORDS_FILE
    assert len(read_records(path)) == 25
    assert synced[-1] == path.stat().st_size  # every appended record fsync'd at exit


def _specs(n: int) -> list[Any]:
    bases = [(f"b{i:03d}", ("banking", "slack")[i % 2], (0.0, 0.5, 1.0)[i % 3])
             for i in range(n)]
    return grid(bases, {"original": [0] * n})


def _lines(path: Path) -> list[dict[str, Any]]:
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        data = json.loads(line)
        for key in VOLATILE:
            data.pop(key)
        out.append(data)
    return out


def test_a_machine_crash_loses_at_most_the_unsynced_tail_and_resume_redoes_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, synced: list[int]) -> None:
    cohort = write_cohort(tmp_path / "c.jsonl", _specs(60))
    reference = tmp_path / "reference"
    run_cohort(PROFILE, cohort, reference, progress=False)
    expected = _lines(reference / RECORDS_FILE)
    _policy(monkeypatch, 16, 3600)
    first = tmp_path / "first"
    run_cohort(PROFILE, cohort, first, progress=False, limit=40)
    data = (first / RECORDS_FILE).read_bytes()
    # before the close, the last sync was at the 32nd record: the close synced the rest
    line_ends = [i + 1 for i, b in enumerate(data) if b == ord("\n")]
    assert synced[-2:] == [line_ends[31], line_ends[39]]
    # a machine crash before that close keeps some prefix of at least 32 records'
    # bytes; try cuts in the middle of and between every record after the 32nd
    cuts = sorted({line_ends[31], *line_ends[32:], *(e - 7 for e in line_ends[32:])})
    for cut in cuts:
        run = tmp_path / f"cut-{cut}"
        run.mkdir()
        (run / "manifest.json").write_bytes((first / "manifest.json").read_bytes())
        (run / RECORDS_FILE).write_bytes(data[:cut])
        torn = cut not in line_ends
        with pytest.warns(TornRecordWarning) if torn else _no_warning():
            summary = run_cohort(PROFILE, cohort, run, progress=False)
        assert summary.already_done == sum(1 for e in line_ends if e <= cut)
        got = _lines(run / RECORDS_FILE)
        assert [g["row_id"] for g in got] == [e["row_id"] for e in expected]  # each once
        assert got == expected


class _no_warning:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def test_a_failed_fsync_is_an_error_naming_the_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _policy(monkeypatch, 2, 3600)
    writer = RecordWriter(tmp_path / "run")

    def broken(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", broken)
    writer.append(record("r0"))
    with pytest.raises(OutputError, match=r"cannot fsync .*records\.jsonl"):
        writer.append(record("r1"))
    monkeypatch.undo()
    writer.close()
    assert [r.row_id for r in read_records(tmp_path / "run")] == ["r0", "r1"]


def test_a_failed_background_fsync_is_raised_by_the_next_append(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _policy(monkeypatch, 10**6, 0.05)
    calls: list[int] = []

    def broken(fd: int) -> None:
        calls.append(fd)
        raise OSError(28, "No space left on device")

    with RecordWriter(tmp_path / "run") as writer:
        monkeypatch.setattr(os, "fsync", broken)
        writer.append(record("r0"))
        deadline = time.monotonic() + 5.0
        while not calls and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.05)
        with pytest.raises(OutputError, match=r"cannot fsync .*records\.jsonl.*space"):
            writer.append(record("r1"))
        monkeypatch.undo()


@pytest.mark.parametrize(("name", "value"), [(ROWS_ENV, "0"), (ROWS_ENV, "1.5"),
                                             (SECONDS_ENV, "nan"), (SECONDS_ENV, "0")])
def test_a_bad_sync_setting_is_refused_before_anything_is_created(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(InputError, match=name):
        RecordWriter(tmp_path / "run")
    assert not (tmp_path / "run").exists()


@pytest.mark.faults
def test_kill_9_mid_run_then_resume_gives_every_row_exactly_once(tmp_path: Path) -> None:
    cohort = write_cohort(tmp_path / "c.jsonl", _specs(3000))
    env = {**os.environ, "PYTHONPATH": str(ROOT), SECONDS_ENV: "3600"}
    command = [sys.executable, "-m", "guardrepro", "run", "--profile", str(PROFILE),
               "--cohort", str(cohort), "--out", str(tmp_path / "run"), "--no-progress"]
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    path = tmp_path / "run" / RECORDS_FILE
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if path.exists() and path.stat().st_size > 200_000:  # > 100 records in
            break
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    kept = path.read_bytes().count(b"\n")
    assert 0 < kept < 3000, kept  # killed mid-run
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    ids = [r.row_id for r in read_records(path)]
    assert sorted(ids) == sorted(f"b{i:03d}:original" for i in range(3000))
    assert len(set(ids)) == 3000


def test_to_dict_is_the_json_of_asdict_without_its_copies() -> None:
    """``Record.to_dict`` skips ``asdict`` (a third of a rule row's time); its
    value must stay ``json.loads(json.dumps(asdict(record)))``, nested and
    non-string keys included."""
    from dataclasses import asdict

    reference = ROOT / "guardrepro" / "data" / "toy_reference" / "records.jsonl"
    samples = [*read_records(reference)[:20],
               record("odd", components={"harmfulness_rating": 0.5, "nested": {"k": [1, 2]}},
                      extra={"a": {"b": None}, "c": [0.1, 1e-300]})]
    def expected(rec: Record) -> dict[str, Any]:
        out: dict[str, Any] = json.loads(json.dumps(asdict(rec)))
        if all(out[k] is None for k in SCORE_KEYS):  # absent from a record without them
            out = {k: v for k, v in out.items() if k not in SCORE_KEYS}
        return out

    for rec in samples:
        assert rec.to_dict() == expected(rec)
    odd = samples[-1]
    with_int_keys = type(odd)(**{**{f: getattr(odd, f) for f in odd.__dataclass_fields__},
                                 "extra": {1: "x", "2": {3: 4}}})
    assert with_int_keys.to_dict() == expected(with_int_keys)
