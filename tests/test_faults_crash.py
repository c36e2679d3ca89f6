"""Fault suite, crash consistency of the writers other than ``run`` and
``cohort build``: ``merge``, ``report`` / ``report --html``, ``quantize`` and
``sweep`` are each killed with SIGKILL at spread-out moments (20 trials each).

After every kill, each final output name holds either nothing or exactly the
bytes of an uninterrupted run (computed first, in the same test): never a
half-written file. After the trials, the command is run once more to the end:
its outputs are byte-identical to the uninterrupted run's, and no temp file or
directory of a killed writer is left (``.*.tmp-<pid>-*``, ``.*.merge-<pid>-*``,
``.*.staging-<pid>-*``). The kill moments are spread evenly over the measured
duration of the uninterrupted command, so trials land in every phase.

``quantize`` and ``sweep`` convert with mlx-lm and skip where it is missing.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from extras import needs_matplotlib
from test_faults_input import _paired_cohort

from guardrepro.rundir.manifest import read_manifest

pytestmark = pytest.mark.faults

ROOT = Path(__file__).resolve().parent.parent
RULE = ROOT / "runners/rule-nuisance.toml"
TRIALS = 20
LITTER = (".tmp-", ".merge-", ".staging-")


def _env(home: Path) -> dict[str, str]:
    return {**os.environ, "GUARDREPRO_HOME": str(home),
            "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def _cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "guardrepro", *args], env=env,
                          capture_output=True, text=True, check=False, timeout=600)


def _snapshot(root: Path, names: list[str]) -> dict[str, bytes | None]:
    return {n: (root / n).read_bytes() if (root / n).is_file() else None for n in names}


def _litter(root: Path) -> list[str]:
    if not root.exists():
        return []
    return sorted(str(p.relative_to(root)) for p in root.rglob(".*")
                  if any(tag in p.name for tag in LITTER))


def _trials(args: list[str], env: dict[str, str], duration: float, outputs: Path,
            names: list[str], expected: dict[str, bytes | None],
            reset: Callable[[], None] | None = None, spread: float = 1.0) -> int:
    """Kill ``args`` TRIALS times, at moments spread over ``spread * duration``
    (a resumable command keeps its progress between trials, so a fraction of its
    duration per trial still reaches every phase); after each kill every name in
    ``names`` under ``outputs`` is absent or as expected. Returns the number of
    trials killed before the command finished."""
    killed = 0
    for i in range(TRIALS):
        if reset is not None:
            reset()
        proc = subprocess.Popen([sys.executable, "-m", "guardrepro", *args], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(spread * duration * (i + 0.5) / TRIALS)
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            killed += 1
        proc.wait()
        for name, data in _snapshot(outputs, names).items():
            assert data is None or data == expected[name], (
                f"trial {i}: {name} is half-written ({len(data)} bytes)")
    return killed


def _timed(args: list[str], env: dict[str, str]) -> float:
    start = time.monotonic()
    done = _cli(args, env)
    assert done.returncode == 0, done.stderr
    return time.monotonic() - start


def _rule_run(tmp_path: Path, env: dict[str, str], rows: int = 40) -> Path:
    cohort = _paired_cohort(tmp_path / "cohort.jsonl", rows)
    run = tmp_path / "run"
    done = _cli(["run", "--profile", str(RULE), "--cohort", str(cohort), "--out", str(run),
                 "--no-progress"], env)
    assert done.returncode == 0, done.stderr
    return run


@needs_matplotlib  # the files it checks include the report's PNGs
def test_killed_report_leaves_no_half_written_file(tmp_path):
    """``report --html`` writes everything ``report`` does, and report.html."""
    env = _env(tmp_path / "home")
    run = _rule_run(tmp_path, env)
    args = ["report", str(run), "--replicates", "200", "--html"]
    names = ["stats.json", "report.md", "flip_rates.png", "margin_hist.png", "report.html"]
    duration = _timed(args, env)
    expected = _snapshot(run, names)
    assert all(expected[n] is not None for n in names)
    second = _timed(args, env)  # idempotent: the same bytes again
    assert _snapshot(run, names) == expected, "a second report wrote different bytes"

    def reset() -> None:
        for name in names:
            (run / name).unlink(missing_ok=True)

    killed = _trials(args, env, max(duration, second), run, names, expected, reset)
    assert killed >= TRIALS // 2, f"only {killed} of {TRIALS} trials were killed mid-way"
    _timed(args, env)
    assert _snapshot(run, names) == expected
    assert _litter(run) == []


def test_killed_merge_leaves_no_half_written_run(tmp_path):
    env = _env(tmp_path / "home")
    cohort = _paired_cohort(tmp_path / "cohort.jsonl", 40)
    shards = []
    for k in (1, 2):
        shard = tmp_path / f"s{k}"
        done = _cli(["run", "--profile", str(RULE), "--cohort", str(cohort), "--out",
                     str(shard), "--shard", f"{k}/2", "--no-progress"], env)
        assert done.returncode == 0, done.stderr
        shards.append(str(shard))
    out = tmp_path / "merged"
    args = ["merge", *shards, "--out", str(out)]
    duration = _timed(args, env)
    names = ["records.jsonl", "merge.json"]  # manifest.json holds its creation time
    expected = _snapshot(out, names)

    def reset() -> None:
        if out.exists():  # a finished merge: start the next trial from nothing
            for p in out.iterdir():
                p.unlink()
            out.rmdir()

    reset()
    killed = _trials(args, env, duration, out, names, expected, reset)
    assert killed >= TRIALS // 2, f"only {killed} of {TRIALS} trials were killed mid-way"
    reset()
    _timed(args, env)
    assert _snapshot(out, names) == expected
    assert read_manifest(out) is not None  # whole, and valid
    assert _litter(tmp_path) == []


def test_killed_quantize_leaves_no_half_written_artifact(tmp_path):
    pytest.importorskip("mlx_lm")
    env = _env(tmp_path / "home")
    recipe = str(ROOT / "quantize/q8-g64-f32.toml")
    toy = str(ROOT / "guardrepro/data/toy_guard")
    reference = tmp_path / "reference"
    first = _timed(["quantize", "--recipe", recipe, "--model", toy, "--unpinned",
                    "--out", str(reference)], env)
    warm = _timed(["quantize", "--recipe", recipe, "--model", toy, "--unpinned",
                   "--out", str(tmp_path / "warm")], env)
    duration = min(first, warm)  # the first conversion also warms the file cache
    # the weights, config and tokenizer (the provenance files hold timings and names)
    names = sorted(p.name for p in reference.iterdir() if p.is_file() and (
        p.suffix == ".safetensors" or p.name in ("config.json", "tokenizer.json")))
    expected = _snapshot(reference, names)
    out = tmp_path / "out" / "q8"
    args = ["quantize", "--recipe", recipe, "--model", toy, "--unpinned", "--out", str(out)]
    killed = _trials(args, env, duration, out, names, expected, spread=0.6)
    assert killed >= TRIALS // 2
    if out.exists():
        for p in out.iterdir():
            p.unlink()
        out.rmdir()
    _timed(args, env)
    assert _snapshot(out, names) == expected
    assert _litter(tmp_path / "out") == []


@needs_matplotlib  # a sweep draws its figures
def test_killed_sweep_resumes_to_the_same_records(tmp_path):
    pytest.importorskip("mlx_lm")
    from test_sweep import _spec

    env = _env(tmp_path / "home")
    q = ROOT / "quantize"
    spec = _spec(tmp_path, limit=1, recipes=(  # one recipe and one rule: the smallest sweep
        f'[[recipe]]\nrecipe = "{q / "q8-g64.toml"}"\ncpu_recipe = "{q / "q8-g64-f32.toml"}"\n'
        '[[rule]]\nrule = "nuisance"\n'))
    reference = tmp_path / "reference"
    duration = _timed(["sweep", str(spec), "--out", str(reference), "--no-progress"], env)
    names = sorted(str(p.relative_to(reference)) for p in reference.rglob("records.jsonl"))
    out = tmp_path / "out"
    args = ["sweep", str(spec), "--out", str(out), "--no-progress"]
    killed = _trials(args, env, duration, out, [], {}, spread=0.25)  # it resumes
    assert killed >= TRIALS // 2
    _timed(args, env)
    assert _records(out, names) == _records(reference, names)
    assert _litter(out) == []


def _records(root: Path, names: list[str]) -> dict[str, dict[str, dict]]:
    """Each records file as row_id -> record, without what measures the machine
    rather than the output (wall-clock timings, creation time, peak memory)."""
    measured = {"timings", "created_at", "peak_memory_bytes"}
    out = {}
    for name in names:
        rows = [json.loads(line) for line in (root / name).read_text().splitlines()]
        out[name] = {r["row_id"]: {k: v for k, v in r.items() if k not in measured}
                     for r in rows}
    return out
