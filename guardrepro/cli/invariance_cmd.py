"""``guardrepro check-invariance``: does batching change the greedy outputs?

Input: ``--profile``, ``--cohort``, ``--sample N``, ``--seed S``, optional
``--batch-size B`` (default: the profile's), ``--out PATH``, ``--json``,
``--fail-on-divergence``, ``--home``. Output: a table of the sampled rows
(identical?, first divergence, token counts, finish reasons) and a summary
line on stdout (stderr with ``--json``, which prints the full report on
stdout); the full report as JSON at PATH with ``--out``. Exit code 3 with ``--fail-on-divergence``
when any row differs (see ``guardrepro.run.invariance``).
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
@click.option("--batch-size", type=POSITIVE, default=None,
              help="Batch size to compare with batch 1 (default: the profile's batch_size).")
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
    batch_size: int | None,
    json_path: Path | None,
    as_json: bool,
    fail_on_divergence: bool,
    progress: bool,
    home: Path | None,
) -> None:
    """Run --sample rows at batch size 1 and at the profile's batch size with
    the same runner and report token-level agreement."""
    from guardrepro.spec import check_cohort_path

    check_cohort_path(cohort_path)
    from guardrepro.errors import GateFailed
    from guardrepro.run.invariance import check_invariance as run_check
    from guardrepro.run.invariance import format_table
    from guardrepro.run.records import write_atomic

    report = run_check(profile_path, cohort_path, sample, seed=seed, batch_size=batch_size,
                       progress=progress, home=home)
    emit(as_json, report.to_dict(), format_table(report))
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(json_path, json.dumps(report.to_dict(), indent=2, sort_keys=True) + "\n")
        say(as_json)(f"report: {json_path}")
    if fail_on_divergence and not report.invariant:
        n = len(report.rows)
        raise GateFailed(
            f"batching changed the outputs of {n - report.identical_sequences} of {n} rows"
        )
