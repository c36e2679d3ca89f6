"""``guardrepro guard-table``: several guards' runs of one cohort, side by side.

Input: run directories of the same cohort (``--label`` once per run to name
the columns; default ``guard (backend)`` from each manifest). Output: a
Markdown table on stdout (coverage, accuracy, precision, recall, F1 on the
original rows, flip rate per edit; each value with numerator/denominator and
a cluster-bootstrap interval), ``--json`` the full table, ``--figure`` a PNG
of the same figures (``checks.guard_table``).
"""

from __future__ import annotations

from pathlib import Path

import click


@click.command("guard-table")
@click.argument("runs", nargs=-1, required=True,
                type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.option("--label", "labels", multiple=True, help="Column name, once per run, in order.")
@click.option("--replicates", default=2000, show_default=True, type=click.IntRange(min=0),
              help="Bootstrap replicates (0: no intervals).")
@click.option("--seed", default=260828, show_default=True)
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="Write the table as JSON.")
@click.option("--figure", "figure_path", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="Write the figure as PNG.")
def guard_table(runs: tuple[Path, ...], labels: tuple[str, ...], replicates: int, seed: int,
                json_path: Path | None, figure_path: Path | None) -> None:
    """Accuracy, precision, recall, F1 and flip rates per guard over RUNS."""
    from guardrepro.checks.guard_table import (
        format_guard_table,
        guard_table_figure,
    )
    from guardrepro.checks.guard_table import (
        guard_table as build,
    )
    from guardrepro.checks.runio import write_json_atomic

    table = build(list(runs), list(labels) or None, replicates=replicates, seed=seed)
    click.echo(format_guard_table(table))
    if json_path is not None:
        write_json_atomic(json_path, table)
        click.echo(f"wrote {json_path}", err=True)
    if figure_path is not None:
        guard_table_figure(table, figure_path)
        click.echo(f"wrote {figure_path}", err=True)
