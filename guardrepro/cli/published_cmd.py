"""``guardrepro vs-published PATH [--spec FILE] [--gate FILE] [--cohort FILE] [--out FILE]``.

PATH is a run directory or a predictions JSONL file. The run's statistics are
computed afresh with the published interval settings (10,000 replicates,
seed 260828, confidence 0.95); the gate figures come from ``--gate`` or
PATH/gate.json when present. Prints every published figure beside the run's
with the difference and a status; exit 3 when a figure marked ``exact``
differs or is missing from the run's statistics, 0 otherwise, 2 on unusable
input. ``--out`` also writes the comparison as JSON (atomically); ``--json``
prints it on stdout (the table then goes to stderr).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from guardrepro.cli.options import JSON_OPTION, PROGRESS_OPTION, SpecFile, emit, say
from guardrepro.errors import CheckFailed, InputError
from guardrepro.limits import read_json_file

DEFAULT_SPEC = Path("checks/published/ts-guard-q8.toml")


def _default_spec() -> Path:
    if DEFAULT_SPEC.is_file():
        return DEFAULT_SPEC
    from guardrepro.demo import repo_root

    return repo_root() / DEFAULT_SPEC


def _load_json(path: Path) -> dict[str, Any]:
    data = read_json_file(path)
    if not isinstance(data, dict):
        raise InputError("expected a JSON object", file=str(path))
    return data


@click.command("vs-published", short_help="A run's figures beside the published ones.")
@click.argument("path", type=click.Path(exists=True, path_type=Path))
@click.option("--spec", type=SpecFile("checks", exists=True), default=None,
              help=f"Published figures (default: {DEFAULT_SPEC}).")
@click.option("--gate", "gate_file", type=click.Path(exists=True, dir_okay=False,
                                                     path_type=Path),
              default=None, help="gate.json of the run (default: PATH/gate.json if present).")
@click.option("--cohort", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              default=None, help="Cohort file of a run directory.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the comparison as JSON here.")
@PROGRESS_OPTION
@JSON_OPTION
def vs_published(path: Path, spec: Path | None, gate_file: Path | None, cohort: Path | None,
                 out: Path | None, progress: bool, as_json: bool) -> None:
    """Print the run's figures beside the published ones, row by row."""
    from guardrepro.checks.io.predictions import load_rows
    from guardrepro.checks.parity.published import compare, format_comparison, load_published
    from guardrepro.checks.parity.sides import side_from, side_of_run
    from guardrepro.checks.stats.compute import compute_stats
    from guardrepro.rundir.outputs import GATE_JSON, write_json_atomic
    from guardrepro.rundir.read import RunData

    published = load_published(spec if spec is not None else _default_spec())
    run = load_rows(path, cohort)
    stats = compute_stats(run.rows, expected_source=run.expected_source,
                          progress=progress).to_dict()
    if gate_file is None and path.is_dir() and (path / GATE_JSON).is_file():
        gate_file = path / GATE_JSON
    gate = _load_json(gate_file) if gate_file is not None else None
    sources = {"stats": f"computed from {path}",
               "gate": str(gate_file) if gate_file is not None else "not computed",
               "audit": "not computed"}
    result = compare(published, {"stats": stats, "gate": gate, "audit": None}, sources,
                     run_side=side_from(path, run.manifest, None) if isinstance(run, RunData)
                     else side_of_run(path))
    emit(as_json, result.to_dict(), format_comparison(result))
    if out is not None:
        write_json_atomic(out, result.to_dict())
        say(as_json)(f"wrote {out}")
    if result.failed:
        names = ", ".join(r.figure.name for r in result.failed)
        raise CheckFailed(f"{len(result.failed)} figure(s) differ from {published.name}: "
                          f"{names}")
