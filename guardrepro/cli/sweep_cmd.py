"""``guardrepro sweep SPEC --out DIR``: run (or resume) a recipe sweep.

Input: a sweep spec (``quantize/sweeps/*.toml``). Output: the sweep directory
(see ``guardrepro.experiments.sweep``), the summary table and the frontier on
stdout. A rerun on the same directory continues where it stopped. Exit 2 on
unusable input.
"""

from __future__ import annotations

from pathlib import Path

import click

from guardrepro.cli.options import PROGRESS_OPTION, SpecFile, home_option


@click.command(short_help="Run or resume a quantization recipe sweep.")
@click.argument("spec", type=SpecFile("quantize/sweeps", exists=True))
@click.option("--out", "out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Sweep directory (created; an existing one is resumed).")
@home_option
@PROGRESS_OPTION
def sweep(spec: Path, out: Path, home: Path | None, progress: bool) -> None:
    """Quantize each recipe of SPEC, run the cohort, measure teacher-forced
    divergence from the reference, and write the summary and the frontier."""
    from guardrepro.experiments.sweep import run_sweep

    result = run_sweep(spec, out, home=home, progress=progress,
                       say=lambda line: click.echo(line, err=True))
    click.echo((result.out / "summary.md").read_text(encoding="utf-8"))
    click.echo((result.out / "frontier.md").read_text(encoding="utf-8"))
    click.echo(f"device: {result.device}")
    click.echo(f"sweep directory: {result.out}")
