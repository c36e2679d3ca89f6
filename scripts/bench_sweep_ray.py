"""Overhead of ``sweep --engine ray`` against the local sweep on the toy guard, in one invocation.

Input: ``--rows N`` (the sweep's ``limit``; default 8), ``--workers W``
(default 2), ``--home`` / ``--work`` (cache, scratch; default a temp dir),
``--json OUT``.

Output: one table on stdout, a line per configuration: wall seconds of the
whole sweep (quantization, runs, teacher-forced passes, outputs; Ray
start-up and shutdown included), peak resident memory of the process tree,
the ratios to the local sweep, and whether every configuration's records
equal the local sweep's on every field but the timings. Configurations:

- ``local``: ``sweep`` without ``--engine`` (every run in this process);
- ``ray-pool``: ``sweep --engine ray --units 1``: every run in one actor pool;
- ``ray-per-run``: the same Ray session, but each configuration's run its own
  pool, one after another (``run_on_ray`` per run; what ``sweep --engine
  ray`` did before the runs shared a pool).

Invariants: the same spec (reference ``runners/toy-hf.toml`` with one hf
thread, recipes ``q8-g64`` and ``q4-g64`` (their CPU variants on a CPU MLX),
the ``nuisance`` rule) into a fresh sweep directory per configuration, all
sharing one cache, filled before the first (``warm_up``); each configuration
quantizes its own artifacts. Memory as in ``scripts/bench_ray.py``.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from guardrepro.experiments.sweep import run_sweep
from guardrepro.experiments.sweep_ray import run_configurations
from guardrepro.run.engine_ray import RayOptions, ray_session, run_on_ray
from scripts.bench_ray import PeakMemory, _fields

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ("local", "ray-pool", "ray-per-run")
RUNS = ("reference", "runs/q8-g64-f32", "runs/q4-g64-f32", "runs/rule-nuisance")


def write_spec(work: Path, rows: int) -> Path:
    reference = work / "toy-hf-1.toml"
    text = (ROOT / "runners/toy-hf.toml").read_text(encoding="utf-8")
    reference.write_text(text.replace('"../locks/', f'"{ROOT}/locks/')
                         .replace('threads = "auto"', "threads = 1"), encoding="utf-8")
    q = ROOT / "quantize"
    recipes = "".join(f'[[recipe]]\nrecipe = "{q / f"{r}.toml"}"\n'
                      f'cpu_recipe = "{q / f"{r}-f32.toml"}"\n' for r in ("q8-g64", "q4-g64"))
    spec = work / "sweep.toml"
    spec.write_text(
        f'[sweep]\nname = "bench"\nsource_lock = "{ROOT / "locks/toy-guard.toml"}"\n'
        f'cohort = "{ROOT / "cohorts/toy-64.toml"}"\nlimit = {rows}\n'
        f'reference_profile = "{reference}"\nreference_name = "ref"\n'
        f'candidate_profile = "{ROOT / "runners/toy-mlx-q8.toml"}"\nreplicates = 100\n'
        f'{recipes}[[rule]]\nrule = "nuisance"\n', encoding="utf-8")
    return spec


def warm_up(home: Path) -> None:
    """Fetch, materialise and hash the toy locks once, so no configuration pays
    for the cache being filled."""
    from guardrepro.artifacts.fetch import fetch_lock
    from guardrepro.experiments.sweep_ray import pin

    for lock in (ROOT / "locks/toy-guard.toml", ROOT / "locks/toy-bench.toml"):
        fetch_lock(lock, home, progress=False)
    pin(ROOT / "locks/toy-guard.toml", home)


def _one(name: str, spec: Path, out: Path, home: Path, workers: int) -> dict[str, Any]:
    pool = RayOptions(workers=workers, units=1, cpus_per_worker=1)
    started = time.perf_counter()
    with PeakMemory() as memory:
        if name == "local":
            run_sweep(spec, out, home=home, progress=False, say=lambda _: None)
        elif name == "ray-pool":
            run_sweep(spec, out, home=home, progress=False, say=lambda _: None,
                      runs=functools.partial(run_configurations, options=pool))
        else:
            out.mkdir(parents=True, exist_ok=True)
            with ray_session(pool.checked(), out):
                per_run = functools.partial(run_on_ray, options=pool)
                run_sweep(spec, out, home=home, progress=False, say=lambda _: None,
                          runs=lambda *_: per_run)
    return {"name": name, "wall_s": time.perf_counter() - started,
            "memory_bytes": memory.used}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--home", type=Path, default=None)
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="gr-bench-sweep-ray-"))
    home = args.home or work / "home"
    spec = write_spec(work, args.rows)
    warm_up(home)
    results = {name: _one(name, spec, work / name, home, args.workers) for name in CONFIGS}
    base = results["local"]
    print(f"toy sweep (reference, 2 recipes, 1 rule), {args.rows} rows, {args.workers} "
          "workers (machine shared: compare ratios, not seconds)")
    print(f"{'config':12} {'wall s':>8} {'mem MB':>8} {'wall/local':>10} {'mem/local':>9}"
          "  identical")
    rows = []
    for name in CONFIGS:
        r = results[name]
        r["wall_vs_local"] = r["wall_s"] / base["wall_s"]
        r["memory_vs_local"] = r["memory_bytes"] / max(1, base["memory_bytes"])
        r["identical"] = all(_fields(work / name / run) == _fields(work / "local" / run)
                             for run in RUNS)
        rows.append(r)
        print(f"{name:12} {r['wall_s']:8.1f} {r['memory_bytes'] / 1e6:8.0f} "
              f"{r['wall_vs_local']:10.2f} {r['memory_vs_local']:9.2f}  {r['identical']}")
    if args.json is not None:
        args.json.write_text(json.dumps({"configs": rows}, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
