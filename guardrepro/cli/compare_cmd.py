"""``guardrepro compare RUN_A RUN_B [--json] [--out FILE]``: row-by-row comparison of two runs.

Input: two run directories (or records.jsonl files). Output: a readable
summary and the rows that moved on stdout; with ``--json`` the full comparison
(every row) on stdout instead and the summary on stderr; ``--out FILE`` also
writes the full comparison as JSON; the per-row table as CSV or Parquet with
``--export``. Exit
code 0 whatever the agreement: comparing is measurement, not a gate.
"""

from __future__ import annotations

from pathlib import Path

import click

from guardrepro.checks.compare import compare_runs, format_table, write_json
from guardrepro.cli.options import JSON_OPTION, emit, say


@click.command(short_help="Compare two runs row by row.")
@click.argument("run_a", type=click.Path(exists=True, path_type=Path))
@click.argument("run_b", type=click.Path(exists=True, path_type=Path))
@click.option("--out", "json_out", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="Also write the full comparison (every row) as JSON here.")
@click.option("--shared-rows", is_flag=True, help="Runs of different cohorts: compare the "
              "rows both hold (their number is printed) instead of refusing.")
@JSON_OPTION
@click.option("--export", "exports", type=click.Path(dir_okay=False, path_type=Path),
              multiple=True, help="Write the per-row table as CSV or Parquet (by the "
              "suffix: .csv, .parquet); repeatable.")
def compare(run_a: Path, run_b: Path, json_out: Path | None, shared_rows: bool,
            as_json: bool, exports: tuple[Path, ...]) -> None:
    """Compare two runs row by row: token identity, first divergence,
    exact-score and strict agreement, decision margins."""
    comparison = compare_runs(run_a, run_b, shared_rows=shared_rows)
    if shared_rows:
        say(as_json)(f"comparing the {len(comparison.rows)} rows both runs hold")
    emit(as_json, comparison.to_json(), format_table(comparison))
    if json_out is not None:
        write_json(comparison, json_out)
        say(as_json)(f"wrote {json_out}")
    if exports:
        from guardrepro.checks.frames import comparison_frame
        from guardrepro.checks.tables import write_table

        table = comparison_frame(comparison)
        for path in exports:
            say(as_json)(f"wrote {write_table(table, path)}")
