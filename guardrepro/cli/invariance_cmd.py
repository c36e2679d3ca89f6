"""``guardrepro check-invariance``: does batching change the greedy outputs?

Input: ``--profile``, ``--cohort``, ``--sample N``, ``--seed S``, optional
``--batch-size B`` or a comma list ``B1,B2,...`` (each compared with one
batch-1 pass, e.g. ``16,44,64``; default: the profile's), ``--out PATH``, ``--json``,
``--fail-on-divergence``, ``--home``. Output: a table of the sampled rows
(identical?, first divergence, token counts, finish reasons) and a summary
line on stdout (stderr with ``--json``, which prints the full report on
stdout); the full report as JSON at PATH with ``--out`` (several batch sizes:
``{"reports": [one report per size]}``). Exit code 3 with
``--fail-on-divergence`` when any row differs at any size (see
``guardrepro.run.invariance``).
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from guardrepro.cli.options import (
    JSON_OPTION,
    POSITIVE,
    PROGRESS_OPTION,
    SEED,
    SpecFile,
    emit,
    home_option,
    say,
)


@click.command("check-invariance", short_help="Does batching change the greedy outputs?")
@click.option("--profile", "profile_path", required=True,
              type=SpecFile("runners"), help="Run profile TOML (or its bare name).")
@click.option("--cohort", "cohort_path", required=True,
              type=click.Path(dir_okay=False, path_type=Path), help="Cohort JSONL file.")
@click.option("--sample", type=POSITIVE, required=True,
              help="Number of rows to check (chosen deterministically from --seed).")
@click.option("--seed", type=SEED, default=0, show_default=True, help="Seed of the row sample.")
@click.option("--batch-size", "batch_sizes", default=None, metavar="B[,B...]",
              help="Batch size(s) to compare with batch 1, e.g. 16,44,64 (default: the "
              "profile's batch_size).")
@click.option("--out", "json_path", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="Also write the full report as JSON to this file.")
@JSON_OPTION
@click.option("--fail-on-divergence", is_flag=True, default=False,
              help="Exit with code 3 when any row differs between the passes.")
@PROGRESS_OPTION
@home_option
def check_invariance(
    profile_path: Path,
    cohort_path: Path,
    sample: int,
    seed: int,
    batch_sizes: str | None,
    json_path: Path | None,
    as_json: bool,
    fail_on_divergence: bool,
    progress: bool,
    home: Path | None,
) -> None:
    """Run --sample rows at batch size 1 and at each batch size (default: the
    profile's) with the same runner and report token-level agreement."""
    from guardrepro.spec import check_cohort_path

    check_cohort_path(cohort_path)
    from guardrepro.errors import GateFailed
    from guardrepro.run.invariance import check_invariance_sizes, format_table, parse_sizes
    from guardrepro.rundir.records import write_atomic

    sizes = None if batch_sizes is None else parse_sizes(batch_sizes)
    reports = check_invariance_sizes(profile_path, cohort_path, sample, seed=seed,
                                     batch_sizes=sizes, progress=progress, home=home)
    document = reports[0].to_dict() if len(reports) == 1 else {
        "reports": [r.to_dict() for r in reports]}
    emit(as_json, document, "\n\n".join(format_table(r) for r in reports))
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(json_path, json.dumps(document, indent=2, sort_keys=True) + "\n")
        say(as_json)(f"report: {json_path}")
    differ = [(r.batch_size, len(r.rows) - r.identical_sequences) for r in reports
              if not r.invariant]
    if fail_on_divergence and differ:
        n = len(reports[0].rows)
        raise GateFailed("batching changed the outputs of " + ", ".join(
            f"{k} of {n} rows at batch size {size}" for size, k in differ))
