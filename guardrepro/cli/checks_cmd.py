"""``guardrepro gate``, ``guardrepro stats`` and ``guardrepro audit``.

- ``gate RUN_DIR --spec checks/X.toml [--conservative] [--cohort FILE]``:
  writes RUN_DIR/gate.json, prints the check table and the one-line verdict;
  exit 0 when the gate passes, 3 when it fails (``GateFailed``, raised after
  gate.json is written), 2 on unusable input.
- ``stats RUN_DIR [--seed N] [--replicates N] [--cohort FILE]``: writes
  RUN_DIR/stats.json atomically and prints a short table; ``--export`` also
  writes every figure as a CSV or Parquet table.
- ``audit interaction --benchmark agentdojo|agentharm [--preds released|RUN_DIR]``
  and ``audit tool-lookup``: benchmark audits; the JSON goes to stdout (and to
  ``--out`` when given), the table to stderr. The benchmark comes from
  ``--data-dir`` or, by default, the fetched ``--lock``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from guardrepro.checks.bootstrap import (
    DEFAULT_DRAW_ORDER,
    DEFAULT_REPLICATES,
    DEFAULT_SEED,
    DRAW_ORDERS,
)
from guardrepro.errors import GateFailed

RUN_DIR = click.Path(exists=True, file_okay=False, path_type=Path)
COHORT_OPTION = click.option(
    "--cohort", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
    help="Cohort file of the run (default: the one its manifest names, if on disk; "
    "else every base x every variant seen in the records).",
)


@click.command()
@click.argument("run_dir", type=RUN_DIR)
@click.option("--spec", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="Gate spec (checks/*.toml).")
@click.option("--conservative", is_flag=True,
              help="Test ratio thresholds against the bootstrap lower bound.")
@COHORT_OPTION
def gate(run_dir: Path, spec: Path, conservative: bool, cohort: Path | None) -> None:
    """Gate the run's original rows against the spec's reference predictions."""
    from guardrepro.checks.gate import evaluate, format_table, load_spec, reference_rows
    from guardrepro.checks.runio import load_run, write_json_atomic

    gate_spec = load_spec(spec)
    run = load_run(run_dir, cohort)
    key_field, reference, ref_info = reference_rows(gate_spec)
    result = evaluate(gate_spec, run.rows, key_field=key_field, reference=reference,
                      conservative=conservative)
    result["reference"] = ref_info
    result["run_dir"] = str(run_dir)
    result["expected_rows_source"] = run.expected_source
    path = write_json_atomic(run_dir / "gate.json", result)
    click.echo(format_table(result))
    click.echo(f"wrote {path}")
    click.echo(result["verdict"])
    if not result["passed"]:
        raise GateFailed(result["verdict"])


@click.command()
@click.argument("run_dir", type=RUN_DIR)
@click.option("--seed", type=int, default=DEFAULT_SEED, show_default=True,
              help="Bootstrap seed (numpy default_rng).")
@click.option("--replicates", type=click.IntRange(min=1), default=DEFAULT_REPLICATES,
              show_default=True, help="Bootstrap replicates.")
@click.option("--draw-order", type=click.Choice(DRAW_ORDERS), default=DEFAULT_DRAW_ORDER,
              show_default=True, help="How the bootstrap consumes the generator (see docs).")
@COHORT_OPTION
@click.option("--export", "exports", type=click.Path(dir_okay=False, path_type=Path),
              multiple=True, help="Also write every figure as one table row, CSV or "
              "Parquet by the suffix (.csv, .parquet); repeatable.")
def stats(run_dir: Path, seed: int, replicates: int, draw_order: str,
          cohort: Path | None, exports: tuple[Path, ...]) -> None:
    """Per-variant metrics and paired flip statistics; writes stats.json."""
    from guardrepro.checks.runio import load_run, write_json_atomic
    from guardrepro.checks.stats import compute_stats, format_table

    run = load_run(run_dir, cohort)
    result = compute_stats(run.rows, replicates=replicates, seed=seed, progress=True,
                           expected_source=run.expected_source, draw_order=draw_order)
    result["run_dir"] = str(run_dir)
    path = write_json_atomic(run_dir / "stats.json", result)
    click.echo(format_table(result))
    click.echo(f"wrote {path}")
    if exports:
        from guardrepro.checks.frames import StatsResult

        for out in exports:
            click.echo(f"wrote {StatsResult(result).export(out)}")


@click.group()
def audit() -> None:
    """Audits of the benchmark itself (no model)."""


DATA_OPTIONS = [
    click.option("--data-dir", type=click.Path(exists=True, file_okay=False, path_type=Path),
                 default=None, help="Directory holding the ToolSafe files at their paths."),
    click.option("--lock", type=click.Path(dir_okay=False, path_type=Path),
                 default=Path("locks/toolsafe.toml"), show_default=True,
                 help="Data lock to materialize when --data-dir is not given."),
    click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
                 help="Also write the JSON here (atomically)."),
]


def _data_options(f: Any) -> Any:
    for option in reversed(DATA_OPTIONS):
        f = option(f)
    return f


def _data_dir(data_dir: Path | None, lock: Path) -> Path:
    if data_dir is not None:
        return data_dir
    from guardrepro.fetch import materialize

    return materialize(lock)


def _emit(result: dict[str, Any], table: str, out: Path | None) -> None:
    from guardrepro.checks.runio import write_json_atomic

    click.echo(table, err=True)
    if out is not None:
        write_json_atomic(out, result)
        click.echo(f"wrote {out}", err=True)
    click.echo(json.dumps(result, indent=2, sort_keys=True))


@audit.command("interaction")
@click.option("--benchmark", type=click.Choice(["agentdojo", "agentharm"]), required=True)
@click.option("--preds", default="released", show_default=True,
              help="'released' (the pinned released predictions) or a run directory.")
@_data_options
def interaction(benchmark: str, preds: str, data_dir: Path | None, lock: Path,
                out: Path | None) -> None:
    """Row vs equal-interaction vs interaction-majority strict F1."""
    from guardrepro.checks.audit import (
        format_interaction,
        interaction_audit,
        preds_from_records,
        released_preds,
    )
    from guardrepro.checks.runio import load_records
    from guardrepro.tsbench import load_benchmark

    root = _data_dir(data_dir, lock)
    rows = load_benchmark(root, benchmark)
    if preds == "released":
        from guardrepro.released import load_released

        values = released_preds(rows, load_released(root, benchmark))
    else:
        values = preds_from_records(rows, load_records(Path(preds)))
    result = interaction_audit(rows, values)
    result["benchmark"] = benchmark
    result["preds"] = preds
    _emit(result, format_interaction(result), out)


@audit.command("tool-lookup")
@click.option("--benchmark", type=click.Choice(["agentdojo", "agentharm"]), default="agentdojo",
              show_default=True)
@click.option("--folds", type=click.IntRange(min=2), default=5, show_default=True)
@_data_options
def tool_lookup(benchmark: str, folds: int, data_dir: Path | None, lock: Path,
                out: Path | None) -> None:
    """Tool-name lookup diagnostic: grouped CV vs leave-one-domain-out."""
    from guardrepro.checks.audit import format_tool_lookup, tool_lookup_audit
    from guardrepro.tsbench import load_benchmark

    rows = load_benchmark(_data_dir(data_dir, lock), benchmark)
    result = tool_lookup_audit(rows, folds)
    result["benchmark"] = benchmark
    _emit(result, format_tool_lookup(result), out)
