"""The run report: ``report.md`` and PNG figures built from the checks' JSON.

Input: a run directory (``records.jsonl``, ``manifest.json``), its
``stats.json`` (computed and written first when missing) and, when present,
its ``gate.json``.

Output (in the run directory): ``flip_rates.png`` (strict flip rates per
edit in both views with their bootstrap intervals, and per edit x domain as
counts),
``score_confusion.png`` (reference vs local scores, only with gate.json),
``margin_hist.png`` (decision-margin histogram split by agreement with the
reference when gate.json exists, else by whether the row's edit pair flipped)
and ``report.md`` linking them; with other guards' runs of the same cohort,
``guard_table.png`` and a side-by-side table (``checks.guard_table``).
Figures use matplotlib's Agg backend; without matplotlib (the ``report``
extra) the tables are still written and the report says which extra adds
the figures. Variants are listed in cohort order with ``original`` first.
Every file is written atomically.

The plotting functions take the checks' typed results (``StatsResult``,
``GateResult``) and rows, and draw what the data functions beside them return
(``flip_bars``, ``domain_bars``, ``margin_groups``, the gate's
``ScoreConfusion``); the notebooks call the same functions, so a notebook
reproduces the same figures from the same data.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from guardrepro.checks.bootstrap import DEFAULT_REPLICATES, DEFAULT_SEED
from guardrepro.checks.figures import pyplot, save_png
from guardrepro.checks.formatting import fixed, frac_value
from guardrepro.checks.gate_types import GateResult
from guardrepro.checks.metrics import Ratio, strict_decision
from guardrepro.checks.pairs import ORIGINAL
from guardrepro.checks.runio import (
    RowResult,
    RunRows,
    load_manifest,
    load_run,
    variant_order,
    write_json_atomic,
)
from guardrepro.checks.stats import SCHEMA as STATS_SCHEMA
from guardrepro.checks.stats import (
    STATISTICS,
    VIEWS,
    Statistic,
    StatsResult,
    compute_stats,
    fmt_num,
)
from guardrepro.errors import InputError
from guardrepro.run.records import write_atomic

FLIP_PNG = "flip_rates.png"
CONFUSION_PNG = "score_confusion.png"
MARGIN_PNG = "margin_hist.png"
GUARD_TABLE_PNG = "guard_table.png"
GUARD_TABLE_JSON = "guard_table.json"
GUARD_SPLITS_PNG = "guard_splits.png"
GUARD_SPLITS_JSON = "guard_splits.json"


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise InputError(f"invalid JSON: {exc}", file=str(path)) from exc
    return data


def load_or_compute_stats(run_dir: str | Path, *, recompute: bool = False,
                          replicates: int = DEFAULT_REPLICATES, seed: int = DEFAULT_SEED,
                          cohort: str | Path | None = None,
                          run: RunRows | None = None, progress: bool = False) -> StatsResult:
    """stats.json of the run, computed (and written) when missing, older than
    the run's records (a resumed run), or asked.
    ``run``: the run's rows when the caller has already loaded them;
    ``progress``: the interval engine's bar on stderr while computing."""
    path = Path(run_dir) / "stats.json"
    records = Path(run_dir) / "records.jsonl"
    stale = (path.is_file() and records.is_file()
             and records.stat().st_mtime_ns > path.stat().st_mtime_ns)
    if path.is_file() and not recompute and not stale:
        data = _read_json(path)
        if data.get("schema") == STATS_SCHEMA:
            return StatsResult.from_json(data)
    if run is None:
        run = load_run(run_dir, cohort)
    result = compute_stats(run.rows, replicates=replicates, seed=seed, progress=progress,
                           expected_source=run.expected_source).with_extra(run_dir=str(run_dir))
    write_json_atomic(path, result.to_json())
    return result


def load_gate(run_dir: str | Path) -> GateResult | None:
    """The run directory's gate.json as a ``GateResult``, or None without one."""
    path = Path(run_dir) / "gate.json"
    if not path.is_file():
        return None
    return GateResult.from_json(_read_json(path), file=str(path))


def _err(s: Statistic) -> tuple[float, float]:
    rate = s.point
    if rate is None or s.lower is None or s.upper is None:
        return 0.0, 0.0
    return max(rate - s.lower, 0.0), max(s.upper - rate, 0.0)


@dataclass(frozen=True)
class FlipBar:
    """One bar of the flip-rate panel: an edit's flip rate in one view."""

    edit: str
    view: str
    count: int
    denominator: int
    point: float | None
    lower: float | None
    upper: float | None


@dataclass(frozen=True)
class DomainBar:
    """One bar of the by-domain panel: an edit's flips in one domain (all pairs)."""

    edit: str
    domain: str
    count: int
    denominator: int

    @property
    def rate(self) -> float:
        return self.count / self.denominator if self.denominator else 0.0


def flip_bars(stats: StatsResult) -> list[FlipBar]:
    """The flip-rate panel's data: every edit in both views, edits in stats order."""
    return [FlipBar(e, view, f.count, f.denominator, f.point, f.lower, f.upper)
            for e, block in stats.edits.items() for view in VIEWS
            for f in (block.views[view].flip_rate,)]


def domain_bars(stats: StatsResult) -> list[DomainBar]:
    """The by-domain panel's data: every edit x domain it has pairs in (all pairs)."""
    return [DomainBar(e, d, c.flip_rate.count, c.flip_rate.denominator)
            for e, block in stats.edits.items()
            for d, c in block.views["all_pairs"].counts.by_domain.items()]


def plot_flip_rates(stats: StatsResult, path: str | Path) -> Path:
    """Flip rate per edit in both views with their intervals (all pairs:
    unstratified; valid both: stratified by domain:gold), and per edit x domain
    (all pairs, counts only); bars are labelled count/denominator."""
    plt = pyplot()
    edits = list(stats.edits)
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2), gridspec_kw={"width_ratios": [1, 2]})
    if not edits:
        for ax in axes:
            ax.text(0.5, 0.5, "no edited variants in this run", ha="center", va="center")
            ax.set_axis_off()
        return save_png(fig, Path(path))
    ax = axes[0]
    colors = {"all_pairs": "tab:red", "valid_both_only": "tab:blue"}
    tops = []
    for bar in flip_bars(stats):
        i, j = edits.index(bar.edit), VIEWS.index(bar.view)
        rate = bar.point or 0.0
        lo, hi = _err(stats.edits[bar.edit].views[bar.view].flip_rate)
        x = i + (j - 0.5) * 0.38
        ax.bar(x, rate, width=0.36, color=colors[bar.view], yerr=[[lo], [hi]], capsize=3,
               label=bar.view if i == 0 else None)
        ax.text(x, rate + hi + 0.01, f"{bar.count}/{bar.denominator}", ha="center", fontsize=7)
        tops.append(rate + hi)
    ax.set_ylim(0, max(tops) * 1.25 + 0.05)
    ax.set_xticks(range(len(edits)), edits, rotation=20, fontsize=8)
    ax.set_ylabel("strict flip rate vs original")
    ax.set_title(f"flips by edit ({stats.settings.confidence:g} bootstrap interval)", fontsize=9)
    ax.legend(fontsize=7)
    ax = axes[1]
    bars = domain_bars(stats)
    domains = sorted({b.domain for b in bars})
    width = 0.8 / max(len(edits), 1)
    labelled: set[str] = set()
    for b in bars:
        i, k = edits.index(b.edit), domains.index(b.domain)
        ax.bar(k + (i - (len(edits) - 1) / 2) * width, b.rate, width=width * 0.95,
               color=f"C{i}", label=None if b.edit in labelled else b.edit)
        labelled.add(b.edit)
    ax.set_xticks(range(len(domains)), domains, fontsize=8)
    ax.set_title("flips by domain, all pairs (fail-closed)", fontsize=9)
    ax.legend(fontsize=7)
    return save_png(fig, Path(path))


def plot_score_confusion(gate: GateResult, path: str | Path) -> Path:
    """Counts of reference score (rows) by local score (columns)."""
    plt = pyplot()
    conf = gate.confusion
    matrix = [list(r) for r in conf.matrix]
    fig, ax = plt.subplots(figsize=(5.5, 4.2))
    ax.imshow(matrix, cmap="Blues")
    for i, row in enumerate(matrix):
        for j, n in enumerate(row):
            ax.text(j, i, str(n), ha="center", va="center", fontsize=10,
                    color="white" if n > max(map(max, matrix)) / 2 else "black")
    ax.set_xticks(range(len(conf.column_labels)), conf.column_labels)
    ax.set_yticks(range(len(conf.row_labels)), conf.row_labels)
    ax.set_xlabel(conf.columns)
    ax.set_ylabel(conf.rows)
    ax.set_title(f"{gate.spec.name}: reference vs local", fontsize=9)
    return save_png(fig, Path(path))


def margin_groups(rows: Sequence[RowResult], gate: GateResult | None,
                  ) -> tuple[str, dict[str, list[float]], int]:
    """The margin histogram's data: (split description, group -> margins in
    row order, rows without a margin)."""
    groups: dict[str, list[float]] = {}
    no_margin = 0
    if gate is not None:
        agree = {r.row_id: r.strict_agree for r in gate.rows}
        for r in rows:
            if r.row_id not in agree:
                continue
            if r.decision_margin is None:
                no_margin += 1
                continue
            key = "agrees with reference" if agree[r.row_id] else "disagrees with reference"
            groups.setdefault(key, []).append(r.decision_margin)
        return "original rows by strict agreement with the reference", groups, no_margin
    originals = {r.base_sample_id: r for r in rows if r.variant == ORIGINAL}
    for r in rows:
        o = originals.get(r.base_sample_id)
        if r.variant == ORIGINAL or o is None:
            continue
        if r.decision_margin is None:
            no_margin += 1
            continue
        flipped = strict_decision(r.score) != strict_decision(o.score)
        groups.setdefault("flipped" if flipped else "not flipped", []).append(r.decision_margin)
    return "edited rows by strict flip vs their original", groups, no_margin


def plot_margin_histogram(rows: Sequence[RowResult], gate: GateResult | None,
                          path: str | Path) -> Path:
    plt = pyplot()
    title, groups, no_margin = margin_groups(rows, gate)
    fig, ax = plt.subplots(figsize=(6.5, 4))
    values = [v for vs in groups.values() for v in vs]
    if values:
        lo, hi = min(values), max(values)
        bins = 20 if hi > lo else 1
        for i, (name, vs) in enumerate(sorted(groups.items())):
            ax.hist(vs, bins=bins, range=(lo, hi if hi > lo else lo + 1), alpha=0.6,
                    color=f"C{i}", label=f"{name} (n={len(vs)})")
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no decision margins", ha="center", va="center")
    ax.set_xlabel("decision-token margin (logit)")
    ax.set_ylabel("rows")
    ax.set_title(f"{title}; {no_margin} row(s) without a margin", fontsize=9)
    return save_png(fig, Path(path))


@dataclass(frozen=True)
class Table:
    """One report table, rendered as Markdown or HTML from the same cells."""

    key: str
    title: str
    header: tuple[str, ...]
    rows: Sequence[tuple[str, ...]]


def _fv(r: Ratio) -> str:
    return frac_value(r.to_dict())


def report_tables(stats: StatsResult, gate: GateResult | None,
                  variants: Sequence[str] | None = None) -> list[Table]:
    """The report's tables (gate checks, variants, paired statistics) from the
    checks' results; ``variants`` gives the row order (cohort order, original first)."""
    tables = []
    if gate is not None:
        tables.append(Table("gate", "Parity gate", ("check", "figure", "tested", "threshold",
                                                    "result"),
                            [("rows_present (reported)",
                              frac_value(gate.figures.rows_present.to_json()),
                              f"missing {gate.missing_rows}", "-", "reported")]
                            + [(c.name, frac_value(gate.figures.figure(c.figure).to_json()),
                                str(c.tested), str(c.threshold), "pass" if c.passed else "FAIL")
                               for c in gate.checks]))
    order = [v for v in (variants or []) if v in stats.variants]
    order += [v for v in stats.variants if v not in order]
    rows: list[tuple[str, ...]] = []
    for v in order:
        s = stats.variants[v]
        m = s.summary.metrics
        mcc = fixed(m.mcc.value) + (" (0/0)" if m.mcc.denominator == 0 else "")
        rows.append((v, _fv(s.coverage), _fv(m.accuracy), _fv(m.f1),
                     fixed(m.balanced_accuracy.value), mcc))
    tables.append(Table("variants", "Variants", ("variant", "coverage", "accuracy", "F1",
                                                 "balanced acc.", "MCC"), rows))
    edits = [v for v in order if v in stats.edits]
    edits += [e for e in stats.edits if e not in edits]
    if edits:
        rows = []
        for e in edits:
            for view in VIEWS:
                for name in STATISTICS:
                    st = stats.edits[e].views[view].statistics[name]
                    ci = "-" if st.lower is None else (
                        f"[{fmt_num(st.lower)}, {fmt_num(st.upper)}]")
                    rows.append((e, view, name, f"{st.count}/{st.denominator}",
                                 fmt_num(st.point), ci, str(st.clusters)))
        tables.append(Table("flips", "Paired statistics vs original", (
            "edit", "view", "statistic", "count", "point", "interval", "clusters"), rows))
    return tables


def _md_table(table: Table) -> list[str]:
    return ["| " + " | ".join(table.header) + " |", "|" + "---|" * len(table.header),
            *("| " + " | ".join(row) + " |" for row in table.rows)]


def _gate_lines(gate: GateResult, table: Table) -> list[str]:
    lines = ["## Parity gate", "", f"**{gate.verdict}**", "", *_md_table(table)]
    lines += ["", f"Exact-score agreement (jointly valid rows): "
              f"{frac_value(gate.figures.exact_agreement.to_json())}",
              f"Causal interpretation: `{gate.causal_interpretation}`", ""]
    if gate.disagreement_rows:
        lines += ["Disagreeing rows:", ""]
        for d in gate.disagreement_rows:
            lines.append(f"- {d.row_id} ({d.domain}, gold {d.gold_label}): reference "
                         f"{d.reference_score}, local {d.local_score} "
                         f"[{d.local_status}, {d.reason}]")
        lines.append("")
    return lines


def _extras_lines(stats: StatsResult) -> list[str]:
    lines: list[str] = []
    extras = stats.extras
    if extras.placebo_corrected:
        lines += ["", "Extras: placebo-corrected flip rate (edit minus placebo, all pairs):", ""]
        for e, p in extras.placebo_corrected.items():
            a = p.views["all_pairs"]
            iv = a.interval
            ci = "" if iv is None or iv.lower is None or iv.upper is None else (
                f" [{iv.lower:.4f}, {iv.upper:.4f}]")
            eff = "undefined" if a.effect is None else f"{a.effect:+.4f}"
            lines.append(f"- {e}: {eff}{ci} ({_fv(a.edit_flips)} vs {_fv(a.placebo_flips)})")
    if extras.run_to_run:
        r = extras.run_to_run
        d = r.strict_disagreement["all_pairs"]
        lines += ["", f"Extras: run-to-run strict disagreement (repeat vs original): "
                  f"{d.count}/{d.denominator}; exact-score: "
                  f"{_fv(r.exact_score_disagreement_valid_both)}"]
    return lines


def render_markdown(run_id: str, stats: StatsResult, gate: GateResult | None,
                    figures: Sequence[str], variants: Sequence[str] | None = None,
                    figures_note: str | None = None) -> str:
    lines = [f"# guardrepro report: {run_id}", ""]
    lines.append(f"Expected rows: {stats.rows.expected} "
                 f"({stats.expected_source}); by status: "
                 + ", ".join(f"{k} {v}" for k, v in stats.rows.by_status.items()))
    b = stats.settings.to_json()
    lines += ["", f"Intervals: {b['method']}, {b['replicates']} replicates, seed {b['seed']}, "
              f"confidence {b['confidence']}, batches of {b['batch']}, clusters "
              f"{b['clusters']}; flip rate stratified by domain:gold in valid_both_only, "
              "deltas stratified in both views, the rest unstratified.", ""]
    tables = {t.key: t for t in report_tables(stats, gate, variants)}
    if gate is not None:
        lines += _gate_lines(gate, tables["gate"])
    lines += ["## Variants", "", *_md_table(tables["variants"])]
    if "flips" in tables:
        lines += ["", "## Paired statistics vs original", "", *_md_table(tables["flips"])]
        lines += ["", "Extras: exact-score changes among pairs valid on both sides:", ""]
        for e, block in stats.edits.items():
            lines.append(f"- {e}: {_fv(block.exact_score.changed_valid_both)}")
    lines += _extras_lines(stats)
    lines += ["", "## Figures", ""] + [f"![{f}]({f})" for f in figures]
    if figures_note:
        lines.append(figures_note)
    lines.append("")
    return "\n".join(lines)


def figures_available() -> bool:
    """Whether matplotlib (the ``report`` extra) can be imported."""
    return importlib.util.find_spec("matplotlib") is not None


FIGURES_NOTE = "figures skipped: install the report extra (pip install 'guardrepro[report]')"


def build_report(run_dir: str | Path, *, recompute: bool = False,
                 replicates: int = DEFAULT_REPLICATES, seed: int = DEFAULT_SEED,
                 cohort: str | Path | None = None,
                 other_guards: Sequence[str | Path] = (), progress: bool = False,
                 split_table: Mapping[str, Any] | None = None) -> Path:
    """Write report.md and the figures into ``run_dir``; returns report.md.

    ``other_guards``: runs of other guards on the same cohort; the report then
    adds ``guard_table.png`` / ``guard_table.json`` (``checks.guard_table``).
    ``progress``: bars on stderr while statistics and the guard table are
    computed. ``split_table``: a ``checks.guard_splits`` document (guards on
    every split), written as ``guard_splits.json`` with ``guard_splits.png``."""
    run_dir = Path(run_dir)
    manifest = load_manifest(run_dir)
    run = load_run(run_dir, cohort)
    stats = load_or_compute_stats(run_dir, recompute=recompute, replicates=replicates,
                                  seed=seed, cohort=cohort, run=run, progress=progress)
    gate = load_gate(run_dir)
    rows = run.rows
    figures: list[str] = []
    if figures_available():
        figures.append(plot_flip_rates(stats, run_dir / FLIP_PNG).name)
        if gate is not None:
            figures.append(plot_score_confusion(gate, run_dir / CONFUSION_PNG).name)
        figures.append(plot_margin_histogram(rows, gate, run_dir / MARGIN_PNG).name)
    text = render_markdown(manifest.run_id, stats, gate, figures,
                           variants=variant_order([r.variant for r in rows]),
                           figures_note=None if figures else FIGURES_NOTE)
    if other_guards:
        from guardrepro.checks.guard_table import (
            format_guard_table,
            guard_table,
            guard_table_figure,
        )

        table = guard_table([run_dir, *map(Path, other_guards)], replicates=replicates,
                            seed=seed, progress=progress)
        write_json_atomic(run_dir / GUARD_TABLE_JSON, table)
        text += "\n## Guards side by side\n\n" + format_guard_table(table) + "\n"
        if figures_available():
            guard_table_figure(table, run_dir / GUARD_TABLE_PNG)
            text += f"\n![{GUARD_TABLE_PNG}]({GUARD_TABLE_PNG})\n"
    if split_table is not None:
        from guardrepro.checks.guard_splits import format_markdown, guard_split_figure

        write_json_atomic(run_dir / GUARD_SPLITS_JSON, split_table)
        text += "\n## Guards on every split\n\n" + format_markdown(split_table) + "\n"
        if figures_available():
            guard_split_figure(split_table, run_dir / GUARD_SPLITS_PNG)
            text += f"\n![{GUARD_SPLITS_PNG}]({GUARD_SPLITS_PNG})\n"
    path = run_dir / "report.md"
    write_atomic(path, text)
    return path
