"""``guardrepro report RUN_DIR``: report.md plus PNG figures in the run directory.

Uses RUN_DIR/stats.json (computed first when missing, or with
``--recompute``) and RUN_DIR/gate.json when present. Prints the path of
report.md and the figures written. ``--html`` also writes the self-contained
``report.html`` (``guardrepro.checks.report.html``). ``--progress`` (the
default) draws the interval engine's bar on stderr while statistics (and the
guard table) are computed.
"""

from __future__ import annotations

from pathlib import Path

import click

from guardrepro.checks.core.bootstrap import DEFAULT_REPLICATES, DEFAULT_SEED
from guardrepro.cli.options import PROGRESS_OPTION, REPLICATES, SEED, echo, home_option


@click.command(short_help="report.md (and report.html) with figures for a run.")
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--recompute", is_flag=True, help="Recompute stats.json even if present.")
@click.option("--seed", type=SEED, default=None,
              help=f"Bootstrap seed; given, stats.json is reused only when computed with it "
              f"(default: any; {DEFAULT_SEED} when computed).")
@click.option("--replicates", type=REPLICATES, default=None,
              help=f"Bootstrap replicates; given, stats.json is reused only when computed "
              f"with them (default: any; {DEFAULT_REPLICATES} when computed).")
@click.option("--cohort", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              default=None, help="Cohort file of the run (default: from its manifest).")
@click.option("--guard-run", "guard_runs", multiple=True,
              type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="Another guard's run of the same cohort (repeatable): adds the side-by-side "
              "guard table and its figure.")
@click.option("--html", is_flag=True,
              help="Also write RUN_DIR/report.html: one self-contained file (no network) with "
              "the verdict, tables, figures and a per-row drill-down.")
@click.option("--attribution", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              default=None, help="attribution JSON (`guardrepro attribute --out`) whose "
              "causes the drill-down shows (default: RUN_DIR/attribution.json when present).")
@click.option("--split-source", "split_sources", multiple=True,
              help="With RUN_DIR a run of a split cohort: another guard's whole-split source "
              "(run directory, predictions file, released-log directory; repeatable): adds "
              "the guards-on-every-split table and figure (guard-table --splits).")
@click.option("--data-dir", type=click.Path(exists=True, file_okay=False, path_type=Path),
              default=None, help="With --split-source: the TS-Bench files (default: the "
              "locks/toolsafe.toml copy in --home).")
@click.option("--drift-reference", type=click.Path(exists=True, path_type=Path), default=None,
              help="A run (or records.jsonl) whose p_unsafe the drift scatter sets against "
                   "this run's, row by row.")
@home_option
@PROGRESS_OPTION
def report(run_dir: Path, recompute: bool, seed: int | None, replicates: int | None,
           cohort: Path | None,
           guard_runs: tuple[Path, ...], html: bool, attribution: Path | None,
           split_sources: tuple[str, ...], data_dir: Path | None,
           drift_reference: Path | None, home: Path | None, progress: bool) -> None:
    """Build RUN_DIR/report.md and its figures from the checks' JSON files."""
    from guardrepro.checks.report.markdown import (
        FIGURES_NOTE,
        build_report,
        figures_available,
        report_inputs,
    )
    from guardrepro.rundir.read import load_run_data

    data = load_run_data(run_dir, cohort)  # read once: both reports and the split table
    split_table = None
    if split_sources:
        from guardrepro.cli.guard_table_cmd import split_document

        split_table = split_document([data, *split_sources], (), (), (), data_dir,
                                     Path("locks/toolsafe.toml"), home,
                                     DEFAULT_REPLICATES if replicates is None else replicates,
                                     DEFAULT_SEED if seed is None else seed, progress)
    inputs = report_inputs(run_dir, recompute=recompute, replicates=replicates, seed=seed,
                           cohort=cohort, progress=progress, data=data)
    path = build_report(run_dir, recompute=recompute, replicates=replicates, seed=seed,
                        cohort=cohort, other_guards=guard_runs, progress=progress,
                        split_table=split_table, inputs=inputs,
                        drift_reference=drift_reference)
    echo(f"wrote {path}")
    if figures_available():
        for png in sorted(run_dir.glob("*.png")):
            echo(f"  {png}")
    else:
        echo(FIGURES_NOTE)
    if html:
        from guardrepro.checks.report.html import build_html

        html_path = build_html(run_dir, cohort=cohort, attribution=attribution, inputs=inputs)
        echo(f"wrote {html_path}")
