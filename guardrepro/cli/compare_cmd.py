"""``guardrepro compare RUN_A RUN_B [--json] [--out FILE]``: row-by-row comparison of two runs.

Input: two run directories (or records.jsonl files), or a run and a gate spec
(``checks/*.toml``: the run against the spec's reference, e.g. the released
predictions of a whole split, ``checks.parity.rows``). Output: a readable
summary and the rows that moved on stdout; with ``--json`` the full comparison
(every row) on stdout instead and the summary on stderr; ``--out FILE`` also
writes the full comparison as JSON; the per-row table as CSV or Parquet with
``--export``. Exit
code 0 whatever the agreement: comparing is measurement, not a gate.
"""

from __future__ import annotations

from pathlib import Path

import click

from guardrepro.checks.parity.compare import compare_runs, format_table, write_json
from guardrepro.cli.options import COHORT_OPTION, JSON_OPTION, emit, home_option, say
from guardrepro.errors import InputError


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
@COHORT_OPTION
@home_option
def compare(run_a: Path, run_b: Path, json_out: Path | None, shared_rows: bool, as_json: bool,
            exports: tuple[Path, ...], cohort: Path | None, home: Path | None) -> None:
    """Compare two runs row by row: token identity, first divergence,
    exact-score and strict agreement, decision margins. RUN_B may be a gate
    spec (checks/*.toml): RUN_A's rows against the spec's reference (the
    released predictions of a split), with intervals and every disagreeing row."""
    if run_b.suffix == ".toml" and run_b.is_file():
        _against_reference(run_a, run_b, json_out, as_json, exports, cohort, home)
        return
    if cohort is not None:
        raise InputError("--cohort applies when RUN_B is a gate spec", field="cohort")
    comparison = compare_runs(run_a, run_b, shared_rows=shared_rows)
    emit(as_json, comparison.to_dict(), format_table(comparison))
    if shared_rows:  # after the table, whose first line says what the sides are
        say(as_json)(f"compared the {len(comparison.rows)} rows both runs hold")
    if json_out is not None:
        write_json(comparison, json_out)
        say(as_json)(f"wrote {json_out}")
    if exports:
        from guardrepro.api import comparison_frame
        from guardrepro.checks.core.tables import write_table

        table = comparison_frame(comparison)
        for path in exports:
            say(as_json)(f"wrote {write_table(table, path)}")


def _against_reference(run: Path, spec: Path, json_out: Path | None, as_json: bool,
                       exports: tuple[Path, ...], cohort: Path | None,
                       home: Path | None) -> None:
    from guardrepro.checks.parity.rows import compare_with_reference, format_agreement
    from guardrepro.rundir.outputs import write_json_atomic

    if exports:
        raise InputError("--export applies to two runs; use --json or --out with a spec",
                         field="export")
    from guardrepro.checks.parity.sides import Side, compare_sides, side_of_run, sides_line

    result = compare_with_reference(run, spec, cohort=cohort, home=home)
    ref = result.reference
    ref_side = side_of_run(ref["path"]) if ref.get("type") == "records" else Side()
    sides = compare_sides(side_of_run(run), ref_side)
    result = result.with_extra(sides=sides)
    emit(as_json, result.to_dict(), f"{sides_line(sides, ('A', 'B'))}\n"
         f"A: {run}\nB: {spec} ({ref['type']})\n" + format_agreement(result.agreement))
    if json_out is not None:
        write_json_atomic(json_out, result.to_dict())
        say(as_json)(f"wrote {json_out}")
