"""Two-worker runs: one combined progress report, and Ctrl-C ends everything with 130.

The run is a real ``python -m guardrepro run --workers 2`` on a tiny random Qwen2 in
its own session; Ctrl-C is a SIGINT to the whole process group, as a terminal sends
it. After each interrupt no process of the group may remain, and rerunning resumes.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from runner_helpers import TEMPLATE, build_diverse_tiny, write_cohort, write_profile
from signal_helpers import stop_and_reap

from guardrepro.rundir.records import read_records

ROOT = Path(__file__).resolve().parents[1]
EXIT_WITHIN_S = 10.0


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("interrupt")
    tiny = build_diverse_tiny(base / "tiny")
    template = base / "template.txt"
    template.write_text(TEMPLATE, encoding="utf-8")
    quick = write_profile(base / "quick.toml", tiny, template, options={"batch_size": 2},
                          decoding='mode = "greedy"\nmax_new_tokens = 4')
    slow = write_profile(base / "slow.toml", tiny, template, options={"batch_size": 1},
                         decoding='mode = "greedy"\nmax_new_tokens = 48')
    return {"quick": quick, "slow": slow, "small": write_cohort(base / "small.jsonl", 6),
            "big": write_cohort(base / "big.jsonl", 400)}


def _start(profile: Path, cohort: Path, out: Path, *args: str,
           **env: str) -> subprocess.Popen[str]:
    run_env = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    return subprocess.Popen(
        [sys.executable, "-m", "guardrepro", "run", "--profile", str(profile), "--cohort",
         str(cohort), "--out", str(out), "--workers", "2", *args],
        env=run_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_two_workers_report_one_progress_without_bar_frames(setup: dict[str, Path],
                                                           tmp_path: Path) -> None:
    proc = _start(setup["quick"], setup["small"], tmp_path / "run",
                  GUARDREPRO_PROGRESS_EVERY_S="0")
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert "\r" not in err  # stderr is a pipe: lines, no bar frames
    lines = [line for line in err.splitlines() if line.startswith("run run: ")]
    # every line counts rows of both workers against the whole cohort (6 rows)
    assert lines and all("/6 rows" in line for line in lines), err
    assert lines[-1].startswith("run run: 6/6 rows (100%)"), lines
    assert len(read_records(tmp_path / "run")) == 6
    # run.log: the start, the progress lines and the summary, kept with the run
    log = (tmp_path / "run" / "run.log").read_text()
    assert "2 worker(s)" in log and "run run: 6/6 rows (100%)" in log
    assert "6 row(s) generated, 0 already recorded, 0 remaining" in log
    assert not (tmp_path / ".run.workers").exists()


@pytest.mark.slow  # a second two-worker run
def test_worker_log_lines_reach_the_run_log(setup: dict[str, Path], tmp_path: Path) -> None:
    """Each worker's own lines and transformers' records logged in the workers (``-v``:
    INFO) are in the parent's run.log, named by the worker's pid, not the parent's."""
    proc = _start(setup["quick"], setup["small"], tmp_path / "run", "-v")
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    lines = [line for line in (tmp_path / "run" / "run.log").read_text().splitlines()
             if re.match(r"\d{4}-\d\d-\d\d ", line)]  # not a record's continuation lines
    pid = re.compile(r" (\S+) \[pid (\d+)\]: (.*)$")
    parsed = [m.groups() for m in map(pid.search, lines) if m]
    assert len(parsed) == len(lines)
    workers = {}
    for name, who, text in parsed:
        found = re.match(r"worker (\S+) \(pid (\d+)\): ", text)
        if name == "guardrepro.run.workers" and found:
            assert found.group(2) == who  # logged in that process
            workers.setdefault(found.group(1), set()).add(int(who))
    assert set(workers) == {"1/2", "2/2"}, lines
    pids = set().union(*workers.values())
    assert len(pids) == 2 and proc.pid not in pids
    assert any(text.startswith(f"worker {shard} (pid ") and "row(s) generated" in text
               for shard in workers for _, _, text in parsed)
    # transformers' INFO records from the workers (the parent loads no tokenizer)
    assert any(name.startswith("transformers") and int(who) in pids
               for name, who, _ in parsed), lines


def _group_size(pgid: int) -> int:
    count = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        count += int(fields[2]) == pgid  # the process group id
    return count


def _records_size(out: Path) -> int:
    shards = out.parent / f".{out.name}.workers"
    return sum(path.stat().st_size for path in shards.glob("*/*/records.jsonl"))


def _wait_for(stage: int, proc: subprocess.Popen[str], out: Path) -> None:
    """0, 1: a fixed moment of start-up; 2: both workers are running; 3: a worker
    has appended a record since this attempt started (it is generating)."""
    before = _records_size(out)
    deadline = time.monotonic() + 120
    if stage < 2:
        time.sleep(0.3 if stage == 0 else 1.5)
        return
    while time.monotonic() < deadline and proc.poll() is None:
        if stage == 2 and _group_size(proc.pid) >= 3:
            return
        if stage == 3 and _records_size(out) > before:
            return
        time.sleep(0.05)
    pytest.fail(f"the run did not reach stage {stage} (rc {proc.poll()})")


ATTEMPTS = 20
LANES = 2  # runs interrupted at once, each lane in its own run directory


def _interrupt(setup: dict[str, Path], out: Path, attempt: int) -> tuple[int, float]:
    """One Ctrl-C at stage ``attempt % 4`` of a fresh run into ``out``: the exit
    code (130) and the seconds from the signal to the exit."""
    proc = _start(setup["slow"], setup["big"], out)
    _wait_for(attempt % 4, proc, out)  # while starting, spawning, loading, generating
    took, err = stop_and_reap(proc, lambda: os.killpg(proc.pid, signal.SIGINT),
                              within_s=EXIT_WITHIN_S, settle_s=2.0,
                              alive=lambda: _group_alive(proc.pid),
                              label=f"attempt {attempt + 1} (Ctrl-C)")
    # 130, or death by SIGINT itself (what a shell also reports as 130) when the
    # signal lands before Python ran any of guardrepro
    code = 130 if proc.returncode == -signal.SIGINT else proc.returncode
    assert code == 130, (attempt + 1, err[-2000:])
    assert "Traceback" not in err or proc.returncode == -signal.SIGINT, err[-2000:]
    return code, round(took, 2)


@pytest.mark.slow
def test_ctrl_c_ends_every_worker_and_exits_130_every_time(setup: dict[str, Path],
                                                          tmp_path: Path) -> None:
    """ATTEMPTS interrupts, each of a fresh run, five at each stage; LANES of them
    at a time, each lane rerunning (resuming) its own run directory. Every lane's
    process group is its own, so one lane's Ctrl-C never reaches the other's."""
    per_lane = ATTEMPTS // LANES
    outs = [tmp_path / f"run{lane}" for lane in range(LANES)]

    def lane(index: int) -> list[tuple[int, float]]:
        return [_interrupt(setup, outs[index], attempt)
                for attempt in range(index * per_lane, (index + 1) * per_lane)]

    with ThreadPoolExecutor(LANES) as pool:
        lanes = [pool.submit(lane, index) for index in range(LANES)]
        outcomes = [outcome for done in lanes for outcome in done.result()]
    assert [code for code, _ in outcomes] == [130] * ATTEMPTS, outcomes
    for out in outs:
        for shard in (out.parent / f".{out.name}.workers").glob("*/*"):
            read_records(shard)  # what the interrupted workers appended still reads back
    print("exit after Ctrl-C (s):", [took for _, took in outcomes])
