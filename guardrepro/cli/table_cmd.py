"""``guardrepro table SOURCE... --benchmark B --mode M [--json]``: ToolSafe's table.

Input: one or more SOURCEs of one split (a run directory of the split's
cohort, a predictions JSONL file, a released-log directory with
``preds.json``, ``labels.json`` and ``meta_data.json``, or the word
``released``: the pinned released TS-Guard logs in the data directory), the benchmark
(``agentharm``, ``asb``, ``agentdojo``), the label mode (``strict``,
``loose``, ``exact``), the split's rows from ``--data-dir`` (default: the
``--lock``'s verified copy in ``--home``; fetch it first). Output: per source
and view (``upstream``, ``fail_closed``) rows, rows kept, accuracy, F1 and
recall with cluster-bootstrap intervals by interaction, the paper's figure
beside each and the difference (``checks.parity.toolsafe_table``); ``--json`` puts
one document on stdout (``{"rows": [...]}``), the text on stderr.
"""

from __future__ import annotations

from pathlib import Path

import click

from guardrepro.checks.core.bootstrap import DEFAULT_SEED, QUICK_REPLICATES
from guardrepro.cli.options import (
    JSON_OPTION,
    REPLICATES_OR_NONE,
    SEED,
    emit,
    home_option,
    say,
)

DEFAULT_PUBLISHED = Path("checks/published/toolsafe-tables.toml")
RELEASED = "released"


def _published_path(path: Path | None) -> Path:
    if path is not None:
        return path
    if DEFAULT_PUBLISHED.is_file():
        return DEFAULT_PUBLISHED
    from guardrepro.demo import repo_root

    return repo_root() / DEFAULT_PUBLISHED


def _source_path(source: str, data_dir: Path, benchmark: str) -> Path:
    """A SOURCE argument as a path: ``released`` names the released logs below
    the data directory; anything else must exist."""
    from guardrepro.bench.released import released_dir
    from guardrepro.errors import InputError

    path = Path(source)
    if source == RELEASED and not path.exists():
        path = data_dir / released_dir(benchmark)
    if not path.exists():
        raise InputError("source not found (a run directory, a predictions file, a "
                         f"released-log directory or '{RELEASED}')", file=str(path))
    return path


@click.command("table", short_help="ToolSafe's accuracy / F1 / recall on a whole split.")
@click.argument("sources", nargs=-1, required=True)
@click.option("--benchmark", required=True,
              type=click.Choice(["agentharm", "asb", "agentdojo"]))
@click.option("--mode", default="strict", show_default=True,
              type=click.Choice(["strict", "loose", "exact"]))
@click.option("--data-dir", type=click.Path(exists=True, file_okay=False, path_type=Path),
              default=None, help="Directory holding the split's TS-Bench files at their "
              "ToolSafe paths (default: --lock's fetched copy).")
@click.option("--lock", type=click.Path(dir_okay=False, path_type=Path),
              default=Path("locks/toolsafe.toml"), show_default=True,
              help="Data lock to materialize when --data-dir is not given.")
@click.option("--published", "published_path",
              type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help=f"Published tables (default: {DEFAULT_PUBLISHED}).")
@click.option("--published-guard", default=None,
              help="The paper's guard to compare with (default: the source's guard: "
              "TS-Guard for released logs, a run's guard through the spec's aliases).")
@click.option("--replicates", default=QUICK_REPLICATES, show_default=True, type=REPLICATES_OR_NONE,
              help="Bootstrap replicates (0: no intervals).")
@click.option("--seed", default=DEFAULT_SEED, show_default=True, type=SEED)
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the JSON document here (atomically).")
@JSON_OPTION
@home_option
def table(sources: tuple[str, ...], benchmark: str, mode: str, data_dir: Path | None,
          lock: Path, published_path: Path | None, published_guard: str | None,
          replicates: int, seed: int, out: Path | None, as_json: bool,
          home: Path | None) -> None:
    """Accuracy, F1 and recall of each SOURCE on the whole split, both views."""
    from guardrepro.bench.tsbench import load_benchmark
    from guardrepro.checks.parity.toolsafe_table import (
        format_table,
        load_published_tables,
        toolsafe_table,
    )
    from guardrepro.rundir.outputs import write_json_atomic

    if data_dir is None:
        from guardrepro.artifacts.fetch import materialize

        data_dir = Path(materialize(lock, home))
    rows = load_benchmark(data_dir, benchmark)
    paths = [_source_path(source, data_dir, benchmark) for source in sources]
    published = load_published_tables(_published_path(published_path))
    doc = toolsafe_table(paths, rows, benchmark, mode, published,
                         guard=published_guard, replicates=replicates, seed=seed)
    emit(as_json, doc.to_dict(), format_table(doc))
    if out is not None:
        write_json_atomic(out, doc.to_dict())
        say(as_json)(f"wrote {out}")
