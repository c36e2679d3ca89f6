"""``guardrepro sweep SPEC --out DIR``: run (or resume) a recipe sweep.

Input: a sweep spec (``quantize/sweeps/*.toml``). Output: the sweep directory
(see ``guardrepro.experiments.sweep``), the summary table and the frontier on
stdout. A rerun on the same directory continues where it stopped. Exit 2 on
unusable input.
"""

from __future__ import annotations

from pathlib import Path

import click

from guardrepro.cli.engine_options import engine_options
from guardrepro.cli.options import POSITIVE, PROGRESS_OPTION, SpecFile, echo, home_option
from guardrepro.errors import InputError


@click.command(short_help="Run or resume a quantization recipe sweep.")
@click.argument("spec", type=SpecFile("quantize/sweeps", exists=True))
@click.option("--out", "out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Sweep directory (created; an existing one is resumed).")
@home_option
@PROGRESS_OPTION
@click.option("--workers", type=POSITIVE, default=1, show_default=True,
              help="--engine ray: actors in the pool that runs every configuration's units.")
@engine_options
def sweep(spec: Path, out: Path, home: Path | None, progress: bool, workers: int, engine: str,
          ray_address: str | None, units: int | None, cpus_per_worker: float | None,
          gpus_per_worker: float) -> None:
    """Quantize each recipe of SPEC, run the cohort, measure teacher-forced
    divergence from the reference, and write the summary and the frontier."""
    import functools

    from guardrepro.experiments.sweep import run_sweep
    from guardrepro.run.engine import Engine

    on_ray = Engine(engine, ray_address, units, cpus_per_worker, gpus_per_worker).ray(workers)
    if on_ray is None:
        if workers != 1:
            raise InputError("sweep --workers applies to --engine ray", field="workers")
        result = run_sweep(spec, out, home=home, progress=progress,
                           say=lambda line: echo(line, err=True))
    else:
        from guardrepro.experiments.sweep_ray import run_configurations

        result = run_sweep(spec, out, home=home, progress=progress,
                           say=lambda line: echo(line, err=True),
                           runs=functools.partial(run_configurations,
                                                  options=on_ray.checked()))
    echo((result.out / "summary.md").read_text(encoding="utf-8"))
    echo((result.out / "frontier.md").read_text(encoding="utf-8"))
    rec = result.frontier.extra.get("recommendation") if result.frontier else None
    if rec is not None:
        echo(f"recommendation: {rec['name'] or 'none'} ({rec['reason']})")
    echo(f"device: {result.device}")
    echo(f"sweep directory: {result.out}")
