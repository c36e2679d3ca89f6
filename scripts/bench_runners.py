"""Benchmark run configurations of the toy guard against the naive per-row loop, in one invocation.

Input: ``--rows N`` (the first N rows of the toy cohort ``cohorts/toy-64.toml``,
256 rows; default 64), ``--repeats R`` (default 3), ``--configs`` (comma list
of ``CONFIGS`` names; default ``DEFAULT_CONFIGS``; ``naive`` is always
added), ``--home`` / ``--work`` (guardrepro cache, scratch; default a temp
dir), ``--json OUT``.

Output: one table on stdout, a line per configuration: rows, best (min) and
median generation seconds over the repeats, rows/s at the best, the ratio to
the naive loop (naive min / config min) and the median of the paired
per-repeat ratios, and how many rows have exactly the naive loop's output
(token ids and finish reason). ``--json OUT`` writes a list of objects, one
per configuration, with at least ``name``, ``rows``, ``rows_per_s``,
``vs_naive`` and ``identical``.

Invariants:

- The baseline ``naive`` (transformers ``generate`` once per row: batch 1,
  float32, one thread, one process) is measured in the same invocation as
  every configuration; configurations are interleaved within each repeat
  (naive, A, B, ..., naive, A, B, ...), so a load change on the machine hits
  all of them alike; an untimed one-row warm-up runs first.
- Every configuration runs ``guardrepro``'s own run path (``run_with_workers``
  -> ``run_cohort``) into a fresh run directory on the same cohort file (its
  first N rows). The time measured is the generation span: from the moment
  the runner(s) are loaded to the last record written (for several workers:
  first worker ready to last worker done); the whole call (resolve, worker
  processes' start, model loading, generation, merge) is ``wall_s``, and its
  ratio to the naive loop's median wall is ``wall_vs_naive``.
- ``identical`` counts rows whose token ids and finish reason equal the
  naive loop's in every repeat; a configuration that changes any row's
  tokens is reported, never hidden.
- MLX configurations quantize ``locks/toy-guard.toml`` first (untimed).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from guardrepro.artifacts.fetch import fetch_lock
from guardrepro.artifacts.quantize.convert import quantize
from guardrepro.artifacts.store import atomic_write_bytes
from guardrepro.bench.cohort.build import build_cohort_file
from guardrepro.errors import InferenceError
from guardrepro.guards.registry import record_parser
from guardrepro.run import workers
from guardrepro.run.profile import RunProfile
from guardrepro.run.records import read_records
from guardrepro.run.runners.registry import runner_class
from guardrepro.run.workers import run_with_workers

ROOT = Path(__file__).resolve().parents[1]
BASELINE = "naive"


@dataclass(frozen=True)
class Config:
    profile: str
    options: dict[str, Any] = field(default_factory=dict)  # backend_options overrides
    workers: int | None = None  # None: the profile's
    sort_by_length: bool | None = None  # None: the profile's
    recipe: str | None = None  # MLX: quantize recipe
    start: str | None = None  # worker start method; None: the package's (workers.start_method)
    note: str = ""


HF = "runners/toy-hf.toml"
ONE_THREAD = {"threads": 1}
CONFIGS: dict[str, Config] = {
    "naive": Config(HF, {"decode_loop": "generate", "batch_size": 1, **ONE_THREAD}, 1, False,
                    note="generate per row, 1 thread"),
    "generate-b16": Config(HF, {"decode_loop": "generate", "batch_size": 16, **ONE_THREAD}, 1,
                           False, note="generate, left-padded batches of 16"),
    "generate-b16-sorted": Config(HF, {"decode_loop": "generate", "batch_size": 16,
                                       **ONE_THREAD}, 1, True, note="+ sorted by length"),
    "lean-b16": Config(HF, {"decode_loop": "lean", "batch_size": 16, **ONE_THREAD}, 1, True,
                       note="lean decoder, sorted, 1 process"),
    "naive-2threads": Config(HF, {"decode_loop": "generate", "batch_size": 1, "threads": 2}, 1,
                             False, note="generate per row, 2 threads"),
    "toy-hf": Config(HF, note="runners/toy-hf.toml as shipped"),
    "toy-hf-spawn": Config(HF, start="spawn",
                           note="toy-hf, workers spawned (each imports torch itself)"),
    "toy-hf-b16": Config(HF, {"batch_size": 16}, note="toy-hf with batches of 16"),
    "toy-hf-b64": Config(HF, {"batch_size": 64}, note="toy-hf with batches of 64"),
    "mlx-q8": Config("runners/toy-mlx-q8.toml", recipe="quantize/q8-g64.toml",
                     note="MLX Q8 g64, batch 1"),
    "mlx-q8f32": Config("runners/toy-mlx-q8.toml", {"prefix_reuse": False},
                        recipe="quantize/q8-g64-f32.toml",
                        note="MLX Q8 g64 float32 scales, batch 1, full prefill"),
    "mlx-q8f32-reuse": Config("runners/toy-mlx-q8.toml", {"prefix_reuse": True},
                              recipe="quantize/q8-g64-f32.toml",
                              note="the same with prompt-prefix reuse"),
}
DEFAULT_CONFIGS = ("generate-b16", "lean-b16", "toy-hf")


@dataclass
class Sample:
    name: str
    repeat: int
    rows: int
    gen_s: float
    wall_s: float
    run_dir: Path


def _config_list(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in CONFIGS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown configuration(s) {', '.join(unknown) or '(none given)'}; "
            f"choose from {', '.join(CONFIGS)}")
    return names


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--configs", type=_config_list, default=list(DEFAULT_CONFIGS))
    for option in ("--json", "--home", "--work"):
        parser.add_argument(option, type=Path)
    args = parser.parse_args(argv)
    if args.rows < 1:
        parser.error(f"--rows must be >= 1, got {args.rows}")
    if args.repeats < 1:
        parser.error(f"--repeats must be >= 1, got {args.repeats}")
    args.configs = list(dict.fromkeys([BASELINE, *args.configs]))
    return args


def profile_for(name: str, work: Path, home: Path) -> RunProfile:
    """The run profile of configuration ``name`` (MLX: quantized on first use)."""
    config = CONFIGS[name]
    profile = RunProfile.load(ROOT / config.profile)
    if config.recipe is not None:
        stem = Path(config.recipe).stem  # one artifact per recipe
        lock = work / "artifacts" / f"{stem}.lock.toml"
        if not lock.exists():
            made = quantize(ROOT / config.recipe, ROOT / "locks/toy-guard.toml",
                            work / "artifacts" / stem, home=home)
            lock = made.lock_path
        profile = profile.with_checkpoint_lock(lock)
    if config.options:
        profile = profile.with_backend_options(**config.options)
    if config.workers is not None:
        profile = profile.with_workers(config.workers)
    if config.sort_by_length is not None:
        profile = dataclasses.replace(profile, sort_by_length=config.sort_by_length)
    return profile


def measure(name: str, profile: RunProfile, cohort: Path, run_dir: Path, home: Path,
            repeat: int) -> Sample:
    runner_class(profile.backend)  # import the backend outside the timed part
    method = CONFIGS[name].start if name in CONFIGS else None
    chosen = workers.start_method
    if method is not None:
        workers.start_method = lambda backend: method  # type: ignore[assignment]
    try:
        start = time.perf_counter()
        summary = run_with_workers(profile, cohort, run_dir, workers=profile.workers,
                                   progress=False, home=home)
        wall_s = time.perf_counter() - start
    finally:
        workers.start_method = chosen  # type: ignore[assignment]
    if summary.remaining or not summary.generated:
        raise InferenceError(f"{name}: {summary.remaining} rows left, {summary.generated} made")
    gen_s = summary.generation_finished - summary.generation_started
    return Sample(name, repeat, summary.generated, gen_s, wall_s, run_dir)


def outputs(run_dir: Path) -> dict[str, tuple[tuple[int, ...], str | None]]:
    return {r.row_id: (tuple(r.output_token_ids), r.finish_reason)
            for r in read_records(run_dir, parsers=record_parser)}


def summarise(samples: list[Sample]) -> list[dict[str, Any]]:
    """One object per configuration: times, rates, ratios, identical rows."""
    by_name: dict[str, list[Sample]] = {}
    for s in samples:
        by_name.setdefault(s.name, []).append(s)
    base = by_name[BASELINE]
    reference = outputs(base[0].run_dir)
    base_min = min(s.gen_s for s in base)
    base_wall = statistics.median(s.wall_s for s in base)
    out = []
    for name, runs in by_name.items():
        times = [s.gen_s for s in runs]
        paired = [b.gen_s / s.gen_s for b, s in zip(base, runs, strict=True) if s.gen_s > 0]
        identical = min(
            sum(1 for row, value in outputs(s.run_dir).items() if reference.get(row) == value)
            for s in runs)
        rows = runs[0].rows
        out.append({
            "name": name, "note": CONFIGS[name].note, "rows": rows, "repeats": len(runs),
            "min_s": min(times), "median_s": statistics.median(times),
            "rows_per_s": rows / min(times), "rows_per_s_median": rows / statistics.median(times),
            "vs_naive": base_min / min(times),
            "vs_naive_median_paired": statistics.median(paired) if paired else None,
            "identical": identical,
            "wall_s_median": statistics.median(s.wall_s for s in runs),
            "wall_vs_naive": base_wall / statistics.median(s.wall_s for s in runs),
        })
    return out


def format_table(results: list[dict[str, Any]]) -> str:
    header = ("config", "rows", "min_s", "median_s", "rows/s", "vs naive", "paired med",
              "identical", "wall_s", "wall vs naive", "what")
    lines = [header]
    for r in results:
        paired = r["vs_naive_median_paired"]
        lines.append((r["name"], str(r["rows"]), f"{r['min_s']:.2f}", f"{r['median_s']:.2f}",
                      f"{r['rows_per_s']:.2f}", f"{r['vs_naive']:.2f}x",
                      "-" if paired is None else f"{paired:.2f}x",
                      f"{r['identical']}/{r['rows']}", f"{r['wall_s_median']:.2f}",
                      f"{r['wall_vs_naive']:.2f}x", r["note"]))
    widths = [max(len(row[i]) for row in lines) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) if i in (0, len(header) - 1) else c.rjust(w)
                               for i, (c, w) in enumerate(zip(row, widths, strict=True))).rstrip()
                     for row in lines)


def toy_cohort(home: Path, work: Path) -> Path:
    """The full toy cohort (256 rows) under ``work``, its locks fetched into ``home``
    (made the process's ``GUARDREPRO_HOME``: ``build_cohort_file`` materializes from it)."""
    os.environ["GUARDREPRO_HOME"] = str(home)
    for lock in ("locks/toy-bench.toml", "locks/toy-guard.toml"):
        fetch_lock(ROOT / lock, home, progress=False)
    full = work / "cohort-full.jsonl"
    if not full.exists():
        build_cohort_file(ROOT / "cohorts/toy-64.toml", None, full)
    return full


def first_rows(cohort: Path, rows: int, out: Path) -> Path:
    lines = cohort.read_bytes().splitlines(keepends=True)
    if rows > len(lines):
        raise SystemExit(f"--rows {rows}: the cohort has {len(lines)} rows")
    atomic_write_bytes(out, b"".join(lines[:rows]))
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-runners-") as tmp:
        home = (args.home or Path(tmp) / "home").resolve()
        work = (args.work or Path(tmp) / "work").resolve()
        work.mkdir(parents=True, exist_ok=True)
        full = toy_cohort(home, work)
        cohort = first_rows(full, args.rows, work / f"cohort-{args.rows}.jsonl")
        profiles = {name: profile_for(name, work, home) for name in args.configs}
        runs = work / f"runs-{time.strftime('%Y%m%dT%H%M%S')}"
        warm = first_rows(full, 1, work / "cohort-1.jsonl")
        measure("warm-up", profiles[BASELINE], warm, runs / "warm-up", home, 0)
        samples = []
        for repeat in range(args.repeats):
            for name in args.configs:
                print(f"[bench] repeat {repeat + 1}/{args.repeats} {name} ...", file=sys.stderr,
                      flush=True)
                samples.append(measure(name, profiles[name], cohort,
                                       runs / f"{name}-{repeat}", home, repeat))
        results = summarise(samples)
    print(f"toy guard, first {args.rows} rows of cohorts/toy-64.toml, {args.repeats} interleaved "
          f"repeats, {os.cpu_count()} CPUs; baseline {BASELINE} measured in this run; "
          "times = generation span (model loaded -> last record); wall = the whole "
          "run_with_workers call (resolve, worker start, model load, generation, merge), "
          "median; wall vs naive = naive's median wall / the configuration's")
    print(format_table(results))
    if args.json is not None:
        atomic_write_bytes(args.json, (json.dumps(results, indent=2) + "\n").encode("utf-8"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
