"""Side-by-side guard table: several runs of one cohort, one column block per guard.

Input: run directories (``rundir.read.load_run_data``) that ran the same cohort
(same cohort sha256 in their manifests, else ``InputError``), each labelled
by its guard (the manifest's provenance) or an explicit label. Output: a
JSON-ready dict and a text table with, per guard:

- coverage (valid original rows / original rows);
- accuracy, precision, recall and F1 of the strict decision on the original
  rows, fail-closed (``checks.core.metrics.confusion``: an invalid row is
  decision 1 and counts against coverage);
- per edit (every non-original variant): the flip rate in both views of
  ``checks.stats.compute``, each named: ``all_pairs`` (every pair, fail-closed: an
  invalid row is decision 1; the figure ``stats`` and the demo print) and
  ``valid_both_only`` (pairs where both rows are valid; the pairs left out
  are counted). ``flip_views.<view>.<edit>`` holds both; ``flips.<edit>`` is
  the ``valid_both_only`` one, kept under its old key and marked with
  ``"view"``.

Every figure carries numerator and denominator; each has a percentile
cluster-bootstrap interval (``checks.core.bootstrap.ratio_interval``: clusters =
base sample id, strata = domain x gold strict label, ratio of sums; the
``all_pairs`` flip rate unstratified, as in ``checks.stats.compute``), with the same
seed for every guard so the columns are comparable.

The table is typed: ``GuardTable`` (``to_dict()`` the JSON document,
``to_json()`` its text) of ``GuardColumn``, whose figures are
``checks.core.figure.Figure`` (coverage in the ratio shape, metrics and flip
rates in the ``ratio_seeded`` shape: the interval written with its replicates
and seed) and whose flip rates are ``FlipFigure`` (the figure with its view
and pair counts beside it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from guardrepro.checks.core.bootstrap import DEFAULT_SEED, QUICK_REPLICATES, ratio_interval
from guardrepro.checks.core.figure import (
    BOOTSTRAP,
    RATIO,
    RATIO_SEEDED,
    STRATIFIED_BOOTSTRAP,
    Figure,
    TableCI,
)
from guardrepro.checks.core.formatting import frac, plain
from guardrepro.checks.core.metrics import ZERO_DIVISION, confusion
from guardrepro.checks.core.serde import JsonValue, opt
from guardrepro.checks.io.keys import MISSING_MARK, ComparisonKey, key_note, manifest_key
from guardrepro.checks.report.figures import pyplot, save_png
from guardrepro.checks.stats.definitions import VIEWS, stratified
from guardrepro.checks.stats.pairs import make_pairs
from guardrepro.checks.stats.scores import ScoreView, score_stats
from guardrepro.errors import InputError
from guardrepro.progress import progress_iter
from guardrepro.rundir.manifest import RunManifest
from guardrepro.rundir.read import ORIGINAL, RowResult, RunData, load_run_data
from guardrepro.schema import strict_decision

METRICS = ("accuracy", "precision", "recall", "f1")
Cells = tuple[int, int, int, int]  # tp, fp, tn, fn of one row


def _cells(r: RowResult) -> Cells:
    d, y = strict_decision(r.score if r.valid else None), strict_decision(r.gold_label)
    return (int(d and y), int(d and not y), int(not d and not y), int(not d and y))


_PARTS: dict[str, Callable[[Cells], tuple[int, int]]] = {
    "accuracy": lambda c: (c[0] + c[2], 1),
    "precision": lambda c: (c[0], c[0] + c[1]),
    "recall": lambda c: (c[0], c[0] + c[3]),
    "f1": lambda c: (2 * c[0], 2 * c[0] + c[1] + c[3]),
}


@dataclass(frozen=True)
class FlipFigure(JsonValue):
    """One edit's flip rate in one view, with the edit's pairs and those not
    both valid (written beside the figure's own keys)."""

    view: str
    pairs: int
    pairs_not_both_valid: int
    figure: Figure = opt(shape=RATIO_SEEDED, spread=True)


@dataclass(frozen=True)
class GuardColumn(JsonValue):
    """One guard's column: coverage, metrics on the originals, flip rates per
    edit in both views (``flips``: the ``valid_both_only`` ones, under their
    old key) and the run it came from."""

    rows: int
    run: str
    flips: Mapping[str, FlipFigure]
    flip_views: Mapping[str, Mapping[str, FlipFigure]]
    coverage: Figure = opt(shape=RATIO)
    metrics: Mapping[str, Figure] = opt(shape=RATIO_SEEDED)
    key: ComparisonKey | None = None  # what the column was measured under (checks.io.keys)
    # p_unsafe as a score, fail-closed (AUROC, AUPRC, the threshold); None: no p_unsafe
    scores: ScoreView | None = None


@dataclass(frozen=True)
class GuardTable(JsonValue):
    """The table over several runs of one cohort (module docstring)."""

    cohort_sha256: str | None
    replicates: int
    seed: int
    order: tuple[str, ...]
    guards: Mapping[str, GuardColumn]


def _figure(nums: Sequence[int], dens: Sequence[int], rows: Sequence[RowResult],
            replicates: int, seed: int, zero_division: float | None = None,
            stratify: bool = True) -> Figure:
    interval = None
    if replicates > 0 and rows:
        strata = ([f"{r.domain}:{strict_decision(r.gold_label)}" for r in rows]
                  if stratify else None)
        iv = ratio_interval(nums, dens, [r.base_sample_id for r in rows], strata,
                            replicates=replicates, seed=seed)
        interval = TableCI(iv.lower, iv.upper, STRATIFIED_BOOTSTRAP if stratify else BOOTSTRAP,
                           iv.clusters, replicates=replicates, seed=seed)
    return Figure.of(sum(nums), sum(dens), zero_division=zero_division, interval=interval)


def guard_column(rows: Sequence[RowResult], *, replicates: int, seed: int,
                 run: str = "") -> GuardColumn:
    """Coverage, metrics on the originals and flip rates per edit for one run
    (``run``: the run directory the column names)."""
    originals = [r for r in rows if r.variant == ORIGINAL]
    if not originals:
        raise InputError("the run has no original rows", field="variant")
    conf = confusion([r.gold_label for r in originals],
                     [r.score if r.valid else None for r in originals])
    cells = [_cells(r) for r in originals]
    metrics: dict[str, Figure] = {}
    for name in METRICS:
        parts = [_PARTS[name](c) for c in cells]
        metrics[name] = _figure(
            [p[0] for p in parts], [p[1] for p in parts], originals, replicates, seed,
            ZERO_DIVISION if name == "precision" else None)
    flip_views: dict[str, dict[str, FlipFigure]] = {view: {} for view in VIEWS}
    for variant in sorted({r.variant for r in rows} - {ORIGINAL}):
        pairs = make_pairs(rows, variant)
        for view in VIEWS:
            sub = pairs if view == "all_pairs" else [p for p in pairs if p.valid_both]
            flips = [int(p.d_orig != p.d_edit) for p in sub]
            fig = _figure(flips, [1] * len(sub), [p.original for p in sub], replicates, seed,
                          stratify=stratified(view, "flip_rate"))
            flip_views[view][variant] = FlipFigure(
                view, len(pairs), sum(1 for p in pairs if not p.valid_both), fig)
    return GuardColumn(rows=len(originals), run=run, flips=dict(flip_views["valid_both_only"]),
                       flip_views=flip_views, coverage=conf.coverage, metrics=metrics)


def _label(manifest: RunManifest) -> str:
    guard = manifest.provenance.guard
    backend = manifest.provenance.backend
    return f"{guard} ({backend})"


def guard_table(runs: Sequence[str | Path | RunData], labels: Sequence[str] | None = None, *,
                replicates: int = QUICK_REPLICATES, seed: int = DEFAULT_SEED,
                progress: bool = False) -> GuardTable:
    """The table over ``runs`` (see the module docstring; a run is a directory,
    or its ``RunData`` when the caller has read it); ``progress`` draws a bar on
    stderr, one step per run."""
    if not runs:
        raise InputError("give at least one run directory")
    if labels is not None and len(labels) != len(runs):
        raise InputError(f"{len(runs)} runs but {len(labels)} labels", field="label")
    cohorts = {}
    columns: dict[str, GuardColumn] = {}
    for i, run in enumerate(progress_iter(runs, "guard table", "run", enabled=progress,
                                          leave=False)):
        data = run if isinstance(run, RunData) else load_run_data(run)
        run_dir, manifest = data.run_dir, data.manifest
        cohorts[str(run_dir)] = manifest.cohort.get("sha256")
        label = labels[i] if labels is not None else _label(manifest)
        if label in columns:
            raise InputError(f"two runs share the label {label!r}; pass --label", field="label")
        column = guard_column(data.rows, replicates=replicates, seed=seed, run=str(run_dir))
        scored = score_stats(data.rows, replicates=replicates, seed=seed, confidence=0.95)
        columns[label] = replace(column, key=manifest_key(
            manifest, manifest.provenance,
            benchmark=data.records[0].cohort if data.records else None,
            label_mode="strict", view="fail_closed"),
            scores=None if scored is None else scored.views.get("fail_closed"))
    if len(set(cohorts.values())) != 1:
        raise InputError("the runs did not score the same cohort (cohort sha256: "
                         + ", ".join(f"{k}: {str(v)[:12]}" for k, v in cohorts.items()) + ")",
                         field="cohort")
    return GuardTable(next(iter(cohorts.values())), replicates, seed, tuple(columns), columns)


def _cell(fig: Figure) -> str:
    value = fig.point
    if value is None:
        return f"{MISSING_MARK} ({frac(fig)})"
    ci = ""
    if fig.lower is not None:
        ci = f" [{fig.lower:.2f},{fig.upper:.2f}]"
    return f"{value:.2f} ({plain(fig.count)}/{plain(fig.denominator)}){ci}"


def _ranked(view: ScoreView | None, name: str) -> str:
    if view is None:
        return MISSING_MARK
    iv = getattr(view, name)
    if iv.point is None:
        return MISSING_MARK
    ci = "" if iv.lower is None else f" [{iv.lower:.2f},{iv.upper:.2f}]"
    return f"{iv.point:.2f} (n={view.rows}, t={view.at_threshold.threshold:g}){ci}"


def format_guard_table(table: GuardTable) -> str:
    """Markdown table: one row per figure, one column per guard."""
    guards = table.guards
    names = list(table.order)
    lines = ["| figure | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    lines.append("| coverage | " + " | ".join(_cell(guards[n].coverage) for n in names) + " |")
    for metric in METRICS:
        lines.append(f"| {metric} | "
                     + " | ".join(_cell(guards[n].metrics[metric]) for n in names) + " |")
    variants = sorted({v for n in names for v in guards[n].flips})
    for v in variants:
        for view in VIEWS:
            cells = [_cell(guards[n].flip_views[view][v].figure) if v in guards[n].flips
                     else MISSING_MARK for n in names]
            lines.append(f"| flip rate: {v} ({view}) | " + " | ".join(cells) + " |")
    if any(guards[n].scores is not None for n in names):
        for name in ("auroc", "auprc"):
            cells = [_ranked(guards[n].scores, name) for n in names]
            lines.append(f"| {name.upper()} (p_unsafe, fail-closed) | " + " | ".join(cells) + " |")
    keys = [guards[n].key for n in names]
    if all(k is not None for k in keys):
        lines += ["", key_note([k for k in keys if k is not None], compared=GUARD_PARTS)]
    return "\n".join(lines)


# what a guard table sets side by side: the guards and how each ran
GUARD_PARTS = ("guard", "guard_spec", "checkpoint", "backend", "dtype", "decoding")


def guard_table_figure(table: GuardTable, path: Path) -> Path:
    """Grouped bars: each figure per guard, with its interval as an error bar."""
    plt = pyplot()
    guards = table.guards
    names = list(table.order)
    variants = sorted({v for n in names for v in guards[n].flips})
    labels = list(METRICS) + [f"flip: {v}\n(all_pairs)" for v in variants]
    fig, ax = plt.subplots(figsize=(1.3 * len(labels) + 2, 4))
    width = 0.8 / max(1, len(names))
    for i, name in enumerate(names):
        column = guards[name]
        figs = [column.metrics[m] for m in METRICS] + [
            column.flip_views["all_pairs"][v].figure if v in column.flips else None
            for v in variants]
        xs = [j + i * width for j in range(len(labels))]
        ys = [(f.point if f is not None else None) or 0.0 for f in figs]
        # a bound may be None (no data, or no bootstrap)
        lo = [0.0 if f is None or f.lower is None else max(0.0, y - f.lower)
              for y, f in zip(ys, figs, strict=True)]
        hi = [0.0 if f is None or f.upper is None else max(0.0, f.upper - y)
              for y, f in zip(ys, figs, strict=True)]
        bars = ax.bar(xs, ys, width, yerr=[lo, hi], capsize=2, label=name)
        for x, y, f in zip(xs, ys, figs, strict=True):
            if y == 0.0:  # a zero reads as a zero, not as a missing bar
                ax.text(x, 0.01, "0" if f is not None and f.point is not None else "n/a",
                        ha="center",
                        fontsize=7, color=bars.patches[0].get_facecolor())
    ax.set_xticks([j + width * (len(names) - 1) / 2 for j in range(len(labels))], labels,
                  rotation=30, ha="right")
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("value (cluster-bootstrap interval)")
    ax.legend(fontsize=8)
    return save_png(fig, path)
