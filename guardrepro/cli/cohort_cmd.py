"""``guardrepro cohort``: build frozen counterfactual cohorts.

``guardrepro cohort build SPEC --data-dir DIR --out FILE [--unpinned]``
reads the TS-Bench files below DIR (default: the spec's data lock, fetched
and verified into ``--home``), writes FILE and FILE.manifest.json atomically,
prints a summary of the manifest on stdout (with ``--json``: the manifest as
JSON on stdout, the summary on stderr) and warnings on stderr. Exit 2 on unusable input
or data that does not match the lock.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from guardrepro.cli.options import JSON_OPTION, PROGRESS_OPTION, SpecFile, echo, emit, home_option
from guardrepro.errors import IntegrityError


@click.group(short_help="Build frozen counterfactual cohorts.")
def cohort() -> None:
    """Build frozen counterfactual cohorts from benchmark rows."""


@cohort.command(short_help="Build the cohort a spec describes.")
@click.argument("spec", type=SpecFile("cohorts"))
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Directory holding TS-Bench/<benchmark>-traj/<domain>.json "
    "(default: the spec's data lock, already fetched).",
)
@click.option(
    "--out", required=True, type=click.Path(dir_okay=False, path_type=Path),
    help="Cohort JSONL to write; the manifest goes to OUT.manifest.json.",
)
@click.option(
    "--unpinned", is_flag=True,
    help="Accept input files that do not match the data lock (manifest says pinned: false).",
)
@click.option(
    "--require-match", is_flag=True,
    help="Fail (exit 2) when the output sha256 differs from the spec's expected one.",
)
@home_option
@PROGRESS_OPTION
@JSON_OPTION
def build(
    spec: Path, data_dir: Path | None, out: Path, unpinned: bool, require_match: bool,
    home: Path | None, progress: bool, as_json: bool,
) -> None:
    """Build the cohort described by SPEC (a cohorts/*.toml file): a
    counterfactual cohort, or every row of a split (``kind = "split"``)."""
    from guardrepro.bench.cohort.split import build_any_cohort_file

    manifest = build_any_cohort_file(spec, data_dir, out, unpinned=unpinned, progress=progress,
                                     home=home)
    for warning in manifest["warnings"]:
        echo(f"warning: {warning}", err=True)
    if manifest["sha256_matches"] is False:
        echo(
            f"warning: output sha256 {manifest['sha256']} differs from the spec's expected "
            f"{manifest['expected_sha256']}",
            err=True,
        )
    emit(as_json, manifest, _summary(manifest, out))
    if require_match and manifest["sha256_matches"] is not True:
        raise IntegrityError(
            f"{out}: sha256 {manifest['sha256']} does not match the spec's expected "
            f"{manifest['expected_sha256']}"
        )


def _summary(manifest: dict[str, Any], out: Path) -> str:
    """The manifest's headline figures, one per line."""
    keys = ("name", "bases", "rows", "bytes", "sha256", "pinned", "sha256_matches")
    lines = [f"{key:<15} {manifest[key]}" for key in keys if key in manifest]
    return "\n".join([*lines, f"{'cohort':<15} {out}"])
