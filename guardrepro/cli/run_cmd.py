"""``guardrepro run``: run (or resume) a cohort with a run profile.

Input: ``--profile`` (runners/*.toml), ``--cohort`` (cohort JSONL), ``--out``
(the run directory), optional ``--shard k/n``, ``--limit N`` and ``--seed N``
(replaces the profile's decoding seed, the repeat index of the sampled seeds:
0 = the published per-base seeds, N > 0 = repeat N, see
``decoding.sampled_seed``; sampled mode only, refused with an ``InputError`` for
a greedy profile; it is part of the recorded decoding, so it changes the
provenance hash) and ``--workers N`` (worker processes over
deterministic shards, merged in cohort order: ``runners.workers``; default:
the profile's ``workers``, else 1); ``--home`` is the cache the checkpoint and
template come from. Output: the
run directory's ``manifest.json`` and ``records.jsonl``; on stdout a short
summary whose last line is the run directory (for scripts). Progress goes to
stderr.
"""

from __future__ import annotations

import os
from pathlib import Path

import click

from guardrepro.artifacts.store import FULL_ENV
from guardrepro.cli.engine_options import engine_options
from guardrepro.cli.options import (
    COUNT,
    POSITIVE,
    PROGRESS_OPTION,
    SEED,
    SpecFile,
    echo,
    home_option,
)


@click.command("run", short_help="Run (or resume) a cohort with a run profile.")
@click.option(
    "--profile",
    "profile_path",
    required=True,
    type=SpecFile("runners"),
    help="Run profile TOML (backend, guard, checkpoint, backend options, decoding).",
)
@click.option(
    "--cohort",
    "cohort_path",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Cohort JSONL file (one row per line, see `guardrepro cohort`).",
)
@click.option(
    "--out",
    "run_dir",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Run directory; rerunning into the same directory resumes it.",
)
@click.option(
    "--shard",
    default=None,
    metavar="K/N",
    help="Run only shard K of N (1-based; rows assigned by the hash of their derived id).",
)
@click.option(
    "--limit",
    type=COUNT,
    default=None,
    help="Only the first N selected rows in this invocation (a later run resumes the rest).",
)
@click.option(
    "--seed",
    type=SEED,
    default=None,
    help="Sampled profiles only: the repeat index of the per-base, per-attempt seeds "
    "(0 = the published seeds sha256('260828:<base>:<serialization>:<attempt>'), N > 0 "
    "appends ':r<N>' to that string); recorded in the provenance. Refused for greedy profiles.",
)
@click.option(
    "--workers",
    type=POSITIVE,
    default=None,
    help="Worker processes (default: the profile's `workers`, else 1). Each runs a "
    "deterministic shard with its share of the CPU cores; the records are merged into "
    "--out in cohort order with one provenance.",
)
@engine_options
@PROGRESS_OPTION
@home_option
@click.option(
    "--verify-full",
    is_flag=True,
    help="Re-hash every checkpoint file instead of the cheap stamp + sampled-block check.",
)
def run(
    profile_path: Path,
    cohort_path: Path,
    run_dir: Path,
    shard: str | None,
    limit: int | None,
    seed: int | None,
    workers: int | None,
    engine: str,
    ray_address: str | None,
    units: int | None,
    cpus_per_worker: float | None,
    gpus_per_worker: float,
    progress: bool,
    home: Path | None,
    verify_full: bool,
) -> None:
    """Run a cohort with a profile: one record per row in RUN_DIR (resumable).

    Writes RUN_DIR/manifest.json and appends RUN_DIR/records.jsonl. Rows
    already recorded with identical provenance are skipped; a run directory
    made with different provenance, cohort or shard is refused.

    \b
    Sampling-noise floor: run a sampled profile K times with different seeds,
    each into its own directory, then compare the runs pairwise. Seed 0 is the
    published seed set; 1, 2, ... are further repeats, e.g.
      for s in 0 1 2; do guardrepro run --profile runners/vllm-bf16-sampled.toml \\
        --cohort COHORT --out runs/sampled-s$s --seed $s; done
      guardrepro compare runs/sampled-s0 runs/sampled-s1
    Rerunning with the same seed into the same directory resumes it.
    """
    from guardrepro.spec import check_cohort_path

    check_cohort_path(cohort_path)  # a missing file or a cohort spec, before heavy imports
    from guardrepro.run.engine import Engine, RunRequest, execute

    if verify_full:
        os.environ[FULL_ENV] = "1"
    request = RunRequest(profile_path, cohort_path, run_dir, shard=shard, limit=limit, seed=seed,
                         workers=workers)
    done = execute(request, Engine(engine, ray_address, units, cpus_per_worker, gpus_per_worker),
                   progress=progress, home=home)
    for line in done.lines():
        echo(line)
    from guardrepro.run.parse_warning import parse_failure_warning

    warning = parse_failure_warning(done.summary.counts, done.summary.run_dir)
    if warning is not None:
        echo(warning, err=True)
