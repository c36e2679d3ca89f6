"""``guardrepro guard-table``: several guards' runs of one cohort, side by side.

Input: run directories of the same cohort (``--label`` once per run to name
the columns; default ``guard (backend)`` from each manifest). Output: a
Markdown table on stdout (coverage, accuracy, precision, recall, F1 on the
original rows, flip rate per edit; each value with numerator/denominator and
a cluster-bootstrap interval); ``--json`` puts the full table on stdout
instead (the Markdown on stderr), ``--out FILE`` also writes it as JSON,
``--figure`` a PNG of the same figures (``checks.guard_table``).
``--progress`` (the default) draws a bar on stderr, one step per run.
"""

from __future__ import annotations

from pathlib import Path

import click

from guardrepro.checks.bootstrap import DEFAULT_SEED, QUICK_REPLICATES
from guardrepro.cli.options import COUNT, JSON_OPTION, PROGRESS_OPTION, SEED, emit, say


@click.command("guard-table", short_help="Several guards' runs of one cohort, side by side.")
@click.argument("runs", nargs=-1, required=True,
                type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.option("--label", "labels", multiple=True, help="Column name, once per run, in order.")
@click.option("--replicates", default=QUICK_REPLICATES, show_default=True, type=COUNT,
              help="Bootstrap replicates (0: no intervals).")
@click.option("--seed", default=DEFAULT_SEED, show_default=True, type=SEED)
@click.option("--out", "json_path", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="Also write the table as JSON here.")
@JSON_OPTION
@click.option("--figure", "figure_path", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="Write the figure as PNG.")
@PROGRESS_OPTION
def guard_table(runs: tuple[Path, ...], labels: tuple[str, ...], replicates: int, seed: int,
                json_path: Path | None, as_json: bool, figure_path: Path | None,
                progress: bool) -> None:
    """Accuracy, precision, recall, F1 and flip rates per guard over RUNS."""
    from guardrepro.checks.guard_table import (
        format_guard_table,
        guard_table_figure,
    )
    from guardrepro.checks.guard_table import (
        guard_table as build,
    )
    from guardrepro.checks.runio import write_json_atomic

    table = build(list(runs), list(labels) or None, replicates=replicates, seed=seed,
                  progress=progress)
    emit(as_json, table, format_guard_table(table))
    if json_path is not None:
        write_json_atomic(json_path, table)
        say(True)(f"wrote {json_path}")
    if figure_path is not None:
        guard_table_figure(table, figure_path)
        say(True)(f"wrote {figure_path}")
