"""``run --engine ray`` on the local two-CPU Ray of the ``cluster`` fixture (tests/conftest.py).

Expectations come from the local engine: ``run_with_workers`` (``--workers
2``, the processes path) on the same rows, compared on every field but the
timings (``ray_pool.TIMING_FIELDS``), including the full provenance. Faults
are injected in the Ray worker processes only (tests/ray_faults.py); the
expectations never pass through them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray", reason="needs Ray: pip install 'guardrepro[ray]'")


from guardrepro.errors import InferenceError, ProvenanceError  # noqa: E402
from guardrepro.run.balance import balanced_split, row_size  # noqa: E402
from guardrepro.run.engine_ray import RayOptions, run_on_ray  # noqa: E402
from guardrepro.run.profile import RunProfile  # noqa: E402
from guardrepro.run.ray_pool import TIMING_FIELDS  # noqa: E402
from guardrepro.run.workers import run_with_workers  # noqa: E402
from guardrepro.rundir.cohort import read_cohort  # noqa: E402
from guardrepro.rundir.manifest import read_manifest  # noqa: E402
from guardrepro.rundir.records import read_records  # noqa: E402

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
TOY_ROWS = 16
RULE_ROWS = 2000
TWO = RayOptions(workers=2, cpus_per_worker=1)
# what a resumed run (other batches) shares with a straight one, bit for bit
SAME = ("row_id", "output_token_ids", "output_text", "score", "status", "input_sha256",
        "provenance_sha256")



@pytest.fixture(scope="module")
def toy(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The toy guard's home and the first TOY_ROWS rows of the toy cohort."""
    from guardrepro.artifacts.fetch import fetch_lock
    from guardrepro.bench.cohort.build import build_cohort_file

    base = tmp_path_factory.mktemp("toy")
    home = base / "home"
    for lock in ("locks/toy-bench.toml", "locks/toy-guard.toml"):
        fetch_lock(ROOT / lock, home, progress=False)
    full = base / "full.jsonl"
    build_cohort_file(ROOT / "cohorts/toy-64.toml", ROOT / "guardrepro/data/toy_bench", full)
    cohort = base / "cohort.jsonl"
    cohort.write_bytes(b"".join(full.read_bytes().splitlines(keepends=True)[:TOY_ROWS]))
    return {"home": home, "cohort": cohort, "full": full}


@pytest.fixture(scope="module")
def rule_cohort(toy: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A synthetic RULE_ROWS-row split: the toy rows repeated under new ids."""
    rows = [json.loads(line) for line in toy["full"].read_text(encoding="utf-8").splitlines()]
    out = tmp_path_factory.mktemp("rule") / "cohort.jsonl"
    lines = []
    for i in range(RULE_ROWS):
        row = json.loads(json.dumps(rows[i % len(rows)]))
        copy = i // len(rows)
        row["base_sample_id"] = row["sample"]["trajectory_id"] = f"{row['base_sample_id']}-c{copy}"
        row["sample"]["sample_id"] = f"{row['sample']['sample_id']}-c{copy}"
        lines.append(json.dumps(row, sort_keys=True) + "\n")
    out.write_text("".join(lines), encoding="utf-8")
    return out


@pytest.fixture(scope="module")
def toy_local(toy: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The toy rows by the local engine, ``--workers 2`` (1 thread each, as
    cores / 2 on the 2-core machine and as a Ray actor of 1 CPU)."""
    profile = RunProfile.load(ROOT / "runners/toy-hf.toml").with_backend_options(threads=1)
    return _local(profile, toy["cohort"], tmp_path_factory.mktemp("toy-local"), toy["home"])


@pytest.fixture(scope="module")
def rule_local(rule_cohort: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The RULE_ROWS rows by the local engine (``--workers 2``): the expectation of
    every rule-guard test here, run once for the module (the rule backend is
    deterministic and the tests only read it)."""
    return _local(_rule(), rule_cohort, tmp_path_factory.mktemp("rule-local"), None)


def _fields(run_dir: Path) -> list[dict[str, Any]]:
    out = []
    for record in read_records(run_dir):
        data = record.to_dict()
        for name in TIMING_FIELDS:
            data.pop(name)
        out.append(data)
    return out


def _local(profile: RunProfile, cohort: Path, where: Path, home: Path | None) -> Path:
    run_dir = where / "run"  # the same name as every Ray run: the run id is the name
    run_with_workers(profile, cohort, run_dir, workers=2, progress=False, home=home)
    return run_dir


def _rule() -> RunProfile:
    return RunProfile.load(ROOT / "runners/rule-nuisance.toml")


def test_ray_records_equal_two_local_workers_toy_guard(
    cluster: Any, toy: dict[str, Path], toy_local: Path, tmp_path: Path
) -> None:
    profile = RunProfile.load(ROOT / "runners/toy-hf.toml")
    assert profile.backend_options["threads"] == "auto"  # Ray: from the actor's allotment
    want = toy_local
    got = tmp_path / "ray" / "run"
    summary = run_on_ray(profile, toy["cohort"], got, options=TWO, progress=False,
                         home=toy["home"])
    assert summary.generated == TOY_ROWS and summary.remaining == 0
    assert [r.row_id for r in read_records(got)] == [r.row_id for r in read_cohort(toy["cohort"])]
    assert _fields(got) == _fields(want)
    manifest = read_manifest(got)
    assert manifest is not None and manifest.shard is None
    assert "threads" not in manifest.provenance.backend_config  # changes no token
    # run.log: the driver's start and summary, and each unit's line logged in an actor
    log = (got / "run.log").read_text(encoding="utf-8")
    assert re.search(r"\[pid \d+\]: hf runner \(pid \d+\): 1 torch thread\(s\)", log), log
    assert f"[pid {os.getpid()}]: run {got}: profile toy-hf" in log
    assert "ray engine, 2 worker(s), 2 unit(s)" in log
    assert f"{TOY_ROWS} row(s) generated, 0 already recorded, 0 remaining" in log
    units = re.findall(r"\[pid (\d+)\]: unit (\d) of run (\S+): (\d+) row\(s\) generated", log)
    assert sorted(u for _, u, _, _ in units) == ["1", "2"], log
    assert all(int(pid) != os.getpid() and where == str(got) for pid, _, where, _ in units)
    by_unit = {u: int(n) for _, u, _, n in units}
    parts = balanced_split(read_cohort(toy["cohort"]), 2, row_size)  # as --workers 2 splits
    assert by_unit == {str(k): len(part) for k, part in enumerate(parts, start=1)}


def test_ray_records_equal_two_local_workers_rule_guard_2000_rows(
    cluster: Any, rule_cohort: Path, rule_local: Path, tmp_path: Path
) -> None:
    want = rule_local
    got = tmp_path / "ray" / "run"
    run_on_ray(_rule(), rule_cohort, got, options=TWO, progress=False)
    assert len(read_records(got)) == RULE_ROWS
    assert _fields(got) == _fields(want)


def _row_in_unit(cohort: Path, unit: int, units: int, nth: int = 3) -> str:
    """The ``nth`` row (cohort order) of unit ``unit`` (from 1) of ``units``."""
    return balanced_split(read_cohort(cohort), units, row_size)[unit - 1][nth].row_id


def test_killed_actor_is_retried_and_every_row_is_recorded_once(
    cluster: Any, rule_cohort: Path, rule_local: Path, faults: Path, tmp_path: Path
) -> None:
    victim_row = _row_in_unit(rule_cohort, 3, 4)
    hold = faults / f"hold-{victim_row}"
    pid_file = faults / f"pid-{victim_row}"
    hold.touch()
    killed: list[int] = []

    def killer() -> None:
        deadline = time.monotonic() + 120
        while not pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        if pid_file.exists():
            pid = int(pid_file.read_text())
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        hold.unlink(missing_ok=True)

    thread = threading.Thread(target=killer)
    thread.start()
    got = tmp_path / "ray" / "run"
    try:
        run_on_ray(_rule(), rule_cohort, got, options=RayOptions(workers=2, units=4,
                   cpus_per_worker=1), progress=False)
    finally:
        hold.unlink(missing_ok=True)
        thread.join()
    assert len(killed) == 1
    with pytest.raises(ProcessLookupError):
        os.kill(killed[0], 0)  # the actor really died
    records = read_records(got)  # unique row ids, or this raises
    assert len(records) == RULE_ROWS
    assert _fields(got) == _fields(rule_local)


def test_failing_unit_names_the_row_and_local_engine_resumes_it(
    cluster: Any, rule_cohort: Path, rule_local: Path, faults: Path, tmp_path: Path
) -> None:
    bad_row = _row_in_unit(rule_cohort, 2, 2)
    marker = faults / f"raise-{bad_row}"
    marker.touch()
    got = tmp_path / "ray" / "run"
    try:
        with pytest.raises(InferenceError, match=re.escape(f"row '{bad_row}'")) as info:
            run_on_ray(_rule(), rule_cohort, got, options=TWO, progress=False)
    finally:
        marker.unlink()
    assert "RuntimeError: injected failure" in str(info.value)
    # a failure before the first record arrived leaves nothing, like a refusal
    partial = read_records(got) if got.exists() else []
    assert partial or not (tmp_path / "ray").exists()
    assert bad_row not in {r.row_id for r in partial}
    assert len(partial) < RULE_ROWS  # the failed unit left its rows to do
    # resumed by the local engine (one process: the run directory exists)
    summary = run_with_workers(_rule(), rule_cohort, got, workers=2, progress=False)
    assert summary.already_done == len(partial)
    assert _fields(got) == _fields(rule_local)


def test_unit_raises_while_another_is_busy_then_a_rerun_in_this_process_completes(
    cluster: Any, rule_cohort: Path, rule_local: Path, faults: Path, tmp_path: Path
) -> None:
    """The Ray here is the ``cluster`` fixture's, started by this process and kept
    across runs: the actor still busy with unit 1 when unit 2 raises must not keep
    its CPU, or the rerun below would wait for resources for ever."""
    busy_row = _row_in_unit(rule_cohort, 1, 2, nth=0)
    bad_row = _row_in_unit(rule_cohort, 2, 2, nth=-1)
    hold, pid_file = faults / f"hold-{busy_row}", faults / f"pid-{busy_row}"
    raise_marker = faults / f"raise-{bad_row}"
    hold.touch()
    raise_marker.touch()
    got = tmp_path / "ray" / "run"
    try:
        with pytest.raises(InferenceError, match=re.escape(f"row '{bad_row}'")):
            run_on_ray(_rule(), rule_cohort, got, options=TWO, progress=False)
        assert pid_file.exists()  # unit 1's actor was inside its unit when the job failed
        assert hold.exists()  # and would still be there, holding its CPU
        busy_pid = int(pid_file.read_text())
        assert ray.available_resources().get("CPU", 0.0) == 2.0
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.kill(busy_pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        with pytest.raises(ProcessLookupError):
            os.kill(busy_pid, 0)  # the busy actor was killed, not left running
    finally:
        hold.unlink(missing_ok=True)
        raise_marker.unlink(missing_ok=True)
        pid_file.unlink(missing_ok=True)
    summary = run_on_ray(_rule(), rule_cohort, got, options=TWO, progress=False)
    assert summary.remaining == 0 and summary.already_done + summary.generated == RULE_ROWS
    assert [{k: r[k] for k in SAME} for r in _fields(got)] == \
        [{k: r[k] for k in SAME} for r in _fields(rule_local)]


def test_ray_resumes_a_run_the_local_engine_started(
    cluster: Any, toy: dict[str, Path], toy_local: Path, tmp_path: Path
) -> None:
    profile = RunProfile.load(ROOT / "runners/toy-hf.toml")
    got = tmp_path / "mixed" / "run"
    run_with_workers(profile.with_backend_options(threads=1), toy["cohort"], got, workers=2,
                     limit=5, progress=False, home=toy["home"])  # interrupted after 5 rows
    assert len(read_records(got)) == 5
    summary = run_on_ray(profile, toy["cohort"], got, options=TWO, progress=False,
                         home=toy["home"])
    assert summary.already_done == 5 and summary.generated == TOY_ROWS - 5
    assert summary.remaining == 0
    # same tokens, text and score (the batches of a resumed run differ from a
    # straight run's, so the margins' last bits may too)
    assert [{k: r[k] for k in SAME} for r in _fields(got)] == \
        [{k: r[k] for k in SAME} for r in _fields(toy_local)]


def test_actor_with_another_transformers_version_is_refused(
    cluster: Any, rule_cohort: Path, faults: Path, tmp_path: Path
) -> None:
    marker = faults / "transformers-version"
    marker.write_text("0.0.1-other")
    got = tmp_path / "ray" / "run"
    try:
        with pytest.raises(ProvenanceError, match=r"node .*provenance\.package_versions\."
                           r"transformers: '[^']+' != '0\.0\.1-other'"):
            run_on_ray(_rule(), rule_cohort, got, options=TWO, progress=False)
    finally:
        marker.unlink()
    # refused before anything was generated: what the run created is gone
    assert not (tmp_path / "ray").exists()


def _ray_processes(marker: str) -> list[int]:
    """Pids whose command line mentions ``marker`` (a Ray temp dir)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if marker.encode() in cmdline:
                out.append(int(entry))
    return out


def _alive(pids: list[int], marker: str) -> list[int]:
    """The ``pids`` still running with ``marker`` in their command line."""
    return sorted(set(pids) & set(_ray_processes(marker)))


def test_killed_driver_leaves_a_run_the_same_command_resumes(
    cluster: Any, toy: dict[str, Path], toy_local: Path
) -> None:
    import subprocess
    import sys

    base = Path(tempfile.mkdtemp(prefix="gr-"))  # short: the run's own Ray temp dir fits
    run_dir = base / "run"
    command = [sys.executable, "-m", "guardrepro", "run", "--profile",
               str(ROOT / "runners/toy-hf.toml"), "--cohort", str(toy["cohort"]), "--out",
               str(run_dir), "--engine", "ray", "--workers", "2", "--units", "4",
               "--cpus-per-worker", "1", "--no-progress", "--home", str(toy["home"])]
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env["PYTHONPATH"] = str(ROOT)
    try:
        driver = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        records = run_dir / "records.jsonl"
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and driver.poll() is None:
            if records.exists() and records.read_bytes().count(b"\n") >= 1:
                break
            time.sleep(0.05)
        assert driver.poll() is None, "the run ended before it could be killed"
        # the driver's local Ray, taken while it runs (its processes, the GCS server
        # and the raylet among them, name the run's Ray temp dir): there is one to check
        marker = str(run_dir / ".ray")
        orphans = _ray_processes(marker)
        assert len(orphans) >= 2, "no Ray process of the run was found"
        driver.kill()
        driver.wait()
        partial = read_records(run_dir)
        assert 1 <= len(partial) < TOY_ROWS
        deadline = time.monotonic() + 60
        # the same command at once, while Ray's agents may still be noticing the
        # kill (docs/SCALE.md: up to about a minute, spent waiting, not computing):
        # the rerun overlaps that wait instead of following it
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                              check=False, timeout=600)
        # the local Ray the driver started goes with it, within the minute
        while _alive(orphans, marker) and time.monotonic() < deadline:
            time.sleep(0.5)
        left = _alive(orphans, marker)
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        assert left == []
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.strip().splitlines()[-1] == str(run_dir)
        assert f"{len(partial)} already done" in done.stdout
        # 4 units, then 4 units of the rest: other batches than --workers 2, so
        # tokens, text and score must match, the margins' last bits need not
        assert [{k: r[k] for k in SAME} for r in _fields(run_dir)] == \
            [{k: r[k] for k in SAME} for r in _fields(toy_local)]
        assert not (run_dir / ".ray").exists()  # removed after a completed run
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_duplicate_rows_are_dropped_when_identical_and_refused_when_not(
    rule_cohort: Path, tmp_path: Path
) -> None:
    import dataclasses

    from guardrepro.run.ray_pool import NondeterminismError, accept
    from guardrepro.rundir.records import RecordWriter
    from guardrepro.schema import Timings

    rule = _rule_records(rule_cohort, tmp_path)
    record = rule[0]
    expected = {r.row_id: r.input_sha256 for r in rule}
    sha = record.provenance_sha256
    with RecordWriter(tmp_path / "dup") as writer:
        assert accept(writer, record, provenance_sha256=sha, expected=expected)
        later = dataclasses.replace(record, timings=Timings(9.0, 9.0, 9.0),
                                    created_at="2030-01-01T00:00:00Z")
        assert not accept(writer, later, provenance_sha256=sha, expected=expected)
        other = dataclasses.replace(record, score=1.0 - (record.score or 0.0))
        with pytest.raises(NondeterminismError, match=r"\['score'\]"):
            accept(writer, other, provenance_sha256=sha, expected=expected)
        with pytest.raises(ProvenanceError, match="provenance"):
            accept(writer, rule[1], provenance_sha256="0" * 64, expected=expected)
    assert (tmp_path / "dup" / "records.jsonl").read_bytes().count(b"\n") == 1


def _rule_records(cohort: Path, tmp_path: Path) -> list[Any]:
    """The rule guard's records of the first two rows of ``cohort`` (local engine)."""
    from guardrepro.run.pipeline import run_cohort

    two = tmp_path / "two.jsonl"
    two.write_bytes(b"".join(cohort.read_bytes().splitlines(keepends=True)[:2]))
    run_cohort(_rule(), two, tmp_path / "rule", progress=False)
    return read_records(tmp_path / "rule")


def test_ray_options_need_the_ray_engine_and_shard_is_refused(
    rule_cohort: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from guardrepro.cli import main

    base = ["run", "--profile", str(ROOT / "runners/rule-nuisance.toml"), "--cohort",
            str(rule_cohort), "--out", str(tmp_path / "run"), "--no-progress"]
    capsys.readouterr()
    assert main([*base, "--units", "3", "--ray-address", "auto"]) == 2
    err = capsys.readouterr().err
    assert "--ray-address, --units need --engine ray" in err
    assert main([*base, "--engine", "ray", "--shard", "1/2"]) == 2
    assert "--shard and --engine ray cannot be combined" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()  # refused before anything was written
