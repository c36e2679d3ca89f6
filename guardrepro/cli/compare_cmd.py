"""``guardrepro compare RUN_A RUN_B [--json OUT]``: row-by-row comparison of two runs.

Input: two run directories (or records.jsonl files). Output: a readable
summary and the rows that moved on stdout; the full comparison as JSON with
``--json``; the per-row table as CSV or Parquet with ``--export``. Exit
code 0 whatever the agreement: comparing is measurement, not a gate.
"""

from __future__ import annotations

from pathlib import Path

import click

from guardrepro.checks.compare import compare_runs, format_table, write_json


@click.command()
@click.argument("run_a", type=click.Path(exists=True, path_type=Path))
@click.argument("run_b", type=click.Path(exists=True, path_type=Path))
@click.option("--json", "json_out", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="Write the full comparison (every row) as JSON here.")
@click.option("--export", "exports", type=click.Path(dir_okay=False, path_type=Path),
              multiple=True, help="Write the per-row table as CSV or Parquet (by the "
              "suffix: .csv, .parquet); repeatable.")
def compare(run_a: Path, run_b: Path, json_out: Path | None, exports: tuple[Path, ...]) -> None:
    """Compare two runs row by row: token identity, first divergence,
    exact-score and strict agreement, decision margins."""
    comparison = compare_runs(run_a, run_b)
    click.echo(format_table(comparison))
    if json_out is not None:
        write_json(comparison, json_out)
        click.echo(f"wrote {json_out}")
    if exports:
        from guardrepro.checks.frames import comparison_frame, write_table

        table = comparison_frame(comparison)
        for path in exports:
            click.echo(f"wrote {write_table(table, path)}")
