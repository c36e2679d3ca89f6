"""Several guards on every split, side by side, with the paper's rows beside.

Input: whole-split sources (``checks.parity.toolsafe_table.load_source``: a run
directory of a split cohort, a predictions JSONL file, or a released-log
directory), each labelled by its guard (``--label``, else the source's own
guard name: the run manifest's guard, or the released-log folder name), the
data directory holding the three splits, and the published tables
(``checks/published/toolsafe-tables.toml``).

Output: a ``GuardSplitTable`` (``to_dict()`` the JSON document, ``to_json()``
its text) and its renderings:

- ``cells``: one ``SplitCell`` per (guard, split, mode, view), the
  ``toolsafe_table.TableRow`` (rows, kept, accuracy, F1, recall as
  ``Figure`` / ``Average`` with cluster-bootstrap intervals by interaction,
  the paper's figure and the difference) plus ``label``, written in one object;
- ``paper``: the paper's row (``PaperRow``) for each guard shown that the
  paper scored;
- a Markdown table per mode (strict first, as the paper's Table 3), one line
  per guard and view and the paper's line under each guard, columns split x
  (ACC, F1, Recall) in percent, splits in the paper's order;
- a figure: one panel per (mode, split), strict first, a bar per guard and
  figure with its interval, the paper's value as a black tick.

Which split a source covers: given as ``SPLIT=PATH``, else read from the
source: a released-log directory below ``guardian_test_logs/<split>/``, a
run or predictions file whose rows all belong to one split (by base sample
id). A source matching no split, or two sources for one (guard, split), is an
``InputError``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from guardrepro.bench.released import RELEASED_FILES
from guardrepro.bench.tsbench import BENCHMARK_FILES, BenchRow, load_benchmark
from guardrepro.checks.core.bootstrap import DEFAULT_SEED, QUICK_REPLICATES
from guardrepro.checks.core.serde import JsonValue, opt
from guardrepro.checks.io.keys import MISSING_MARK, key_note
from guardrepro.checks.parity.toolsafe_table import (
    PublishedTables,
    Source,
    TableRow,
    load_source,
    table_rows,
)
from guardrepro.checks.report.figures import pyplot, save_png
from guardrepro.checks.stats.toolsafe_metrics import FIGURES, MODES, VIEWS, check_mode
from guardrepro.errors import InputError
from guardrepro.progress import progress_iter
from guardrepro.rundir.read import RunData

SPLITS = ("agentharm", "asb", "agentdojo")  # the paper's column order
SPLIT_NAMES = {"agentharm": "AgentHarm-Traj", "asb": "ASB-Traj", "agentdojo": "AgentDojo-Traj"}
SHORT = {"accuracy": "ACC", "f1": "F1", "recall": "Recall"}
SPLIT_PARTS = ("benchmark", "data_sha256", "view", "guard", "guard_spec", "checkpoint",
               "backend", "dtype", "decoding")


@dataclass(frozen=True)
class SplitCell(JsonValue):
    """One guard's entry on one split, mode and view: its label and the
    ``TableRow``, written in one object."""

    label: str
    row: TableRow = opt(spread=True)


@dataclass(frozen=True)
class PaperRow(JsonValue):
    """The paper's figures (percent) of one guard on one split and mode."""

    guard: str
    label: str
    benchmark: str
    mode: str
    figures: Mapping[str, float] = opt(spread=True)


@dataclass(frozen=True)
class GuardSplitTable(JsonValue):
    """The document of the module docstring."""

    guards: tuple[str, ...]
    splits: tuple[str, ...]
    modes: tuple[str, ...]
    views: tuple[str, ...]
    replicates: int
    seed: int
    decimals: int
    cells: tuple[SplitCell, ...]
    paper: tuple[PaperRow, ...]


def _split_of(path: Path, source: Source | None, rows: Mapping[str, Sequence[BenchRow]]) -> str:
    """The split a source covers (module docstring)."""
    if source is None:  # a released-log directory: its folder names the split
        parts = path.resolve().parts
        for split in SPLITS:
            if split in parts:
                return split
        raise InputError("cannot tell which split this released-log directory holds; "
                         "pass SPLIT=PATH", file=str(path))
    ids = set(source.gold)
    for split, split_rows in rows.items():
        if ids and ids <= {r.base_sample_id for r in split_rows}:
            return split
    raise InputError("the source's rows are not all rows of one split "
                     f"({', '.join(rows)}); pass SPLIT=PATH", file=str(path))


def _check_split(split: str, rows: Mapping[str, Sequence[BenchRow]],
                 data_dir: str | Path) -> None:
    if split not in rows:
        raise InputError(f"the data directory has no {split} files", file=str(data_dir))


def _parse(arg: str | Path | RunData) -> tuple[str | None, Path]:
    if isinstance(arg, RunData):
        return None, arg.run_dir
    text = str(arg)
    head, sep, tail = text.partition("=")
    if sep and head in SPLITS:
        return head, Path(tail)
    return None, Path(text)


def _is_released(path: Path) -> bool:
    return path.is_dir() and all((path / name).is_file() for name in RELEASED_FILES)


def guard_split_table(sources: Sequence[str | Path | RunData], data_dir: str | Path,
                      published: PublishedTables, *, labels: Sequence[str] | None = None,
                      paper_guards: Mapping[str, str] | None = None,
                      modes: Sequence[str] = MODES, replicates: int = QUICK_REPLICATES,
                      seed: int = DEFAULT_SEED, progress: bool = False) -> GuardSplitTable:
    """The document of the module docstring. ``paper_guards``: label -> the
    paper's guard name, where the label alone does not say it. A source may be
    a run already read (``RunData``), which is not read again."""
    if not sources:
        raise InputError("give at least one source")
    if labels is not None and len(labels) != len(sources):
        raise InputError(f"{len(sources)} sources but {len(labels)} labels", field="label")
    modes = [m for m in MODES if m in modes]  # strict first
    for m in modes:
        check_mode(m)
    rows: dict[str, list[BenchRow]] = {}
    for name in SPLITS:  # a split none of whose files are there is not shown
        if any((Path(data_dir) / rel).is_file() for rel in BENCHMARK_FILES[name]):
            rows[name] = load_benchmark(data_dir, name)  # a partial or bad split: an error
    loaded: dict[tuple[str, str], tuple[Source, str]] = {}
    for i, arg in enumerate(progress_iter(sources, "guard table", "source",
                                          enabled=progress, leave=False)):
        given, path = _parse(arg)
        if not isinstance(arg, RunData) and _is_released(path):
            split = given or _split_of(path, None, rows)
            _check_split(split, rows, data_dir)
            source = load_source(path, rows[split], split)
        else:  # a run or predictions file: the split's rows are not needed to read it
            source = load_source(arg if isinstance(arg, RunData) else path, [],
                                 given or SPLITS[0])
            split = given or _split_of(path, source, rows)
            _check_split(split, rows, data_dir)
        label = labels[i] if labels is not None else (source.guard or path.name)
        if (label, split) in loaded:
            raise InputError(f"two sources for guard {label!r} on {split}; pass --label",
                             file=str(path), field="label")
        loaded[(label, split)] = (source, split)
    order = list(dict.fromkeys(label for label, _ in loaded))
    cells: list[SplitCell] = []
    for (label, split), (source, _) in loaded.items():
        paper = (paper_guards or {}).get(label)
        for mode in modes:
            for entry in table_rows(source, rows[split], split, mode, published,
                                    guard=paper, replicates=replicates, seed=seed):
                cells.append(SplitCell(label, entry))
    shown = [s for s in SPLITS if any(k[1] == s for k in loaded)]
    paper_rows = []
    for label in order:
        names = {c.row.paper_guard for c in cells if c.label == label and c.row.paper_guard}
        for name in sorted(names):
            for mode in modes:
                for split in shown:
                    figs = published.figures(name, split, mode)
                    if figs is not None:
                        paper_rows.append(PaperRow(name, label, split, mode, dict(figs)))
    return GuardSplitTable(tuple(order), tuple(shown), tuple(modes), tuple(VIEWS), replicates,
                           seed, published.decimals, tuple(cells), tuple(paper_rows))


def _cell(doc: GuardSplitTable, label: str, split: str, mode: str,
          view: str) -> TableRow | None:
    for c in doc.cells:
        r = c.row
        if (c.label, r.benchmark, r.mode, r.view) == (label, split, mode, view):
            return r
    return None


def _pct(value: float | None, d: int) -> str:
    return MISSING_MARK if value is None else f"{100 * value:.{d}f}"


def format_markdown(doc: GuardSplitTable) -> str:
    """One Markdown table per mode (strict first): guards by split x figure."""
    d, splits = doc.decimals, doc.splits
    out: list[str] = []
    for mode in doc.modes:
        head = ["guard", "view"] + [f"{SPLIT_NAMES[s]} {SHORT[f]}" for s in splits
                                    for f in FIGURES]
        lines = [f"### {mode} mode (percent; upstream drops unparsed rows, fail_closed "
                 "counts them unsafe)", "", "| " + " | ".join(head) + " |",
                 "|" + "---|" * len(head)]
        for label in doc.guards:
            for view in doc.views:
                vals = []
                for s in splits:
                    c = _cell(doc, label, s, mode, view)
                    vals += [MISSING_MARK if c is None else _pct(c.value(f), d) for f in FIGURES]
                lines.append(f"| {label} | {view} | " + " | ".join(vals) + " |")
            for name in sorted({p.guard for p in doc.paper if p.label == label}):
                vals = []
                for s in splits:
                    p = next((x for x in doc.paper if x.guard == name
                              and x.benchmark == s and x.mode == mode), None)
                    vals += [MISSING_MARK if p is None else f"{p.figures[f]:.{d}f}"
                             for f in FIGURES]
                lines.append(f"| paper: {name} | | " + " | ".join(vals) + " |")
        keys = [c.row.key for c in doc.cells if c.row.mode == mode and c.row.key is not None]
        if keys:  # the splits, guards and views are what the table sets side by side
            lines += ["", key_note(keys, compared=SPLIT_PARTS)]
        out.append("\n".join(lines))
    return "\n\n".join(out)


def guard_split_figure(doc: GuardSplitTable, path: Path, view: str = "upstream") -> Path:
    """Panels (mode x split, strict first): bars per guard with intervals, the
    paper's value as a black tick."""
    plt = pyplot()
    modes, splits, guards = doc.modes, doc.splits, doc.guards
    fig, axes = plt.subplots(len(modes), len(splits), squeeze=False,
                             figsize=(4.2 * len(splits), 3.2 * len(modes)))
    width = 0.8 / max(1, len(guards))
    for i, mode in enumerate(modes):
        for j, split in enumerate(splits):
            ax = axes[i][j]
            for k, label in enumerate(guards):
                c = _cell(doc, label, split, mode, view)
                if c is None:
                    continue
                xs = [n + k * width for n in range(len(FIGURES))]
                figs = [c.figures[f] for f in FIGURES]
                ys = [g.point or 0.0 for g in figs]
                lo = [0.0 if g.lower is None else max(0.0, y - g.lower)
                      for y, g in zip(ys, figs, strict=True)]
                hi = [0.0 if g.upper is None else max(0.0, g.upper - y)
                      for y, g in zip(ys, figs, strict=True)]
                ax.bar(xs, ys, width, yerr=[lo, hi], capsize=2, label=label)
                if c.published is not None:
                    ax.scatter(xs, [c.published[f] / 100 for f in FIGURES], marker="_",
                               s=200, color="black", zorder=3)
            ax.set_xticks([n + width * (len(guards) - 1) / 2 for n in range(len(FIGURES))],
                          [SHORT[f] for f in FIGURES])
            ax.set_ylim(0, 1.05)
            ax.set_title(f"{SPLIT_NAMES[split]}, {mode}", fontsize=9)
    axes[0][0].legend(fontsize=7)
    fig.suptitle(f"guards on every split ({view} view; black tick: paper)", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    return save_png(fig, path)
