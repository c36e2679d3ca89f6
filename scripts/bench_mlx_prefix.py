"""Benchmark the MLX runner's prompt-prefix reuse against full prefill on the toy guard.

Input: ``--rows N`` (the first N rows of the toy cohort ``cohorts/toy-64.toml``:
4 variants per base sample, original first; default 32), ``--repeats R``
(default 3), ``--home`` / ``--work`` (guardrepro cache, scratch; default a
temp dir), ``--json OUT``.

Output: how much of the prompts the reuse rule can share (prompt tokens
reusable under the batch-1 rule of ``runners.mlx_batch``: the longest prefix
of at least ``MIN_PREFIX`` tokens shared with one of the 4 previous prompts,
all but the last token at most; computed here from the prompt ids, not by the
runner), then one line per configuration: generation seconds (best and
median), summed per-row prefill seconds (median), the ratio to full prefill,
and rows whose token ids and finish reason equal the full-prefill run's.

Configurations, interleaved within each repeat (``scripts/bench_runners.py``'s
run path, one process, the ``q8-g64-f32`` artifact quantized untimed first):
``full`` (``prefix_reuse = false``), ``reuse`` (the default: the first 4
reusing rows are also prefilled from scratch and checked) and
``reuse-checked`` (the runner told its check is done: what every later row of
a long run costs; the same tokens are required).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from guardrepro.artifacts.store import atomic_write_bytes
from guardrepro.guards.registry import record_parser
from guardrepro.run.pipeline import prepare_rows
from guardrepro.run.resolve import resolve_profile
from guardrepro.run.runners import mlx_runner
from guardrepro.run.runners.greedy import PrefixStore, common_prefix
from guardrepro.rundir.cohort import read_cohort
from guardrepro.rundir.records import read_records
from scripts.bench_runners import first_rows, measure, outputs, profile_for, toy_cohort

CONFIGS = {"full": "mlx-q8f32", "reuse": "mlx-q8f32-reuse", "reuse-checked": "mlx-q8f32-reuse"}


def shared_tokens(prompts: list[tuple[int, ...]]) -> dict[str, int]:
    """Prompt tokens in all, reusable under the batch-1 rule (the runner's
    prefix store over the last ``PREFIX_STORE`` prompts), and shared by all."""
    store: PrefixStore[None] = PrefixStore(mlx_runner.PREFIX_STORE)
    reusable = 0
    for ids in prompts:
        found = store.find(ids)
        reusable += 0 if found is None else found.length
        store.add(ids, None)
    head = min(common_prefix(prompts[0], p) for p in prompts)
    return {"prompt_tokens": sum(len(p) for p in prompts), "reusable_tokens": reusable,
            "common_head_tokens": head}


def run(args: argparse.Namespace, home: Path, work: Path) -> dict[str, Any]:
    full = toy_cohort(home, work)
    cohort = first_rows(full, args.rows, work / f"cohort-{args.rows}.jsonl")
    profiles = {name: profile_for(config, work, home) for name, config in CONFIGS.items()}
    resolved = resolve_profile(profiles["full"], home=home)
    prepared = prepare_rows(resolved.guard, resolved.tokenizer, read_cohort(cohort),
                            profiles["full"].decoding.max_new_tokens)
    shares = shared_tokens([p.token_ids for p in prepared])
    runs = work / f"runs-{time.strftime('%Y%m%dT%H%M%S')}"
    measure("warm-up", profiles["full"], first_rows(full, 1, work / "cohort-1.jsonl"),
            runs / "warm-up", home, 0)
    samples: dict[str, list[Any]] = {name: [] for name in CONFIGS}
    checks = mlx_runner.REUSE_CHECK_ROWS
    for repeat in range(args.repeats):
        for name in CONFIGS:
            print(f"[bench] repeat {repeat + 1}/{args.repeats} {name} ...", file=sys.stderr,
                  flush=True)
            mlx_runner.REUSE_CHECK_ROWS = 0 if name == "reuse-checked" else checks
            samples[name].append(measure(name, profiles[name], cohort,
                                         runs / f"{name}-{repeat}", home, repeat))
    mlx_runner.REUSE_CHECK_ROWS = checks
    reference = outputs(samples["full"][0].run_dir)
    results = []
    for name, runs_of in samples.items():
        times = [s.gen_s for s in runs_of]
        prefill = [sum(r.timings.prefill_s
                       for r in read_records(s.run_dir, parsers=record_parser))
                   for s in runs_of]
        identical = min(sum(1 for row, value in outputs(s.run_dir).items()
                            if reference.get(row) == value) for s in runs_of)
        results.append({"name": name, "rows": args.rows, "min_s": min(times),
                        "median_s": statistics.median(times),
                        "prefill_s_median": statistics.median(prefill),
                        "identical": identical})
    base = results[0]
    for r in results:
        r["vs_full"] = base["min_s"] / r["min_s"]
    return {"shares": shares, "results": results}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    for option in ("--json", "--home", "--work"):
        parser.add_argument(option, type=Path)
    args = parser.parse_args(argv)
    if args.rows < 1 or args.repeats < 1:
        parser.error("--rows and --repeats must be >= 1")
    with tempfile.TemporaryDirectory(prefix="bench-mlx-prefix-") as tmp:
        home = (args.home or Path(tmp) / "home").resolve()
        work = (args.work or Path(tmp) / "work").resolve()
        work.mkdir(parents=True, exist_ok=True)
        out = run(args, home, work)
    s = out["shares"]
    print(f"toy guard, MLX q8-g64-f32, first {args.rows} rows of cohorts/toy-64.toml, "
          f"{args.repeats} interleaved repeats, {os.cpu_count()} CPUs")
    print(f"prompt tokens {s['prompt_tokens']}, reusable {s['reusable_tokens']} "
          f"({s['reusable_tokens'] / s['prompt_tokens']:.1%}), head shared by all "
          f"{s['common_head_tokens']}")
    print(f"{'config':14} {'min_s':>7} {'median_s':>8} {'prefill_s':>9} {'vs full':>7} identical")
    for r in out["results"]:
        print(f"{r['name']:14} {r['min_s']:7.2f} {r['median_s']:8.2f} "
              f"{r['prefill_s_median']:9.2f} {r['vs_full']:6.2f}x "
              f"{r['identical']}/{r['rows']}")
    if args.json is not None:
        atomic_write_bytes(args.json, (json.dumps(out, indent=2) + "\n").encode("utf-8"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
