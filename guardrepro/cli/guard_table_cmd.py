"""``guardrepro guard-table``: several guards' runs of one cohort, side by side.

Input: run directories of the same cohort (``--label`` once per run to name
the columns; default ``guard (backend)`` from each manifest). Output: a
Markdown table on stdout (coverage, accuracy, precision, recall, F1 on the
original rows, flip rate per edit; each value with numerator/denominator and
a cluster-bootstrap interval); ``--json`` puts the full table on stdout
instead (the Markdown on stderr), ``--out FILE`` also writes it as JSON,
``--figure`` a PNG of the same figures (``checks.report.guard_table``).
``--progress`` (the default) draws a bar on stderr, one step per run.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import click

from guardrepro.checks.core.bootstrap import DEFAULT_SEED, QUICK_REPLICATES
from guardrepro.cli.options import (
    JSON_OPTION,
    PROGRESS_OPTION,
    REPLICATES_OR_NONE,
    SEED,
    emit,
    home_option,
    say,
)
from guardrepro.errors import InputError

if TYPE_CHECKING:
    from guardrepro.checks.report.guard_splits import GuardSplitTable
    from guardrepro.rundir.read import RunData


@click.command("guard-table", short_help="Several guards' runs of one cohort, side by side.")
@click.argument("runs", nargs=-1, required=True)
@click.option("--label", "labels", multiple=True, help="Column name, once per run, in order.")
@click.option("--splits", "splits", is_flag=True,
              help="RUNS are whole-split sources (run directories of a split cohort, "
              "predictions files, released-log directories; SPLIT=PATH to name the split): "
              "ToolSafe's accuracy / F1 / recall per guard on every split, the paper's rows "
              "beside (checks.report.guard_splits).")
@click.option("--mode", "modes", multiple=True, type=click.Choice(["strict", "loose", "exact"]),
              help="With --splits: label modes (repeatable; default all three, strict first).")
@click.option("--paper-guard", "paper_guards", multiple=True,
              help="With --splits: LABEL=NAME, the paper's guard a label is (repeatable).")
@click.option("--data-dir", type=click.Path(exists=True, file_okay=False, path_type=Path),
              default=None, help="With --splits: the TS-Bench files (default: --lock's copy).")
@click.option("--lock", type=click.Path(dir_okay=False, path_type=Path),
              default=Path("locks/toolsafe.toml"), show_default=True,
              help="With --splits: data lock to materialize when --data-dir is not given.")
@click.option("--replicates", default=QUICK_REPLICATES, show_default=True, type=REPLICATES_OR_NONE,
              help="Bootstrap replicates (0: no intervals).")
@click.option("--seed", default=DEFAULT_SEED, show_default=True, type=SEED)
@click.option("--out", "json_path", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="Also write the table as JSON here.")
@JSON_OPTION
@click.option("--figure", "figure_path", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="Write the figure as PNG.")
@PROGRESS_OPTION
@home_option
def guard_table(runs: tuple[str, ...], labels: tuple[str, ...], splits: bool,
                modes: tuple[str, ...], paper_guards: tuple[str, ...], data_dir: Path | None,
                lock: Path, replicates: int, seed: int, json_path: Path | None,
                as_json: bool, figure_path: Path | None, progress: bool,
                home: Path | None) -> None:
    """Accuracy, precision, recall, F1 and flip rates per guard over RUNS; with
    --splits, ToolSafe's figures per guard on every split."""
    if splits:
        _split_table(runs, labels, modes, paper_guards, data_dir, lock, home, replicates,
                     seed, json_path, as_json, figure_path, progress)
        return
    if modes or paper_guards or data_dir is not None:
        raise InputError("--mode, --paper-guard and --data-dir apply with --splits",
                         field="splits")
    from guardrepro.checks.report.guard_table import (
        format_guard_table,
        guard_table_figure,
    )
    from guardrepro.checks.report.guard_table import (
        guard_table as build,
    )
    from guardrepro.rundir.outputs import write_json_atomic

    table = build([Path(r) for r in runs], list(labels) or None, replicates=replicates, seed=seed,
                  progress=progress)
    emit(as_json, table.to_dict(), format_guard_table(table))
    if json_path is not None:
        write_json_atomic(json_path, table.to_dict())
        say(True)(f"wrote {json_path}")
    if figure_path is not None:
        guard_table_figure(table, figure_path)
        say(True)(f"wrote {figure_path}")


def split_document(sources: Sequence[str | RunData], labels: tuple[str, ...],
                   modes: tuple[str, ...],
                   paper_guards: tuple[str, ...], data_dir: Path | None, lock: Path,
                   home: Path | None, replicates: int, seed: int,
                   progress: bool) -> GuardSplitTable:
    """``checks.report.guard_splits.guard_split_table`` with the CLI's defaults (the
    shipped published tables, the lock's data when no --data-dir)."""
    from guardrepro.checks.parity.toolsafe_table import load_published_tables
    from guardrepro.checks.report.guard_splits import guard_split_table
    from guardrepro.cli.table_cmd import _published_path

    named: dict[str, str] = {}
    for item in paper_guards:
        label, sep, name = item.partition("=")
        if not sep or not label or not name:
            raise InputError(f"expected LABEL=NAME, got {item!r}", field="paper_guard")
        named[label] = name
    if data_dir is None:
        from guardrepro.artifacts.fetch import materialize

        data_dir = Path(materialize(lock, home))
    return guard_split_table(sources, data_dir, load_published_tables(_published_path(None)),
                             labels=list(labels) or None, paper_guards=named,
                             modes=modes or ("strict", "loose", "exact"),
                             replicates=replicates, seed=seed, progress=progress)


def _split_table(sources: tuple[str, ...], labels: tuple[str, ...], modes: tuple[str, ...],
                 paper_guards: tuple[str, ...], data_dir: Path | None, lock: Path,
                 home: Path | None, replicates: int, seed: int, json_path: Path | None,
                 as_json: bool, figure_path: Path | None, progress: bool) -> None:
    from guardrepro.checks.report.guard_splits import format_markdown, guard_split_figure
    from guardrepro.rundir.outputs import write_json_atomic

    doc = split_document(list(sources), labels, modes, paper_guards, data_dir, lock, home,
                         replicates, seed, progress)
    emit(as_json, doc.to_dict(), format_markdown(doc))
    if json_path is not None:
        write_json_atomic(json_path, doc.to_dict())
        say(as_json)(f"wrote {json_path}")
    if figure_path is not None:
        guard_split_figure(doc, figure_path)
        say(as_json)(f"wrote {figure_path}")
