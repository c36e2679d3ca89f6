"""Overhead of ``run --engine ray`` against ``--engine local`` on the toy cohort, in one invocation.

Input: ``--rows N`` (the first N rows of the toy cohort ``cohorts/toy-64.toml``;
default 32), ``--workers W`` (default 2), ``--units U`` (a second Ray
configuration with U units; default 8), ``--repeats R`` (default 1),
``--home`` / ``--work`` (cache, scratch; default a temp dir), ``--json OUT``.

Output: one table on stdout, a line per configuration: wall seconds of the
whole run (best of the repeats; Ray start-up and shutdown included for the
Ray configurations), generation span, peak resident memory of the process
tree (driver, workers or actors, and Ray's own processes), the ratio of wall
time and memory to ``local``, and whether its records equal ``local``'s on
every field but the timings (``yes``, or each field that differs, on how
many rows, by at most how much). Then the cost of a bare ``ray.init`` and
``ray.shutdown`` (the same settings the engine uses) and the cost per extra
unit, ``(wall(ray, U units) - wall(ray, W units)) / (U - W)``.

Invariants:

- Every configuration runs the project's own run path (``run_with_workers``
  or ``engine_ray.run_on_ray``, each starting its own local Ray) on the same
  rows with the same provenance (``runners/toy-hf.toml``, threads 1 per
  worker), into a fresh run directory; configurations are interleaved within
  each repeat, so a change of load on the machine hits all alike.
- Memory is sampled every 0.1 s: the summed RSS of this process and all its
  descendants (``/proc``), minus this process's RSS before the run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from guardrepro.guards.registry import record_parser
from guardrepro.run.engine_ray import RayOptions, ray_session, run_on_ray
from guardrepro.run.profile import RunProfile
from guardrepro.run.ray_pool import TIMING_FIELDS
from guardrepro.run.workers import run_with_workers
from guardrepro.rundir.records import read_records
from scripts.bench_runners import first_rows, toy_cohort

ROOT = Path(__file__).resolve().parents[1]
PAGE = os.sysconf("SC_PAGE_SIZE")


def _tree_rss(root: int) -> int:
    """Summed RSS (bytes) of ``root`` and its descendants."""
    parents: dict[int, int] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            statm = Path(f"/proc/{entry}/statm").read_text().split()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        parents[int(entry)] = int(fields[1])
        rss[int(entry)] = int(statm[1]) * PAGE
    keep = {root}
    changed = True
    while changed:
        changed = False
        for pid, parent in parents.items():
            if parent in keep and pid not in keep:
                keep.add(pid)
                changed = True
    return sum(rss.get(pid, 0) for pid in keep)


class PeakMemory:
    """Peak summed RSS of this process tree while the block runs."""

    def __init__(self) -> None:
        self.base = _tree_rss(os.getpid())
        self.peak = self.base
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(0.1):
            self.peak = max(self.peak, _tree_rss(os.getpid()))

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def used(self) -> int:
        return self.peak - self.base


def _fields(run_dir: Path) -> list[dict[str, Any]]:
    out = []
    for record in read_records(run_dir, parsers=record_parser):
        data = record.to_dict()
        for name in TIMING_FIELDS:
            data.pop(name)
        out.append(data)
    return out


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    """A record's fields as dotted paths (list items by index)."""
    if isinstance(value, dict):
        items: Any = value.items()
    elif isinstance(value, list):
        items = ((str(i), v) for i, v in enumerate(value))
    else:
        return {prefix: value}
    out: dict[str, Any] = {}
    for key, sub in items:
        out.update(_flat(sub, f"{prefix}.{key}" if prefix else str(key)))
    return out


def identity(got: list[dict[str, Any]], want: list[dict[str, Any]]) -> str:
    """``yes`` when every record equals ``want``'s on every field but the
    timings; else each differing field with its row count (and, for numbers,
    the largest absolute difference), e.g. ``no: attempts.0.margin 17/32
    (max 4.8e-06)``."""
    if [r["row_id"] for r in got] != [r["row_id"] for r in want]:
        return "no: other rows"
    rows: dict[str, int] = {}
    worst: dict[str, float] = {}
    for a, b in zip(got, want, strict=True):
        fa, fb = _flat(a), _flat(b)
        for key in sorted(set(fa) | set(fb)):
            x, y = fa.get(key), fb.get(key)
            if x == y:
                continue
            rows[key] = rows.get(key, 0) + 1
            if isinstance(x, float) and isinstance(y, float):
                worst[key] = max(worst.get(key, 0.0), abs(x - y))
    if not rows:
        return "yes"
    parts = [f"{key} {n}/{len(want)}" + (f" (max {worst[key]:.1e})" if key in worst else "")
             for key, n in rows.items()]
    return "no: " + ", ".join(parts)


def _one(name: str, profile: RunProfile, cohort: Path, out: Path, home: Path,
         workers: int, units: int) -> dict[str, Any]:
    started = time.perf_counter()
    with PeakMemory() as memory:
        if name == "local":
            summary = run_with_workers(profile.with_backend_options(threads=1), cohort, out,
                                       workers=workers, progress=False, home=home)
        else:
            summary = run_on_ray(profile, cohort, out, progress=False, home=home,
                                 options=RayOptions(workers=workers, units=units,
                                                    cpus_per_worker=1))
    return {"name": name, "wall_s": time.perf_counter() - started,
            "generation_s": summary.generation_finished - summary.generation_started,
            "memory_bytes": memory.used}


def _ray_start_stop(work: Path, workers: int) -> tuple[float, float]:
    """Seconds of a bare local Ray start and shutdown (the engine's settings)."""
    import ray

    options = RayOptions(workers=workers, cpus_per_worker=1).checked()
    started = time.perf_counter()
    session = ray_session(options, work / "bare")
    session.__enter__()
    up = time.perf_counter() - started
    assert ray.is_initialized()
    started = time.perf_counter()
    session.__exit__(None, None, None)
    return up, time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rows", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--units", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--home", type=Path, default=None)
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="gr-bench-ray-"))
    home = args.home or work / "home"
    cohort = first_rows(toy_cohort(home, work), args.rows, work / f"cohort-{args.rows}.jsonl")
    profile = RunProfile.load(ROOT / "runners/toy-hf.toml")
    configs = [("local", args.workers), (f"ray-u{args.workers}", args.workers),
               (f"ray-u{args.units}", args.units)]
    best: dict[str, dict[str, Any]] = {}
    dirs: dict[str, Path] = {}
    for repeat in range(args.repeats):
        for name, units in configs:
            out = work / f"r{repeat}-{name}" / "run"
            result = _one(name if name == "local" else "ray", profile, cohort, out, home,
                          args.workers, units)
            result["name"] = name
            dirs.setdefault(name, out)
            if name not in best or result["wall_s"] < best[name]["wall_s"]:
                best[name] = result
    up, down = _ray_start_stop(work, args.workers)
    want = _fields(dirs["local"])
    base = best["local"]
    print(f"toy guard, first {args.rows} rows, {args.workers} workers, best of "
          f"{args.repeats} (machine shared: compare ratios, not seconds)")
    print(f"{'config':10} {'wall s':>8} {'gen s':>8} {'mem MB':>8} {'wall/local':>10} "
          f"{'mem/local':>9}  identical")
    rows = []
    for name, _ in configs:
        r = best[name]
        r["wall_vs_local"] = r["wall_s"] / base["wall_s"]
        r["memory_vs_local"] = r["memory_bytes"] / max(1, base["memory_bytes"])
        r["identical"] = identity(_fields(dirs[name]), want)
        rows.append(r)
        print(f"{name:10} {r['wall_s']:8.1f} {r['generation_s']:8.1f} "
              f"{r['memory_bytes'] / 1e6:8.0f} {r['wall_vs_local']:10.2f} "
              f"{r['memory_vs_local']:9.2f}  {r['identical']}")
    per_unit = (best[f"ray-u{args.units}"]["wall_s"] - best[f"ray-u{args.workers}"]["wall_s"]) \
        / max(1, args.units - args.workers)
    print(f"ray.init {up:.2f} s, ray.shutdown {down:.2f} s, per extra unit {per_unit:+.2f} s "
          f"(ray-u{args.units} vs ray-u{args.workers})")
    if args.json is not None:
        args.json.write_text(json.dumps({"configs": rows, "ray_init_s": up,
                                         "ray_shutdown_s": down, "per_unit_s": per_unit},
                                        indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
