"""Benchmark the toy guard's run profiles against a baseline measured in the same run.

Input: ``--rows N`` (first N toy-cohort rows, default 16), ``--profiles`` (comma
list of ``PROFILES`` names; default all but ``vllm``), ``--vllm`` (add vLLM CPU,
run by ``.venv-vllm/bin/python`` in a child process), ``--home`` (guardrepro
cache), ``--work`` (keep cohort, artifacts, runs; both default to a temp dir), ``--json OUT``.

Output: a table on stdout, a line per profile: rows, generated tokens (all
attempts), wall seconds of ``run_cohort`` (model load included), rows/s and
tokens/s on it, generation-only tokens/s (records' summed ``timings.total_s``),
both tokens/s as ratios to the baseline, peak memory, agreement with the baseline
(identical token ids, strict decisions; ``guardrepro.checks.compare``); ``--json`` too.

Invariants:
- The baseline (``hf-b1``: ``runners/toy-hf.toml`` at batch 1, after an untimed
  one-row warm-up) is measured first in the same invocation and again last
  (``hf-b1-end``: its ratio shows load drift); never against stored numbers.
- MLX artifacts are quantized on the fly from ``locks/toy-guard.toml``; the
  quantization time is reported apart, never inside a profile's wall time.
- Peak memory: records' ``peak_memory_bytes`` if set (hf CPU: process max RSS, monotone;
  MLX: allocator peak), else the process's max RSS. Compare it within a backend only.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from guardrepro.cache import atomic_write_bytes
from guardrepro.checks.compare import compare_runs
from guardrepro.cohort import build_cohort_file
from guardrepro.errors import DependencyMissingError, InferenceError, InputError
from guardrepro.fetch import fetch_lock
from guardrepro.pipeline import run_cohort
from guardrepro.quantize import quantize
from guardrepro.records import read_records
from guardrepro.runners.profile import RunProfile
from guardrepro.runners.registry import runner_class

ROOT = Path(__file__).resolve().parents[1]
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
BASELINE = "hf-b1"
# name -> (runner profile, quantize recipe or None, batch-size override or None)
PROFILES: dict[str, tuple[str, str | None, int | None]] = {
    "hf-b1": ("runners/toy-hf.toml", None, 1),
    "hf": ("runners/toy-hf.toml", None, None),
    "mlx-q8": ("runners/toy-mlx-q8.toml", "quantize/q8-g64.toml", None),
    "mlx-q8-f32": ("runners/toy-mlx-q8.toml", "quantize/q8-g64-f32.toml", None),
    "mlx-bf16": ("runners/toy-mlx-bf16.toml", "quantize/bf16.toml", None),
    "vllm": ("runners/toy-vllm.toml", None, None),
}
DEFAULT_PROFILES = ("hf", "mlx-q8", "mlx-q8-f32", "mlx-bf16")


@dataclass
class Result:
    profile: str
    runner: str
    recipe: str | None
    batch_size: int
    rows: int
    tokens: int
    wall_s: float
    gen_s: float
    quantize_s: float
    peak_memory_bytes: int
    memory_source: str
    run_dir: str
    rows_per_s: float
    tokens_per_s: float  # over wall time
    gen_tokens_per_s: float  # over the records' summed generation time
    ratio: float | None = None  # tokens_per_s / the baseline's
    gen_ratio: float | None = None  # gen_tokens_per_s / the baseline's
    identical_tokens: int | None = None
    strict_agree: int | None = None
    compared: int | None = None


def _profile_list(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in PROFILES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown profile(s) {', '.join(unknown) or '(none given)'}; "
            f"choose from {', '.join(PROFILES)}")
    return names


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--profiles", type=_profile_list, default=list(DEFAULT_PROFILES))
    parser.add_argument("--vllm", action="store_true", help="add the vllm profile")
    for option in ("--json", "--home", "--work"):
        parser.add_argument(option, type=Path)
    for hidden in ("--cohort", "--worker-json"):  # used by the vllm child process
        parser.add_argument(hidden, type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rows < 1:
        parser.error(f"--rows must be >= 1, got {args.rows}")
    names = [*args.profiles, *(["vllm"] if args.vllm else [])]
    if args.worker_json is None:  # the parent always measures the baseline first
        names = [BASELINE, *names]
    args.profiles = list(dict.fromkeys(names))
    return args


def measure(name: str, cohort: Path, work: Path, rows: int, home: Path, label: str = "") -> Result:
    """Quantize if the profile needs it, then time one ``run_cohort`` on ``rows`` rows."""
    label = label or name
    runner, recipe, batch = PROFILES[name]
    profile = RunProfile.load(ROOT / runner)
    quantize_s = 0.0
    if recipe is not None:
        start = time.perf_counter()
        made = quantize(ROOT / recipe, ROOT / "locks/toy-guard.toml",
                        work / "artifacts" / name, home=home)
        quantize_s = time.perf_counter() - start
        profile = profile.with_checkpoint_lock(made.lock_path)
    if batch is not None:
        profile = profile.with_backend_options(batch_size=batch)
    run_dir = work / "runs" / label
    if run_dir.exists():
        raise InputError("run directory exists; benchmarks need a fresh run", file=str(run_dir))
    runner_class(profile.backend)  # import the backend (torch, mlx) outside the timed part
    start = time.perf_counter()
    summary = run_cohort(profile, cohort, run_dir, limit=rows, progress=False, home=home)
    wall_s = time.perf_counter() - start
    records = read_records(run_dir)
    if summary.generated != len(records) or not records:
        raise InferenceError(f"{name}: generated {summary.generated}, recorded {len(records)}")
    peaks = [r.peak_memory_bytes for r in records if r.peak_memory_bytes is not None]
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    tokens = sum(len(a["token_ids"]) for r in records for a in r.attempts)
    gen_s = sum(float(r.timings["total_s"]) for r in records)
    return Result(
        profile=label, runner=runner, recipe=recipe,
        batch_size=int(profile.backend_options.get("batch_size", 1)), rows=len(records),
        tokens=tokens, wall_s=wall_s, gen_s=gen_s, quantize_s=quantize_s,
        peak_memory_bytes=max(peaks) if peaks else maxrss,
        memory_source=f"records ({profile.backend})" if peaks else "process max RSS",
        run_dir=str(run_dir), rows_per_s=len(records) / wall_s, tokens_per_s=tokens / wall_s,
        gen_tokens_per_s=tokens / gen_s if gen_s else 0.0,
    )


def measure_in_vllm_env(args: argparse.Namespace, cohort: Path, work: Path, home: Path) -> Result:
    """Run the ``vllm`` profile with the vLLM venv's Python, in a child process."""
    if not VLLM_PYTHON.is_file():
        raise DependencyMissingError(f"{VLLM_PYTHON} not found (bash scripts/setup_vllm.sh)")
    out = work / "vllm-result.json"
    command = [str(VLLM_PYTHON), str(Path(__file__).resolve()), "--rows", str(args.rows),
               "--profiles", "vllm", "--home", str(home), "--work", str(work),
               "--cohort", str(cohort), "--worker-json", str(out)]
    done = subprocess.run(command, check=False)
    if done.returncode != 0:
        raise InferenceError(f"vllm child exited {done.returncode}: {' '.join(command)}")
    return Result(**json.loads(out.read_text(encoding="utf-8"))[0])


def compare_with_baseline(results: list[Result]) -> None:
    """Fill ratios and agreement counts against ``results[0]`` (the baseline)."""
    base = results[0]
    for r in results:
        r.ratio = r.tokens_per_s / base.tokens_per_s if base.tokens_per_s else None
        r.gen_ratio = r.gen_tokens_per_s / base.gen_tokens_per_s if base.gen_tokens_per_s else None
        summary = compare_runs(base.run_dir, r.run_dir).summary()
        r.identical_tokens = summary["identical_tokens"]["count"]
        r.strict_agree = summary["strict_agreement"]["count"]
        r.compared = summary["rows_in_both"]


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _agree(count: int | None, total: int | None) -> str:
    return "-" if count is None else f"{count}/{total}"


def format_table(results: list[Result]) -> str:
    header = ("profile", "batch", "rows", "tokens", "wall_s", "rows/s", "tok/s", "vs base",
              "gen tok/s", "vs base", "peak MiB", "identical", "strict", "quant_s")
    lines = [header]
    for r in results:
        lines.append((r.profile, str(r.batch_size), str(r.rows), str(r.tokens),
                      f"{r.wall_s:.2f}", f"{r.rows_per_s:.2f}", f"{r.tokens_per_s:.1f}",
                      _ratio(r.ratio), f"{r.gen_tokens_per_s:.1f}", _ratio(r.gen_ratio),
                      f"{r.peak_memory_bytes / 2**20:.0f}", _agree(r.identical_tokens, r.compared),
                      _agree(r.strict_agree, r.compared), f"{r.quantize_s:.2f}"))
    widths = [max(len(row[i]) for row in lines) for i in range(len(header))]
    return "\n".join("  ".join(c.rjust(w) if i else c.ljust(w)
                               for i, (c, w) in enumerate(zip(row, widths, strict=True)))
                     for row in lines)


def write_json(path: Path, data: Any) -> None:
    atomic_write_bytes(path, (json.dumps(data, indent=2) + "\n").encode("utf-8"))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-runners-") as tmp:
        home = (args.home or Path(tmp) / "home").resolve()
        work = (args.work or Path(tmp) / "work").resolve()
        work.mkdir(parents=True, exist_ok=True)
        os.environ["GUARDREPRO_HOME"] = str(home)  # build_cohort_file materializes from it
        cohort = args.cohort or work / "cohort.jsonl"
        if args.cohort is None:
            for lock in ("locks/toy-bench.toml", "locks/toy-guard.toml"):
                fetch_lock(ROOT / lock, home, progress=False)
            build_cohort_file(ROOT / "cohorts/toy-64.toml", None, cohort)
        if args.worker_json is None:  # untimed: first-call costs (lazy imports, kernels)
            measure(BASELINE, cohort, work, 1, home, "warm-up")
        results: list[Result] = []
        for name in args.profiles:
            print(f"[bench] {name} ...", file=sys.stderr, flush=True)
            if name == "vllm" and args.worker_json is None:
                results.append(measure_in_vllm_env(args, cohort, work, home))
            else:
                results.append(measure(name, cohort, work, args.rows, home))
        if args.worker_json is not None:
            write_json(args.worker_json, [asdict(r) for r in results])
            return 0
        if len(results) > 1:  # the baseline again: did the machine's load drift meanwhile?
            results.append(measure(BASELINE, cohort, work, args.rows, home, f"{BASELINE}-end"))
        compare_with_baseline(results)
    print(f"toy guard, first {args.rows} rows of cohorts/toy-64.toml; baseline {BASELINE} "
          "(runners/toy-hf.toml, batch 1) measured in this run")
    print(format_table(results))
    if args.json is not None:
        write_json(args.json, {"rows": args.rows, "baseline": BASELINE,
                               "results": [asdict(r) for r in results]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
