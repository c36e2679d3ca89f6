"""``guardrepro merge RUN_DIR... --out RUN_DIR``: merge shard runs into one run.

Input: run directories made by ``guardrepro run --shard k/n`` (or any runs of
the same profile and cohort), ``--out``, optional ``--cohort`` (the cohort
file, when the path recorded in the manifests is not available here) and
``--allow-partial``. Output: the merged run directory (see
``guardrepro.run.merge``); on stdout one line per source and a summary whose last
line is the merged directory. Refusals (mixed provenance, different cohorts,
duplicate rows, missing rows) exit with code 2 and write nothing.
"""

from __future__ import annotations

from pathlib import Path

import click

from guardrepro.cli.options import echo


@click.command("merge", short_help="Merge shard runs into one run.")
@click.argument(
    "run_dirs", nargs=-1, required=True, type=click.Path(file_okay=False, path_type=Path)
)
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Merged run directory (must not exist, or be empty).",
)
@click.option(
    "--cohort",
    "cohort_path",
    default=None,
    type=click.Path(dir_okay=False, path_type=Path),
    help="The cohort file (default: the path recorded in the runs' manifests).",
)
@click.option(
    "--allow-partial",
    is_flag=True,
    default=False,
    help="Merge even when some cohort rows have no record (resume the merged run later).",
)
def merge(
    run_dirs: tuple[Path, ...], out_dir: Path, cohort_path: Path | None, allow_partial: bool
) -> None:
    """Merge the records of shard runs RUN_DIR... into --out, refusing mixed
    provenance, different cohorts, duplicate rows and (unless --allow-partial)
    missing rows."""
    from guardrepro.run.merge import merge_runs

    report = merge_runs(run_dirs, out_dir, cohort_path=cohort_path, allow_partial=allow_partial)
    for source in report.sources:
        shard = source.manifest.shard or "unsharded"
        echo(f"  {source.path}: run {source.manifest.run_id}, {shard}, "
             f"{source.record_count} records")
    missing = report.cohort_rows - report.merged_rows
    note = f", {missing} missing" if missing else ""
    echo(
        f"merged {len(report.sources)} runs: {report.merged_rows} of {report.cohort_rows} "
        f"cohort rows{note}"
    )
    echo(str(report.out_dir))
