"""Fault suite, signals: SIGTERM and SIGHUP end ``run --workers 2`` as Ctrl-C
does, and its workers never outlive it.

Each trial starts a real ``python -m guardrepro run --workers 2`` (the rule
backend: no model to load, so a trial costs a process start) in its own
session and signals the parent alone, as ``timeout``, systemd, Slurm and
``docker stop`` do. After each: exit 143 (129 for SIGHUP) within seconds, no
process of its group left, every records lock free, and the message says that
rerunning resumes. After all of them the same command finishes the run, whose
records equal an uninterrupted run's. A ``kill -9`` of the parent takes its
workers with it (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import pytest
from runner_helpers import write_cohort
from signal_helpers import stop_and_reap

from guardrepro.run.pipeline import run_cohort
from guardrepro.rundir.records import read_records

pytestmark = [pytest.mark.faults,
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux /proc")]

ROOT = Path(__file__).resolve().parents[1]
RULE = ROOT / "runners/rule-nuisance.toml"
# The rule backend writes thousands of rows a second: on an idle machine a
# 5,000-row cohort finished before a trial's signal. 20 trials generated 847 of
# 20,000 rows here (a larger cohort also takes longer to load).
ROWS = 20_000
EXIT_WITHIN_S = 10.0
CONTENT = ("row_id", "output_token_ids", "output_text", "finish_reason", "status", "score",
           "error_type", "components", "input_sha256", "prompt_tokens", "provenance_sha256")


def _start(cohort: Path, out: Path, *extra: str, pipes: bool = True) -> subprocess.Popen[str]:
    """The run in its own session; without ``pipes`` its output is dropped (a
    surviving worker would hold a pipe open and hang the reader)."""
    where = subprocess.PIPE if pipes else subprocess.DEVNULL
    return subprocess.Popen(
        [sys.executable, "-m", "guardrepro", "run", "--profile", str(RULE), "--cohort",
         str(cohort), "--out", str(out), "--workers", "2", "--no-progress", *extra],
        env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=where, stderr=where, text=True,
        start_new_session=True)


def _group(pgid: int) -> list[int]:
    """The pids of process group ``pgid`` (zombies, already dead, left out)."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            pids.append(int(stat.parent.name))
    return pids


def _records_size(out: Path) -> int:
    return sum(p.stat().st_size for p in out.parent.glob(f".{out.name}.workers/*/*/*.jsonl"))


def _wait_for(stage: int, proc: subprocess.Popen[str], out: Path) -> None:
    """0, 1: a fixed moment of start-up; 2: both workers started; 3: a record
    appended since this trial began (the workers are generating). A run that
    finished the cohort first fails the trial, naming its exit code."""
    if stage < 2:
        time.sleep(0.2 if stage == 0 else 1.0)
        if proc.poll() is not None:
            pytest.fail(f"the run ended before stage {stage} (rc {proc.poll()}): "
                        f"too few rows left in the cohort")
        return
    before = _records_size(out)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if stage == 2 and len(_group(proc.pid)) >= 3:
            return
        if stage == 3 and _records_size(out) > before:
            return
        time.sleep(0.02)
    pytest.fail(f"the run did not reach stage {stage} (rc {proc.poll()})")


def _locks_free(root: Path) -> bool:
    for lock in root.rglob("records.jsonl.lock"):
        fd = os.open(lock, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                return False
            raise
        finally:
            os.close(fd)
    return True


def _content(run: Path) -> list[tuple[object, ...]]:
    return [tuple(getattr(r, k) for k in CONTENT) for r in read_records(run)]


def test_sigterm_and_sighup_end_every_worker_and_the_rerun_resumes(tmp_path: Path) -> None:
    cohort = write_cohort(tmp_path / "cohort.jsonl", ROWS)
    work = tmp_path / "work"
    work.mkdir()
    out = work / "run"
    outcomes = []
    for attempt in range(20):
        sent = signal.SIGHUP if attempt % 5 == 4 else signal.SIGTERM
        proc = _start(cohort, out)
        _wait_for(attempt % 4, proc, out)  # while starting, spawning, generating
        assert proc.poll() is None, proc.communicate()
        took, err = stop_and_reap(proc, partial(os.kill, proc.pid, sent),  # the parent alone
                                  within_s=EXIT_WITHIN_S, settle_s=3.0,
                                  alive=partial(_group, proc.pid),
                                  label=f"trial {attempt + 1} ({sent.name})")
        assert _locks_free(work), f"trial {attempt + 1}: a records lock is still held"
        # 128 + the signal; or, 0.2 s after the start, death by the signal itself when
        # it landed before Python ran any of guardrepro (the shell reports the same code)
        early = attempt % 4 == 0 and proc.returncode == -sent
        assert early or proc.returncode == 128 + sent, (attempt + 1, err[-2000:])
        assert early or "rerun the same command to resume" in err, err
        assert "Traceback" not in err, err
        outcomes.append(round(took, 2))
    log = out.parent / f".{out.name}.workers" / "run.log"
    assert "interrupted by SIGTERM: the records written so far are kept" in log.read_text()
    interrupted = _records_size(out)
    assert interrupted > 0
    done = sum(1 for p in out.parent.glob(f".{out.name}.workers/*/*/*.jsonl")
               for _ in p.open())
    assert done < ROWS, f"the trials generated all {ROWS} rows: nothing left to resume"
    print(f"rows generated by the trials: {done} of {ROWS}")
    proc = _start(cohort, out)  # the same command finishes the run
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    reference = tmp_path / "reference"
    run_cohort(RULE, cohort, reference, progress=False)
    assert _content(out) == _content(reference)
    print(f"exit after the signal (s), {ROWS} rows:", outcomes)


def test_kill_9_of_the_parent_takes_its_workers(tmp_path: Path) -> None:
    cohort = write_cohort(tmp_path / "cohort.jsonl", ROWS)
    out = tmp_path / "run"
    proc = _start(cohort, out, pipes=False)
    _wait_for(3, proc, out)
    assert len(_group(proc.pid)) >= 3  # the parent and its two workers
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 3.0
    while _group(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    left = _group(proc.pid)
    for pid in left:  # the pre-fix behaviour: end them here, then fail
        os.kill(pid, signal.SIGKILL)
    assert not left, "workers outlived a parent killed with SIGKILL"
    assert _locks_free(tmp_path)


def _sessions(sid: int) -> list[int]:
    """The live pids of session ``sid`` (a local Ray's processes stay in it)."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] != "Z":
            pids.append(int(stat.parent.name))
    return pids


def test_sigterm_to_a_ray_driver_exits_143_and_leaves_no_ray_process(tmp_path: Path) -> None:
    """``ray.init`` installs a SIGTERM handler that exits 15; the driver keeps its own."""
    pytest.importorskip("ray")
    short = Path(tempfile.mkdtemp(prefix="gr-", dir="/tmp"))  # room for Ray's sockets
    try:
        cohort = write_cohort(tmp_path / "cohort.jsonl", ROWS)
        out = short / "run"
        proc = _start(cohort, out, "--engine", "ray")
        deadline = time.monotonic() + 240
        while proc.poll() is None and time.monotonic() < deadline and not (
                (out / "records.jsonl").is_file() and (out / "records.jsonl").stat().st_size):
            time.sleep(0.1)
        assert proc.poll() is None, proc.communicate()
        os.kill(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 143, err[-2000:]
        assert "rerun the same command to resume" in err
        deadline = time.monotonic() + 10
        while _sessions(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _sessions(proc.pid), "a Ray process outlived its driver"
        assert "interrupted by SIGTERM" in (out / "run.log").read_text()
    finally:
        shutil.rmtree(short, ignore_errors=True)
