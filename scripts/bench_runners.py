"""Benchmark run configurations of the toy guard against the naive loop, as a user runs them.

Input: ``--rows N`` (the first N rows of the toy cohort ``cohorts/toy-64.toml``,
256 rows; default 64), ``--repeats R`` (rounds; default 3), ``--configs``
(comma list of ``CONFIGS`` names; default ``DEFAULT_CONFIGS``; ``naive`` is
always added), ``--in-process`` (the older measure, see below), ``--home`` /
``--work`` (guardrepro cache, scratch; default a temp dir), ``--json OUT``.

Output: one table on stdout, a line per configuration: rows, median
start-up, generation and wall seconds, each configuration's ratios to the
naive loop (generation and wall: the median of the per-round paired ratios,
and the worst round's), rows identical to the naive loop, the machine's load
average (median of the values read before each of its runs), then one line
per round with every configuration's paired ratios. ``--json OUT`` writes a
list of objects, one per configuration, with at least ``name``, ``rows``,
``startup_s``, ``gen_s``, ``wall_s``, ``gen_vs_naive``, ``wall_vs_naive``,
``rounds`` (the paired ratios per round), ``identical`` and ``load``.

Invariants:

- Every configuration is a fresh ``python -m guardrepro run --profile P
  --cohort C --out DIR --no-progress`` process, as a user starts it, into a
  fresh run directory on the same cohort file; ``P`` is the configuration's
  profile written to the work directory (the shipped one with its
  ``[backend_options]``, ``workers`` and ``sort_by_length`` overrides, its
  relative paths made absolute). ``wall`` = process start to exit;
  ``generation`` = the run's generation span (first runner ready to last
  record, read from the ``generation span`` line of its ``run.log``);
  ``start-up`` = process start to the start of that span; the rest of the
  wall (merge, interpreter exit) is ``wall - start-up - generation``.
- The baseline ``naive`` is the shipped profile with ``decode_loop =
  "generate"``, ``batch_size = 1``, ``workers = 1`` (its threads as the
  profile sets them): transformers' ``generate`` once per row. It runs in
  every round, and configurations are interleaved within each round (naive,
  A, B, ..., naive, A, B, ...), so a load change hits all of them alike;
  ratios are per round (naive's time in that round / the configuration's)
  and summarised by their median. An untimed one-row run warms the disk
  cache first.
- ``identical`` counts rows whose token ids and finish reason equal the
  naive loop's (its first round) in every round; a configuration that
  changes any row's tokens is reported, never hidden.
- ``--in-process``: every configuration runs ``run_with_workers`` inside
  this one process (the backend imported beforehand, outside the timed
  part), as this script did before: it leaves out interpreter start and
  imports, and a configuration run after another inherits its imports, so
  it measures generation and model load only, not what a user waits for.
- MLX configurations quantize ``locks/toy-guard.toml`` first (untimed).
- ``--label-cost`` measures instead what recording P(unsafe) costs
  (``scripts/label_cost.py``): generation of the same rows with and without
  the decision labels' logits, interleaved, as a ratio to the generation
  without (``--mlx-artifact DIR`` adds MLX on 4 rows).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

from guardrepro.artifacts.fetch import fetch_lock
from guardrepro.artifacts.quantize.convert import quantize
from guardrepro.artifacts.store import atomic_write_bytes
from guardrepro.bench.cohort.build import build_cohort_file
from guardrepro.errors import InferenceError
from guardrepro.guards.registry import record_parser
from guardrepro.run import workers
from guardrepro.run.profile import RunProfile
from guardrepro.run.runners.registry import runner_class
from guardrepro.run.workers import run_with_workers
from guardrepro.rundir.records import read_records

ROOT = Path(__file__).resolve().parents[1]
BASELINE = "naive"


@dataclass(frozen=True)
class Config:
    profile: str
    options: dict[str, Any] = field(default_factory=dict)  # backend_options overrides
    workers: int | None = None  # None: the profile's
    sort_by_length: bool | None = None  # None: the profile's
    recipe: str | None = None  # MLX: quantize recipe
    start: str | None = None  # worker start method (--in-process only); None: the package's
    note: str = ""


HF = "runners/toy-hf.toml"
NAIVE = {"decode_loop": "generate", "batch_size": 1}
CONFIGS: dict[str, Config] = {
    "naive": Config(HF, NAIVE, 1, False, note="generate per row (toy-hf: generate, batch 1, "
                    "1 worker)"),
    "naive-1thread": Config(HF, {**NAIVE, "threads": 1}, 1, False,
                            note="generate per row, 1 thread"),
    "naive-2threads": Config(HF, {**NAIVE, "threads": 2}, 1, False,
                             note="generate per row, 2 threads"),
    "generate-b16": Config(HF, {"decode_loop": "generate", "batch_size": 16}, 1, False,
                           note="generate, left-padded batches of 16, 1 worker"),
    "generate-b16-sorted": Config(HF, {"decode_loop": "generate", "batch_size": 16}, 1, True,
                                  note="+ sorted by length"),
    "lean-b16": Config(HF, {"decode_loop": "lean", "batch_size": 16}, 1, True,
                       note="lean decoder, sorted, batches of 16, 1 worker"),
    "toy-hf": Config(HF, note="runners/toy-hf.toml as shipped (2 workers)"),
    "toy-hf-w1": Config(HF, workers=1, note="toy-hf --workers 1"),
    "toy-hf-w1-1thread": Config(HF, {"threads": 1}, 1, note="toy-hf --workers 1, 1 thread"),
    "toy-hf-w1-2threads": Config(HF, {"threads": 2}, 1, note="toy-hf --workers 1, 2 threads"),
    "toy-hf-spawn": Config(HF, start="spawn",
                           note="toy-hf, workers spawned (--in-process only)"),
    "toy-hf-b16": Config(HF, {"batch_size": 16}, note="toy-hf with batches of 16"),
    "mlx-q8": Config("runners/toy-mlx-q8.toml", recipe="quantize/q8-g64.toml",
                     note="MLX Q8 g64, batch 1"),
    "mlx-q8f32": Config("runners/toy-mlx-q8.toml", {"prefix_reuse": False},
                        recipe="quantize/q8-g64-f32.toml",
                        note="MLX Q8 g64 float32 scales, batch 1, full prefill"),
    "mlx-q8f32-reuse": Config("runners/toy-mlx-q8.toml", {"prefix_reuse": True},
                              recipe="quantize/q8-g64-f32.toml",
                              note="the same with prompt-prefix reuse"),
}
DEFAULT_CONFIGS = ("generate-b16", "toy-hf-w1", "toy-hf")


@dataclass
class Sample:
    name: str
    repeat: int
    rows: int
    gen_s: float
    wall_s: float
    run_dir: Path
    startup_s: float = 0.0
    load: float = 0.0  # 1-minute load average before the run


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
    parser.add_argument("--in-process", action="store_true")
    parser.add_argument("--label-cost", action="store_true")
    for option in ("--json", "--home", "--work", "--mlx-artifact"):
        parser.add_argument(option, type=Path)
    args = parser.parse_args(argv)
    if args.rows < 1:
        parser.error(f"--rows must be >= 1, got {args.rows}")
    if args.repeats < 1:
        parser.error(f"--repeats must be >= 1, got {args.repeats}")
    args.configs = list(dict.fromkeys([BASELINE, *args.configs]))
    spawned = [n for n in args.configs if CONFIGS[n].start is not None]
    if spawned and not args.in_process:
        parser.error(f"{', '.join(spawned)}: a start method is chosen only with --in-process")
    return args


def _lock_for(config: Config, work: Path, home: Path) -> Path | None:
    """MLX: the quantized artifact's lock (made on first use); else None."""
    if config.recipe is None:
        return None
    stem = Path(config.recipe).stem  # one artifact per recipe
    lock = work / "artifacts" / f"{stem}.lock.toml"
    if not lock.exists():
        lock = quantize(ROOT / config.recipe, ROOT / "locks/toy-guard.toml",
                        work / "artifacts" / stem, home=home).lock_path
    return lock


def profile_for(name: str, work: Path, home: Path) -> RunProfile:
    """The run profile of configuration ``name`` (MLX: quantized on first use)."""
    config = CONFIGS[name]
    profile = RunProfile.load(ROOT / config.profile)
    lock = _lock_for(config, work, home)
    if lock is not None:
        profile = profile.with_checkpoint_lock(lock)
    if config.options:
        profile = profile.with_backend_options(**config.options)
    if config.workers is not None:
        profile = profile.with_workers(config.workers)
    if config.sort_by_length is not None:
        profile = dataclasses.replace(profile, sort_by_length=config.sort_by_length)
    return profile


def profile_file(name: str, work: Path, home: Path) -> Path:
    """Configuration ``name`` as a profile file under ``work`` (for a fresh process):
    the shipped profile's TOML with the overrides, relative paths made absolute."""
    config = CONFIGS[name]
    source = ROOT / config.profile
    data = tomllib.loads(source.read_text(encoding="utf-8"))
    for table, key in (("guard", "template_lock"), ("guard", "template_path"),
                       ("checkpoint", "lock"), ("checkpoint", "dir")):
        value = data.get(table, {}).get(key)
        if isinstance(value, str):
            data[table][key] = str((source.parent / value).resolve())
    lock = _lock_for(config, work, home)
    if lock is not None:
        data["checkpoint"] = {"lock": str(lock)}
    data["backend_options"] = {**data.get("backend_options", {}), **config.options}
    if config.workers is not None:
        data["workers"] = config.workers
    if config.sort_by_length is not None:
        data["sort_by_length"] = config.sort_by_length
    out = work / "profiles" / f"{name}.toml"
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(out, tomli_w.dumps(data).encode("utf-8"))
    return out


SPAN = re.compile(r"generation span [0-9.]+ s \(epoch ([0-9.]+) to ([0-9.]+)\)")


def run_fresh(name: str, profile: Path, cohort: Path, run_dir: Path, home: Path,
              repeat: int) -> Sample:
    """One fresh ``guardrepro run`` process: start-up, generation and wall seconds."""
    load = os.getloadavg()[0]
    env = {**os.environ, "GUARDREPRO_HOME": str(home),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-m", "guardrepro", "run", "--profile", str(profile),
               "--cohort", str(cohort), "--out", str(run_dir), "--no-progress"]
    start = time.time()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    wall_s = time.time() - start
    if done.returncode != 0:
        raise InferenceError(f"{name}: guardrepro run exited {done.returncode}: "
                             f"{done.stderr.strip()[-2000:]}")
    spans = SPAN.findall((run_dir / "run.log").read_text(encoding="utf-8"))
    if not spans:
        raise InferenceError(f"{name}: no generation span in {run_dir / 'run.log'}")
    began, ended = (float(v) for v in spans[-1])
    rows = len(read_records(run_dir, parsers=record_parser))
    return Sample(name, repeat, rows, ended - began, wall_s, run_dir, began - start, load)


def measure(name: str, profile: RunProfile, cohort: Path, run_dir: Path, home: Path,
            repeat: int) -> Sample:
    """``--in-process``: ``run_with_workers`` in this process (see the module docstring)."""
    runner_class(profile.descriptor)  # import the backend outside the timed part
    method = CONFIGS[name].start if name in CONFIGS else None
    chosen = workers.start_method
    if method is not None:
        workers.start_method = lambda backend, checkpoint_dir=None, options=None: method  # type: ignore
    load = os.getloadavg()[0]
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
    return Sample(name, repeat, summary.generated, gen_s, wall_s, run_dir, 0.0, load)


def outputs(run_dir: Path) -> dict[str, tuple[tuple[int, ...], str | None]]:
    return {r.row_id: (tuple(r.output_token_ids), r.finish_reason)
            for r in read_records(run_dir, parsers=record_parser)}


def summarise(samples: list[Sample]) -> list[dict[str, Any]]:
    """One object per configuration: median times, per-round paired ratios to the
    naive loop (median and worst), identical rows, load."""
    by_name: dict[str, list[Sample]] = {}
    for s in samples:
        by_name.setdefault(s.name, []).append(s)
    base = by_name[BASELINE]
    reference = outputs(base[0].run_dir)
    out = []
    for name, runs in by_name.items():
        gen = [b.gen_s / s.gen_s for b, s in zip(base, runs, strict=True) if s.gen_s > 0]
        wall = [b.wall_s / s.wall_s for b, s in zip(base, runs, strict=True)]
        identical = min(
            sum(1 for row, value in outputs(s.run_dir).items() if reference.get(row) == value)
            for s in runs)
        out.append({
            "name": name, "note": CONFIGS[name].note, "rows": runs[0].rows,
            "repeats": len(runs),
            "startup_s": statistics.median(s.startup_s for s in runs),
            "gen_s": statistics.median(s.gen_s for s in runs),
            "gen_min_s": min(s.gen_s for s in runs),
            "wall_s": statistics.median(s.wall_s for s in runs),
            "gen_vs_naive": statistics.median(gen) if gen else None,
            "gen_vs_naive_worst": min(gen) if gen else None,
            "wall_vs_naive": statistics.median(wall),
            "wall_vs_naive_worst": min(wall),
            "rounds": [{"gen": g, "wall": w} for g, w in zip(gen, wall, strict=False)],
            "identical": identical,
            "load": statistics.median(s.load for s in runs),
        })
    return out


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def format_table(results: list[dict[str, Any]]) -> str:
    header = ("config", "rows", "start-up s", "gen s", "wall s", "gen vs naive", "worst",
              "wall vs naive", "worst", "identical", "load", "what")
    lines = [header]
    for r in results:
        lines.append((r["name"], str(r["rows"]), f"{r['startup_s']:.2f}", f"{r['gen_s']:.2f}",
                      f"{r['wall_s']:.2f}", _ratio(r["gen_vs_naive"]),
                      _ratio(r["gen_vs_naive_worst"]), _ratio(r["wall_vs_naive"]),
                      _ratio(r["wall_vs_naive_worst"]), f"{r['identical']}/{r['rows']}",
                      f"{r['load']:.1f}", r["note"]))
    widths = [max(len(row[i]) for row in lines) for i in range(len(header))]
    table = ["  ".join(c.ljust(w) if i in (0, len(header) - 1) else c.rjust(w)
                       for i, (c, w) in enumerate(zip(row, widths, strict=True))).rstrip()
             for row in lines]
    for k in range(max(len(r["rounds"]) for r in results)):
        table.append(f"round {k + 1} (gen / wall vs naive): " + ", ".join(
            f"{r['name']} {r['rounds'][k]['gen']:.2f}x / {r['rounds'][k]['wall']:.2f}x"
            for r in results[1:] if k < len(r["rounds"])))
    return "\n".join(table)


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


def rounds(args: argparse.Namespace, home: Path, work: Path) -> list[Sample]:
    """The warm-up, then ``args.repeats`` interleaved rounds of every configuration."""
    full = toy_cohort(home, work)
    cohort = first_rows(full, args.rows, work / f"cohort-{args.rows}.jsonl")
    warm = first_rows(full, 1, work / "cohort-1.jsonl")
    runs = work / f"runs-{time.strftime('%Y%m%dT%H%M%S')}"
    if args.in_process:
        profiles = {name: profile_for(name, work, home) for name in args.configs}
        measure("warm-up", profiles[BASELINE], warm, runs / "warm-up", home, 0)
    else:
        files = {name: profile_file(name, work, home) for name in args.configs}
        run_fresh("warm-up", files[BASELINE], warm, runs / "warm-up", home, 0)
    samples = []
    for repeat in range(args.repeats):
        for name in args.configs:
            print(f"[bench] round {repeat + 1}/{args.repeats} {name} ...", file=sys.stderr,
                  flush=True)
            run_dir = runs / f"{name}-{repeat}"
            samples.append(
                measure(name, profiles[name], cohort, run_dir, home, repeat) if args.in_process
                else run_fresh(name, files[name], cohort, run_dir, home, repeat))
    return samples


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-runners-") as tmp:
        home = (args.home or Path(tmp) / "home").resolve()
        work = (args.work or Path(tmp) / "work").resolve()
        work.mkdir(parents=True, exist_ok=True)
        if args.label_cost:
            return _label_cost(args, home, work)
        results = summarise(rounds(args, home, work))
    how = ("in this one process (run_with_workers; start-up not measured: imports done "
           "beforehand)" if args.in_process else "each a fresh `guardrepro run` process")
    print(f"toy guard, first {args.rows} rows of cohorts/toy-64.toml, {args.repeats} "
          f"interleaved rounds, {os.cpu_count()} CPUs, {how}; times are medians; ratios are "
          "the median (and worst) of the per-round paired ratios naive / configuration; "
          "load = 1-minute load average before the runs (median)")
    print(format_table(results))
    if args.json is not None:
        atomic_write_bytes(args.json, (json.dumps(results, indent=2) + "\n").encode("utf-8"))
    return 0


def _label_cost(args: argparse.Namespace, home: Path, work: Path) -> int:
    from scripts.label_cost import format_cost, label_cost

    cohort = first_rows(toy_cohort(home, work), args.rows, work / f"cohort-{args.rows}.jsonl")
    results = label_cost(cohort, args.rows, args.repeats, mlx_artifact=args.mlx_artifact)
    print(format_cost(results))
    if args.json is not None:
        atomic_write_bytes(args.json, (json.dumps(results, indent=2) + "\n").encode("utf-8"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
