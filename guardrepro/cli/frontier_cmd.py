"""``guardrepro frontier RUN... [--costs FN=..,FP=..]``: cost, harm and dominance.

Input: run directories or ``records.jsonl`` files (model runs, quantized
copies, rule baselines); ``NAME=PATH`` names a configuration. Output: the
table on stdout (with ``--json`` the report on stdout, the table on stderr),
``frontier.json`` and ``frontier.png`` in ``--out``. Exit 0
whatever the result (measurement, not a gate); 2 on unusable input.
"""

from __future__ import annotations

from pathlib import Path

import click

from guardrepro.checks.core.bootstrap import DEFAULT_REPLICATES, DEFAULT_SEED
from guardrepro.cli.options import JSON_OPTION, REPLICATES, SEED, emit, say
from guardrepro.experiments.frontier import AXES


@click.command(short_help="Cost, harm, dominance and the Pareto frontier.")
@click.argument("runs", nargs=-1, required=True)
@click.option("--costs", default=None, help="Error costs, e.g. FN=5,FP=1 (default 1 and 1).")
@click.option("--reference", default=None,
              help="Configuration name the others are paired with (default: the first).")
@click.option("--axes", default="memory,harm", show_default=True,
              help=f"Two frontier axes, from {', '.join(AXES)}.")
@click.option("--replicates", default=DEFAULT_REPLICATES, show_default=True, type=REPLICATES)
@click.option("--seed", default=DEFAULT_SEED, show_default=True, type=SEED)
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("."),
              show_default=True, help="Folder for frontier.json and frontier.png.")
@JSON_OPTION
def frontier(runs: tuple[str, ...], costs: str | None, reference: str | None, axes: str,
             replicates: int, seed: int, out: Path, as_json: bool) -> None:
    """Cost, strict errors, cost-weighted harm, agreement, dominance and the
    Pareto frontier of RUN... (run directories or records.jsonl files)."""
    from guardrepro.checks.io.runio import write_json_atomic
    from guardrepro.errors import InputError
    from guardrepro.experiments.frontier import (
        format_frontier,
        frontier_report,
        load_config,
        parse_costs,
    )
    from guardrepro.experiments.outputs import frontier_figure

    configs = []
    for item in runs:
        name, sep, path = item.partition("=")
        if not sep:
            name, path = "", item
        if not Path(path).exists():
            raise InputError("not found", file=path)
        configs.append(load_config(path, name or None))
    chosen = tuple(a.strip() for a in axes.split(","))
    report = frontier_report(configs, reference=reference or configs[0].name,
                             costs=parse_costs(costs), axes=chosen, replicates=replicates,
                             seed=seed)
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / "frontier.json", report.to_dict())
    frontier_figure(report, out / "frontier.png")
    emit(as_json, report.to_dict(), format_frontier(report))
    say(as_json)(f"wrote {out / 'frontier.json'} and {out / 'frontier.png'}")
