"""``guardrepro demo``: the whole pipeline on the embedded toy guard, offline.

Prints each step on stderr, then a summary (coverage, strict accuracy by
variant, flips by edit, transformers vs MLX Q8, the gate verdict) and the
demo directory. Exit 0 when the gate passes, 3 when it fails.
"""

from __future__ import annotations

import time
from pathlib import Path

import click

from guardrepro.checks.core.bootstrap import QUICK_REPLICATES
from guardrepro.cli.options import COUNT, PROGRESS_OPTION, REPLICATES, echo, home_option


@click.command(short_help="The whole pipeline on the toy guard, offline.")
@click.option("--out", "out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Demo directory (default: runs/demo-<UTC timestamp>). An existing one resumes.")
@home_option
@click.option("--mlx/--no-mlx", "with_mlx", default=None,
              help="Include the MLX Q8 quantize + run step (default: when mlx is installed).")
@click.option("--replicates", default=QUICK_REPLICATES, show_default=True, type=REPLICATES,
              help="Bootstrap replicates for the demo's intervals (published analyses: 10000).")
@click.option("--sampled", type=COUNT, default=0, show_default=True,
              help="Also run K seeded repeats in the authors' sampled mode on the 64 original "
              "rows and attribute every disagreement (K = 5 is the documented setting).")
@PROGRESS_OPTION
def demo(out: Path | None, home: Path | None, with_mlx: bool | None, replicates: int,
         sampled: int, progress: bool) -> None:
    """Verify, build the cohort, run, quantize, compare, gate and report on the toy guard."""
    from guardrepro.demo import raise_if_gate_failed, run_demo, summary_lines

    if out is None:
        out = Path("runs") / time.strftime("demo-%Y%m%d-%H%M%S", time.gmtime())
    result = run_demo(out, home=home, with_mlx=with_mlx, replicates=replicates,
                      progress=progress, say=lambda m: echo(m, err=True), sampled=sampled)
    for line in summary_lines(result):
        echo(line)
    raise_if_gate_failed(result)
