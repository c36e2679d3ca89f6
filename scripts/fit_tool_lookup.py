"""Fit the tool-lookup rule's table on benchmark rows outside a cohort.

Input: ``--data-dir`` (a TS-Bench directory, e.g. the toy benchmark's fetched
cache or ``guardrepro/data/toy_bench``), ``--benchmark`` (default agentdojo),
``--cohort`` (a cohort JSONL: its base samples are left out of the fit, so
the baseline is scored out of sample) and ``--out`` (the table JSON).

Output: the ``guards.rule.lookup`` table (per tool key the majority strict
gold label, ties unsafe; fallback the global majority) and a one-line
summary on stdout (rows fitted, rows left out, keys).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from guardrepro.bench.tsbench import load_benchmark
from guardrepro.guards.rule.lookup import fit_table, save_table, training_rows
from guardrepro.rundir.cohort import read_cohort


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", type=Path, required=True)
    ap.add_argument("--benchmark", default="agentdojo")
    ap.add_argument("--cohort", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    held_out = {r.base_sample_id for r in read_cohort(args.cohort)}
    rows = load_benchmark(args.data_dir, args.benchmark)
    train = training_rows(rows, held_out, "benchmark-minus-cohort")
    table = fit_table(train)
    save_table(table, args.out)
    print(f"fitted on {len(train)} rows ({len(rows) - len(train)} cohort rows left out), "
          f"{len(table['table'])} keys, fallback {table['fallback']} -> {args.out}")


if __name__ == "__main__":
    main()
