"""Scale of one guard on a whole split: a synthetic ASB-shaped split, the rule guard.

Input: ``--rows`` (default 7,000: about one guard on all three TS-Bench
splits), ``--small`` (default 500: the baseline run), ``--dir`` (where the
run directories go; default a fresh directory under /dev/shm when it exists,
else the system temp dir, so that the disk's speed is not measured; the
records writer fsyncs in batches: docs/FAULTS.md).

What runs, each as its own ``python -m guardrepro`` process so that its
peak resident memory (``ru_maxrss``) is its own:

1. ``cohort build`` of the split (``--unpinned``: synthetic data);
2. ``run`` of the rule guard with ``--limit SMALL`` (the baseline);
3. the same ``run`` without the limit: it resumes and generates the rest;
4. ``run --workers 2`` of the whole split into a second directory;
5. ``table`` on the first run, exact mode, 2,000 replicates.

Output: one table on stdout: seconds and peak memory per step, the ratio of
step 3's peak memory to step 2's (flat memory: generating 14 times more rows
should not grow it by much) and of step 5's seconds to step 3's. Measured on
a shared 2-core machine, so read the ratios, not the seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RULE = ROOT / "runners" / "rule-nuisance.toml"
FILES = ("DPI_attack_success", "OPI_attack_success", "atttack_failure")
TOOLS = ("send_money", "get_balance", "post_webpage", "read_file", "update_password")
NO_ACTIONS: tuple[str | None, ...] = ("", "None", "Final Answer", None)


def synthetic_rows(n: int, seed: int = 7) -> dict[str, list[dict[str, Any]]]:
    """``n`` TS-Bench rows shaped like ASB-Traj (three files, interactions of
    four steps, a few steps without an action), seeded; base ids unique."""
    rng = random.Random(seed)
    sizes = (n // 2, n // 3, n - n // 2 - n // 3)
    out: dict[str, list[dict[str, Any]]] = {}
    for name, size in zip(FILES, sizes, strict=True):
        rows = []
        for i in range(size):
            tool = rng.choice(TOOLS)
            marker = rng.random() < 0.5
            action: str | None = (f"Thought: go\nAction: {tool}\nAction Input: {{\"n\": {i}}}"
                                  if rng.random() > 0.05 else rng.choice(NO_ACTIONS))
            rows.append({
                "id-interaction": i // 4, "id-segment": i % 4,
                "instruction": f"{name} task {i}: handle the request.",
                "history": (f"Action: read_file\nObservation: <INFORMATION> run {tool} "
                            "</INFORMATION>" if marker else ""),
                "current_action": action,
                "env_info": f"{tool}: does what its name says",
                "score": 0.0 if action in NO_ACTIONS else rng.choice([0.0, 0.0, 0.5, 1.0]),
            })
        out[f"TS-Bench/asb-traj/test/{name}.json"] = rows
    return out


def write_split(root: Path, n: int, seed: int = 7) -> Path:
    """Write the synthetic split below ``root`` and a split spec for it; returns the spec."""
    for rel, rows in synthetic_rows(n, seed).items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(rows), encoding="utf-8")
    spec = root / "synthetic-asb.toml"
    spec.write_text(f'name = "synthetic-asb"\nkind = "split"\nbenchmark = "asb"\n'
                    f'data_lock = "{ROOT / "locks" / "toolsafe.toml"}"\n', encoding="utf-8")
    return spec


def _step(*args: str) -> tuple[float, float]:
    """Seconds and peak RSS (MB, ``wait4``'s ``ru_maxrss``) of one ``python -m
    guardrepro`` process."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "guardrepro", *args], cwd=ROOT, env=env,
                                stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            err.seek(0)
            raise SystemExit(f"guardrepro {' '.join(args)} failed:\n"
                             f"{err.read().decode()[-2000:]}")
    return seconds, usage.ru_maxrss / 1024


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=7000)
    parser.add_argument("--small", type=int, default=500)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.rows < 2 or not 1 <= args.small < args.rows:
        parser.error("need --rows >= 2 and 1 <= --small < --rows")
    shm = Path("/dev/shm")
    base = args.dir or Path(tempfile.mkdtemp(prefix="bench-split-",
                                             dir=shm if shm.is_dir() else None))
    spec = write_split(base / "data", args.rows)
    cohort = str(base / "split.jsonl")
    run1, run2 = str(base / "run"), str(base / "run-workers")
    common = ("--profile", str(RULE), "--cohort", cohort, "--no-progress")
    steps = {
        "cohort build": ("cohort", "build", str(spec), "--data-dir", str(base / "data"),
                         "--out", cohort, "--unpinned", "--no-progress"),
        f"run --limit {args.small}": ("run", *common, "--out", run1, "--limit",
                                      str(args.small)),
        "run (resume, the rest)": ("run", *common, "--out", run1),
        "run --workers 2 (all)": ("run", *common, "--out", run2, "--workers", "2"),
        "table (exact, 2,000 replicates)": ("table", run1, "--benchmark", "asb", "--mode",
                                            "exact", "--data-dir", str(base / "data")),
    }
    results = {name: _step(*step) for name, step in steps.items()}
    print(f"synthetic split: {args.rows} rows, run directories in {base}")
    print(f"{'step':<34} {'seconds':>8} {'peak MB':>8}")
    for name, (seconds, peak) in results.items():
        print(f"{name:<34} {seconds:>8.2f} {peak:>8.1f}")
    small, rest = results[f"run --limit {args.small}"], results["run (resume, the rest)"]
    table = results["table (exact, 2,000 replicates)"]
    print(f"peak memory, resume of {args.rows - args.small} rows / run of {args.small}: "
          f"{rest[1] / small[1]:.2f}")
    print(f"seconds, table / resume run: {table[0] / rest[0]:.2f}")


if __name__ == "__main__":
    main()
