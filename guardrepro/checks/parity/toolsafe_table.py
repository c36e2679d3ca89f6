"""ToolSafe's table for one split: sources -> per-row predictions -> both views.

Input: the split's benchmark rows (``bench.tsbench.load_benchmark``, upstream
order) and one or more sources, each one of

- a run directory (``rundir.read.load_run_data``): the ``original`` rows of a run
  of the split's cohort (``cohorts/<benchmark>-all.toml``);
- a predictions JSONL file (``checks.io.predictions``), ``original`` rows;
- a released-log directory holding ``preds.json``, ``labels.json`` and
  ``meta_data.json`` (ToolSafe's ``guardian_test_logs/.../<guard>/``), aligned
  with the rows by ``bench.released.align_released`` (every check there).

Output: a ``ToolsafeTable`` (``to_dict()`` the document, ``to_json()`` its
text) whose ``rows`` hold one ``TableRow`` per (source, view): ``source``,
``benchmark``, ``mode``, ``view``, ``rows``, ``kept``, the figures
(``checks.stats.toolsafe_metrics``: accuracy, F1, recall as ``Figure``, a
macro average as ``Average``, with their intervals; their values in [0, 1]
are also written at the top of the entry), the paper's figure
(``published``: percent, or null) and the difference in percentage points,
and in strict mode a released directory's own ``metrics_strict.json`` as
stored (``released_metrics``); and a text rendering of it.

Invariants: a source is read strictly; a row the source holds that is not a
row of the split, or whose gold label differs from the split's, is an
``InputError`` naming the source and the row; a split row the source lacks
is a row without a valid prediction (dropped in ``upstream``, unsafe in
``fail_closed``) and is counted, never hidden (``missing``). A run's row
that reached ``max_new_tokens`` before its verdict was read (status
``truncated``) is an unparsed row like any other (``invalid``: dropped in
``upstream``, as the evaluator drops unparsed rows, unsafe in
``fail_closed``) and is also counted on its own (``truncated``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from guardrepro.bench.released import RELEASED_FILES, align_released
from guardrepro.bench.tsbench import BenchRow, read_json_strict
from guardrepro.checks.core.bootstrap import DEFAULT_SEED, QUICK_REPLICATES
from guardrepro.checks.core.figure import VALUE_BOUNDS, Average, Figure
from guardrepro.checks.core.serde import JsonValue, opt
from guardrepro.checks.io.keys import MISSING_MARK, ComparisonKey, key_note, run_key
from guardrepro.checks.stats.scores import (
    DEFAULT_THRESHOLD,
    ScoreView,
    score_view,
    scored_view,
)
from guardrepro.checks.stats.toolsafe_metrics import (
    FIGURES,
    VIEWS,
    SplitBootstrap,
    SplitPrediction,
    check_mode,
    view_metrics,
)
from guardrepro.errors import InputError
from guardrepro.schema import canonical_json, sha256_text
from guardrepro.spec import Table, expect_kind, load_toml

if TYPE_CHECKING:
    from guardrepro.rundir.read import RunData, RunRows
    from guardrepro.schema import Provenance

PUBLISHED_SPEC = Path("checks/published/toolsafe-tables.toml")
RELEASED_GUARD = "TS-Guard"  # the guard of ToolSafe's released logs
METRICS_FILE = "metrics_strict.json"  # the evaluator's own strict-mode figures, if present


@dataclass(frozen=True)
class Source:
    """One source's predictions, keyed by base sample id."""

    path: str
    kind: str  # run | predictions | released
    guard: str | None  # the guard's name where the source says it
    preds: Mapping[str, float | None]
    gold: Mapping[str, float]
    metrics_strict: Mapping[str, Any] | None = None  # a released dir's metrics_strict.json
    truncated: frozenset[str] = frozenset()  # rows whose record is ``truncated`` (a run's)
    provenance: Provenance | None = None  # a run's (its manifest's)
    guard_spec: Mapping[str, Any] | None = None  # a run's manifest's guard spec record
    data_sha256: str | None = None  # a run's cohort file
    p_unsafe: Mapping[str, float] = field(default_factory=dict)  # a run's valid rows' scores


def _released(path: Path, rows: Sequence[BenchRow], benchmark: str) -> Source:
    preds_file, labels_file, meta_file = (path / name for name in RELEASED_FILES)
    released = align_released(preds_file, labels_file, meta_file, rows, benchmark=benchmark)
    preds = {r.base_sample_id: r.pred for r in released.rows}
    gold = {r.base_sample_id: r.gold_label for r in released.rows}
    metrics = None
    if (path / METRICS_FILE).is_file():  # shown as stored, never used for a figure
        metrics = read_json_strict(path / METRICS_FILE)
        if not isinstance(metrics, dict):
            raise InputError("expected a JSON object", file=str(path / METRICS_FILE))
    return Source(str(path), "released", path.name or RELEASED_GUARD, preds, gold, metrics)


def load_source(path: str | Path | RunData, rows: Sequence[BenchRow], benchmark: str) -> Source:
    """Read one source (module docstring); a run already read (``RunData``) is
    not read again."""
    from guardrepro.checks.io.predictions import load_rows
    from guardrepro.rundir.read import ORIGINAL, RunData

    run: RunRows | RunData
    if isinstance(path, RunData):
        run, path = path, path.run_dir
    else:
        path = Path(path)
        if path.is_dir() and all((path / name).is_file() for name in RELEASED_FILES):
            return _released(path, rows, benchmark)
        run = load_rows(path)
    guard = None
    kind = "predictions"
    if isinstance(run, RunData):  # a run directory: its manifest names the guard
        kind, guard = "run", run.manifest.provenance.guard
    preds: dict[str, float | None] = {}
    gold: dict[str, float] = {}
    truncated = set()
    p_unsafe: dict[str, float] = {}
    for r in run.rows:
        if r.variant != ORIGINAL:
            raise InputError(f"row {r.row_id!r} has variant {r.variant!r}: a split's rows are "
                             f"all {ORIGINAL!r} (build cohorts/<benchmark>-all.toml)",
                             file=str(path), field="variant")
        gold[r.base_sample_id] = r.gold_label
        if r.present:  # a cohort row the run has no record for stays missing
            preds[r.base_sample_id] = r.score if r.valid else None
            if r.valid and r.p_unsafe is not None:
                p_unsafe[r.base_sample_id] = r.p_unsafe
        if r.status == "truncated":
            truncated.add(r.base_sample_id)
    if not isinstance(run, RunData):
        return Source(str(path), kind, guard, preds, gold, truncated=frozenset(truncated))
    return Source(str(path), kind, guard, preds, gold, truncated=frozenset(truncated),
                  provenance=run.manifest.provenance, guard_spec=run.manifest.guard_spec,
                  data_sha256=run.manifest.cohort.get("sha256"), p_unsafe=p_unsafe)


def split_predictions(source: Source, rows: Sequence[BenchRow]) -> list[SplitPrediction]:
    """One prediction per split row, in split order (None where the source has
    no valid prediction or no row)."""
    by_id = {row.base_sample_id: row for row in rows}
    for base, gold in source.gold.items():
        row = by_id.get(base)
        if row is None:
            raise InputError(f"row {base!r} is not a row of the split", file=source.path,
                             field="base_sample_id")
        if gold != row.score:
            raise InputError(f"row {base!r} has gold {gold!r}, the split says {row.score!r}",
                             file=source.path, field="gold_label")
    return [SplitPrediction(row.base_sample_id, row.interaction_id, row.score,
                            source.preds.get(row.base_sample_id)) for row in rows]


@dataclass(frozen=True)
class PublishedTables:
    decimals: int
    aliases: Mapping[str, str]
    rows: Mapping[tuple[str, str, str], Mapping[str, float]]  # (guard, benchmark, mode)

    def guard_name(self, guard: str | None) -> str | None:
        if guard is None:
            return None
        return self.aliases.get(guard, guard)

    def figures(self, guard: str | None, benchmark: str,
                mode: str) -> Mapping[str, float] | None:
        name = self.guard_name(guard)
        return None if name is None else self.rows.get((name, benchmark, mode))


def load_published_tables(path: str | Path) -> PublishedTables:
    """Read a published-tables spec (``checks/published/toolsafe-tables.toml``) strictly."""
    file = str(path)
    data = load_toml(Path(path), "published tables")
    expect_kind(data, "published_tables", file=file)
    top = Table(data, file)
    top.take("name", str)
    top.take("description", str)
    decimals = top.take("decimals", int)
    aliases = top.take("aliases", dict, {})
    items = top.take("row", list)
    top.done()
    rows: dict[tuple[str, str, str], dict[str, float]] = {}
    for i, item in enumerate(items):
        t = Table(item, file, f"row[{i}]")
        key = (t.take("guard", str), t.take("benchmark", str), t.take("mode", str))
        check_mode(key[2])
        values = {name: float(t.take(name, (int, float))) for name in FIGURES}
        t.done()
        if key in rows:
            raise t.fail(None, f"second row for {key}")
        rows[key] = values
    return PublishedTables(decimals, {str(k): str(v) for k, v in aliases.items()}, rows)


@dataclass(frozen=True)
class TableRow(JsonValue):
    """One (source, view) entry of the table (module docstring); each figure's
    value is written again under its own name beside ``figures``."""

    source: str
    kind: str
    guard: str | None
    benchmark: str
    mode: str
    view: str
    rows: int
    kept: int
    missing: int
    invalid: int
    paper_guard: str | None
    interval: SplitBootstrap | None
    published: Mapping[str, float] | None
    released_metrics: Mapping[str, Any] | None
    difference_pp: Mapping[str, float | None] | None
    figures: Mapping[str, Figure | Average] = opt(shape=VALUE_BOUNDS)
    # of the invalid rows, those whose generation reached max_new_tokens (a run's records)
    truncated: int = 0
    key: ComparisonKey | None = None  # what the row was measured under (checks.io.keys)
    # the guard as a scored classifier (a run whose records carry p_unsafe; else None)
    scores: ScoreView | None = None

    def value(self, name: str) -> float | None:
        """The point of the figure named ``name`` (``FIGURES``)."""
        return self.figures[name].point

    def _dump(self, out: dict[str, Any]) -> dict[str, Any]:
        return {**out, **{name: self.value(name) for name in FIGURES}}

    @classmethod
    def _load(cls, data: Mapping[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in data.items() if k not in FIGURES}


@dataclass(frozen=True)
class ToolsafeTable(JsonValue):
    """Every source's two views on one split (``toolsafe_table``)."""

    benchmark: str
    mode: str
    split_rows: int
    replicates: int
    seed: int
    decimals: int
    rows: tuple[TableRow, ...]


def _difference(figs: Mapping[str, Figure | Average],
                paper: Mapping[str, float]) -> dict[str, float | None]:
    """Each figure minus the paper's, in percentage points (None: undefined)."""
    out: dict[str, float | None] = {}
    for name in FIGURES:
        point = figs[name].point
        out[name] = None if point is None else round(100 * point - paper[name], 6)
    return out


def _key(source: Source, benchmark: str, split: str, mode: str, view: str) -> ComparisonKey:
    """A row's key: the split it scored (sha256 of its rows' ids and gold scores),
    and a run's provenance, or a released log's guard name alone."""
    key = run_key(source.provenance, benchmark=benchmark, data_sha256=split,
                  label_mode=mode, view=view, guard_spec=source.guard_spec)
    if source.provenance is None and source.guard is not None:
        key = replace(key, guard=f"{source.guard} ({source.kind})")
    return key


def split_scores(source: Source, preds: Sequence[SplitPrediction], view: str, *,
                 replicates: int, seed: int) -> ScoreView | None:
    """AUROC, AUPRC, ECE and the figures at ``DEFAULT_THRESHOLD`` of the
    source's ``p_unsafe`` on the split, label strict gold (gold != 0),
    clusters = interaction (None: the source has no ``p_unsafe``). A split row
    without a score is dropped in ``upstream`` and scored 1.0 in
    ``fail_closed`` (``checks.stats.scores``, the same rules)."""
    if not source.p_unsafe:
        return None
    rows = scored_view(((source.p_unsafe.get(p.row_id), p.gold, p.interaction_id, p.pred)
                        for p in preds), view)
    if not rows.scores:
        return None
    settings = {"replicates": replicates, "seed": seed, "confidence": 0.95}
    return score_view(rows, DEFAULT_THRESHOLD, settings)


def table_rows(source: Source, rows: Sequence[BenchRow], benchmark: str, mode: str,
               published: PublishedTables, *, guard: str | None = None,
               replicates: int, seed: int) -> list[TableRow]:
    """The two views of one source (module docstring)."""
    preds = split_predictions(source, rows)
    split = sha256_text(canonical_json([[r.base_sample_id, r.score] for r in rows]))
    paper_guard = published.guard_name(guard or source.guard)
    paper = published.figures(paper_guard, benchmark, mode)
    out = []
    for view in VIEWS:
        m = view_metrics(preds, mode, view, replicates=replicates, seed=seed)
        figs = {name: m.figure(name) for name in FIGURES}
        difference = None if paper is None else _difference(figs, paper)
        out.append(TableRow(
            source=source.path, kind=source.kind, guard=source.guard, benchmark=benchmark,
            mode=mode, view=view, rows=m.rows, kept=m.kept,
            missing=sum(p.row_id not in source.preds for p in preds),
            invalid=sum(p.pred is None for p in preds),
            truncated=sum(p.row_id in source.truncated for p in preds), paper_guard=paper_guard,
            key=_key(source, benchmark, split, mode, view),
            interval=m.interval, published=None if paper is None else dict(paper),
            released_metrics=(dict(source.metrics_strict) if mode == "strict"
                              and source.metrics_strict is not None else None),
            difference_pp=difference, figures=figs,
            scores=split_scores(source, preds, view, replicates=replicates, seed=seed)))
    return out


def toolsafe_table(sources: Sequence[str | Path], rows: Sequence[BenchRow], benchmark: str,
                   mode: str, published: PublishedTables, *, guard: str | None = None,
                   replicates: int = QUICK_REPLICATES, seed: int = DEFAULT_SEED) -> ToolsafeTable:
    """Every source's two views (module docstring)."""
    if not sources:
        raise InputError("give at least one source")
    check_mode(mode)
    tables = published
    out: list[TableRow] = []
    for path in sources:
        source = load_source(path, rows, benchmark)
        out.extend(table_rows(source, rows, benchmark, mode, tables, guard=guard,
                              replicates=replicates, seed=seed))
    return ToolsafeTable(benchmark, mode, len(rows), replicates, seed, tables.decimals,
                         tuple(out))


def _pct(value: float | None, decimals: int) -> str:
    return MISSING_MARK if value is None else f"{100 * value:.{decimals}f}"


def _score_line(v: ScoreView) -> str:
    """AUROC and AUPRC of p_unsafe with their intervals, n and the threshold."""
    def shown(iv: Any) -> str:
        if iv.point is None:
            return MISSING_MARK
        return f"{iv.point:.3f}" + ("" if iv.lower is None else
                                    f" [{iv.lower:.3f}, {iv.upper:.3f}]")
    at = v.at_threshold
    return (f"p_unsafe  AUROC {shown(v.auroc)}  AUPRC {shown(v.auprc)}  n {v.rows} "
            f"(no score {v.dropped})  at threshold {at.threshold:g}: "
            f"TP {at.tp} FP {at.fp} TN {at.tn} FN {at.fn}")


def format_table(doc: ToolsafeTable) -> str:
    """One line per (source, view): figures in percent with their interval,
    the paper's figure and the difference."""
    d = doc.decimals
    lines = [f"ToolSafe table: {doc.benchmark}, {doc.mode} mode, "
             f"{doc.split_rows} rows (intervals: cluster bootstrap by interaction, "
             f"{doc.replicates} replicates, seed {doc.seed})"]
    for e in doc.rows:
        lines.append(f"{e.source}  [{e.view}]  rows {e.rows}  kept {e.kept}  "
                     f"invalid/missing {e.invalid}/{e.missing}"
                     + (f" (truncated {e.truncated})" if e.truncated else ""))
        for name in FIGURES:
            fig = e.figures[name]
            shown = f"  {name:<9} {_pct(fig.point, d):>6}"
            if fig.interval is not None:
                shown += f"  [{_pct(fig.lower, d)}, {_pct(fig.upper, d)}]"
            if e.published is not None and e.difference_pp is not None:
                diff = e.difference_pp[name]
                shown += (f"  paper {e.published[name]:.{d}f}"
                          f"  diff {MISSING_MARK if diff is None else f'{diff:+.{d}f}'}")
            lines.append(shown)
        if e.scores is not None:
            lines.append("  " + _score_line(e.scores))
        if e.released_metrics is not None:
            lines.append(f"  {METRICS_FILE} (as stored): "
                         f"{json.dumps(e.released_metrics, sort_keys=True)}")
    keys = [e.key for e in doc.rows if e.key is not None]
    if keys:
        lines.append(key_note(keys, compared=SOURCE_PARTS))
    return "\n".join(lines)


# what a table sets side by side: its sources (and each source's two views)
SOURCE_PARTS = ("view", "guard", "guard_spec", "checkpoint", "backend", "dtype", "decoding")
