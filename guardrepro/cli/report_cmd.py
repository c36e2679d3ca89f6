"""``guardrepro report RUN_DIR``: report.md plus PNG figures in the run directory.

Uses RUN_DIR/stats.json (computed first when missing, or with
``--recompute``) and RUN_DIR/gate.json when present. Prints the path of
report.md and the figures written.
"""

from __future__ import annotations

from pathlib import Path

import click

from guardrepro.checks.bootstrap import (
    DEFAULT_DRAW_ORDER,
    DEFAULT_REPLICATES,
    DEFAULT_SEED,
    DRAW_ORDERS,
)


@click.command()
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--recompute", is_flag=True, help="Recompute stats.json even if present.")
@click.option("--seed", type=click.IntRange(min=0), default=DEFAULT_SEED, show_default=True,
              help="Bootstrap seed when stats.json is computed.")
@click.option("--replicates", type=click.IntRange(min=1), default=DEFAULT_REPLICATES,
              show_default=True, help="Bootstrap replicates when stats.json is computed.")
@click.option("--draw-order", type=click.Choice(DRAW_ORDERS), default=DEFAULT_DRAW_ORDER,
              show_default=True, help="Bootstrap draw order when stats.json is computed.")
@click.option("--cohort", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              default=None, help="Cohort file of the run (default: from its manifest).")
def report(run_dir: Path, recompute: bool, seed: int, replicates: int, draw_order: str,
           cohort: Path | None) -> None:
    """Build RUN_DIR/report.md and its figures from the checks' JSON files."""
    from guardrepro.report import build_report

    path = build_report(run_dir, recompute=recompute, replicates=replicates, seed=seed,
                        draw_order=draw_order, cohort=cohort)
    click.echo(f"wrote {path}")
    for png in sorted(run_dir.glob("*.png")):
        click.echo(f"  {png}")
