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
@click.option("--cost-miss", type=click.FloatRange(min=0), default=None,
              help="Threshold frontier: cost of an unsafe row passed (default: the FN cost).")
@click.option("--cost-flag", type=click.FloatRange(min=0), default=None,
              help="Threshold frontier: cost of a safe row blocked (default: the FP cost).")
@click.option("--max-miss", type=click.FloatRange(0, 1), default=None,
              help="Threshold frontier: the highest unsafe-missed rate allowed, declared "
                   "before the records are read (e.g. 0.1).")
@click.option("--replicates", default=DEFAULT_REPLICATES, show_default=True, type=REPLICATES)
@click.option("--seed", default=DEFAULT_SEED, show_default=True, type=SEED)
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("."),
              show_default=True, help="Folder for frontier.json and frontier.png.")
@JSON_OPTION
def frontier(runs: tuple[str, ...], costs: str | None, reference: str | None, axes: str,
             cost_miss: float | None, cost_flag: float | None, max_miss: float | None,
             replicates: int, seed: int, out: Path, as_json: bool) -> None:
    """Cost, strict errors, cost-weighted harm, agreement, dominance and the
    Pareto frontier of RUN... (run directories or records.jsonl files); for a
    run whose records carry p_unsafe, the threshold frontier (unsafe missed
    against false flags as the threshold moves) with the harm-minimising
    threshold at --cost-miss / --cost-flag, within --max-miss when given."""
    from guardrepro.checks.stats.thresholds import format_thresholds, threshold_fronts
    from guardrepro.errors import InputError
    from guardrepro.experiments.frontier import (
        format_frontier,
        frontier_report,
        load_config,
        parse_costs,
    )
    from guardrepro.experiments.outputs import frontier_figure
    from guardrepro.rundir.outputs import write_json_atomic

    configs = []
    for item in runs:
        name, sep, path = item.partition("=")
        if not sep:
            name, path = "", item
        if not Path(path).exists():
            raise InputError("not found", file=path)
        configs.append(load_config(path, name or None))
    chosen = tuple(a.strip() for a in axes.split(","))
    parsed = parse_costs(costs)
    report = frontier_report(configs, reference=reference or configs[0].name,
                             costs=parsed, axes=chosen, replicates=replicates,
                             seed=seed)
    fronts = threshold_fronts(configs, parsed["FN"] if cost_miss is None else cost_miss,
                              parsed["FP"] if cost_flag is None else cost_flag, max_miss,
                              replicates=replicates, seed=seed)
    if fronts:
        report = report.with_extra(thresholds={f.name: f.to_dict() for f in fronts})
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / "frontier.json", report.to_dict())
    frontier_figure(report, out / "frontier.png")
    text = "\n\n".join([format_frontier(report), *(format_thresholds(f) for f in fronts)])
    emit(as_json, report.to_dict(), text)
    say(as_json)(f"wrote {out / 'frontier.json'} and {out / 'frontier.png'}")
