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
``guard_table.png`` and a side-by-side table (``checks.report.guard_table``).
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

import dataclasses
import importlib.util
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from guardrepro.checks.core.bootstrap import DEFAULT_REPLICATES, DEFAULT_SEED
from guardrepro.checks.core.figure import Figure
from guardrepro.checks.core.formatting import fixed, frac_value, value_counts
from guardrepro.checks.parity.gate_types import GateResult
from guardrepro.checks.report.charts import (
    CAPTIONS,
    CONFUSION_PNG,
    FLIP_PNG,
    MARGIN_PNG,
    DomainBar,
    FlipBar,
    domain_bars,
    flip_bars,
    margin_groups,
    plot_flip_rates,
    plot_margin_histogram,
    plot_score_confusion,
)
from guardrepro.checks.stats.cache import cache_key, cached, keyed
from guardrepro.checks.stats.compute import (
    STATISTICS,
    VIEWS,
    StatsResult,
    compute_stats,
    fmt_num,
)
from guardrepro.limits import read_json_file
from guardrepro.rundir.outputs import GATE_JSON, stats_path, write_json_atomic
from guardrepro.rundir.read import (
    RunData,
    load_run_data,
    read_records_file,
    variant_order,
)
from guardrepro.rundir.records import write_atomic

if TYPE_CHECKING:
    from guardrepro.checks.report.guard_splits import GuardSplitTable

GUARD_TABLE_PNG = "guard_table.png"
GUARD_TABLE_JSON = "guard_table.json"
GUARD_SPLITS_PNG = "guard_splits.png"
GUARD_SPLITS_JSON = "guard_splits.json"


def load_or_compute_stats(run_dir: str | Path, *, recompute: bool = False,
                          replicates: int | None = None, seed: int | None = None,
                          cohort: str | Path | None = None,
                          run: RunData | None = None,
                          progress: bool = False) -> StatsResult:
    """stats.json of the run when its ``cache_key`` matches (``checks.stats.cache``:
    schema and fingerprint, records, manifest and cohort hashes, and the
    settings asked; None asks for none in particular), else computed (the
    defaults for a None setting) and written with its key; ``recompute``
    always computes. ``run``: the run (``RunData``) when the caller has already
    read it (its hashes are the cache's); ``progress``: the interval engine's
    bar on stderr."""
    path = stats_path(Path(run_dir))
    if run is None:
        run = load_run_data(run_dir, cohort)
    asked = cache_key(run, replicates=replicates, seed=seed, confidence=None)
    hit = None if recompute else cached(path, asked)
    if hit is not None:
        return hit
    reps = DEFAULT_REPLICATES if replicates is None else replicates
    seed = DEFAULT_SEED if seed is None else seed
    result = compute_stats(run.rows, replicates=reps, seed=seed, progress=progress,
                           expected_source=run.expected_source)
    result = keyed(result.with_extra(run_dir=str(run_dir)), run)
    write_json_atomic(path, result.to_dict())
    return result


@dataclass(frozen=True)
class ReportInputs:
    """What both reports of a run are made of, read once per verb: the run
    (``RunData``), its statistics (stats.json, computed when stale) and its gate
    (gate.json, or None)."""

    data: RunData
    stats: StatsResult
    gate: GateResult | None


def report_inputs(run_dir: str | Path, *, recompute: bool = False,
                  replicates: int | None = None, seed: int | None = None,
                  cohort: str | Path | None = None, progress: bool = False,
                  data: RunData | None = None) -> ReportInputs:
    """Read (or compute) what ``build_report`` and ``report.html.build_html`` show."""
    data = data if data is not None else load_run_data(run_dir, cohort)
    stats = load_or_compute_stats(run_dir, recompute=recompute, replicates=replicates,
                                  seed=seed, cohort=cohort, run=data, progress=progress)
    return ReportInputs(data, stats, load_gate(run_dir))


def in_cohort_order(stats: StatsResult, variants: Sequence[str]) -> StatsResult:
    """``stats`` with its variants, edits and placebo corrections in cohort order
    (``variants``; names the cohort lacks keep their order, after it), so a report
    from a fresh computation and one from stats.json (sorted keys) are the same."""
    def order(mapping: Mapping[str, Any]) -> dict[str, Any]:
        keys = [v for v in variants if v in mapping]
        return {k: mapping[k] for k in keys + [k for k in mapping if k not in keys]}

    extras = stats.extras
    if extras.placebo_corrected:
        extras = dataclasses.replace(extras, placebo_corrected=order(extras.placebo_corrected))
    return dataclasses.replace(stats, variants=order(stats.variants),
                               edits=order(stats.edits), extras=extras)


def md_text(value: object) -> str:
    """``value`` as inert Markdown text on one line: no HTML (``<``, ``>``, ``&``
    become entities), no link, image, code span, strong emphasis or table cell
    syntax (``[ ] ` * | \\`` are backslash-escaped)."""
    text = " ".join(str(value).split())
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return re.sub(r"([\\`*\[\]|])", r"\\\1", text)


def load_gate(run_dir: str | Path) -> GateResult | None:
    """The run directory's gate.json as a ``GateResult``, or None without one."""
    path = Path(run_dir) / GATE_JSON
    if not path.is_file():
        return None
    return GateResult.from_dict(read_json_file(path), file=str(path))


@dataclass(frozen=True)
class Table:
    """One report table, rendered as Markdown or HTML from the same cells."""

    key: str
    title: str
    header: tuple[str, ...]
    rows: Sequence[tuple[str, ...]]


def _fv(r: Figure) -> str:
    return frac_value(r)


def _vc(r: Figure) -> str:
    return value_counts(r)


def report_tables(stats: StatsResult, gate: GateResult | None,
                  variants: Sequence[str] | None = None) -> list[Table]:
    """The report's tables (gate checks, variants, paired statistics) from the
    checks' results; ``variants`` gives the row order (cohort order, original first)."""
    tables = []
    if gate is not None:
        tables.append(Table("gate", "Parity gate", ("check", "figure", "tested", "threshold",
                                                    "result"),
                            [("rows_present (reported)",
                              value_counts(gate.figures.rows_present),
                              f"missing {gate.missing_rows}, truncated {gate.truncated_rows}",
                              "-", "reported")]
                            + [(c.name, value_counts(gate.figures.figure(c.figure)),
                                str(c.tested), str(c.threshold), "pass" if c.passed else "FAIL")
                               for c in gate.checks]))
    order = [v for v in (variants or []) if v in stats.variants]
    order += [v for v in stats.variants if v not in order]
    rows: list[tuple[str, ...]] = []
    for v in order:
        s = stats.variants[v]
        m = s.summary.metrics
        mcc = fixed(m.mcc.point) + (" (0/0)" if m.mcc.denominator == 0 else "")
        rows.append((v, _vc(s.coverage), _vc(m.accuracy), _vc(m.f1),
                     fixed(m.balanced_accuracy.point), mcc))
    tables.append(Table("variants", "Variants", ("variant", "coverage", "accuracy", "F1",
                                                 "balanced acc.", "MCC"), rows))
    edits = [v for v in order if v in stats.edits]
    edits += [e for e in stats.edits if e not in edits]
    if edits:
        tables.append(flip_summary(stats, edits))
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


def _flip_cell(st: Figure) -> str:
    ci = "" if st.lower is None else f" [{st.lower:.3f}, {st.upper:.3f}]"
    point = "-" if st.point is None else f"{st.point:.3f}"
    return f"{point}{ci}, n = {st.denominator}"


def flip_summary(stats: StatsResult, edits: Sequence[str]) -> Table:
    """One row per edit: the flips in both views (rate, interval, n), then the
    direction counts (all_pairs); the full table follows it."""
    rows = []
    for e in edits:
        views = stats.edits[e].views
        a, v = views["all_pairs"], views["valid_both_only"]
        s2u, u2s = a.statistics["safe_to_unsafe"], a.statistics["unsafe_to_safe"]
        rows.append((e, f"{a.flip_rate.count}/{a.flip_rate.denominator}",
                     _flip_cell(a.flip_rate), f"{v.flip_rate.count}/{v.flip_rate.denominator}",
                     _flip_cell(v.flip_rate), f"{s2u.count}/{s2u.denominator}",
                     f"{u2s.count}/{u2s.denominator}"))
    conf = f"{stats.settings.confidence:g}"
    return Table("flip_summary", "Flips per edit", (
        "edit", "flips (all_pairs)", f"rate [{conf} interval], n (all_pairs)",
        "flips (valid_both_only)", f"rate [{conf} interval], n (valid_both_only)",
        "safe_to_unsafe (all_pairs)", "unsafe_to_safe (all_pairs)"), rows)


def _md_table(table: Table) -> list[str]:
    """The table in Markdown; the first column (a variant, edit or check name from
    the run's data) is made inert text, the figures have HTML and pipes escaped."""
    def cell(i: int, text: str) -> str:
        if i == 0:
            return md_text(text)
        text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        return text.replace("|", "\\|")

    return ["| " + " | ".join(table.header) + " |", "|" + "---|" * len(table.header),
            *("| " + " | ".join(cell(i, c) for i, c in enumerate(row)) + " |"
              for row in table.rows)]


def _gate_lines(gate: GateResult, table: Table) -> list[str]:
    lines = ["## Parity gate", "", f"**{gate.verdict}**", "", *_md_table(table)]
    lines += ["", f"Exact-score agreement (jointly valid rows): "
              f"{frac_value(gate.figures.exact_agreement)}",
              f"Causal interpretation: `{gate.causal_interpretation}`", ""]
    differ = [d for d in gate.disagreement_rows if not d.both_invalid]
    neither = [d for d in gate.disagreement_rows if d.both_invalid]
    for title, group in (("Disagreeing rows:", differ),
                         ("Rows invalid on both sides (no decision to compare; the gate's "
                          "fail-closed rule counts them against agreement):", neither)):
        if group:
            lines += [title, ""]
            lines += [f"- {md_text(d.label())}, {md_text(d.domain)}, gold {d.gold_label}:"
                      f" reference {d.reference_score}, local {d.local_score} "
                      f"\\[{md_text(d.local_status)}, {md_text(d.reason)}\\]" for d in group]
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
            lines.append(f"- {md_text(e)}: {eff}{ci} ({_fv(a.edit_flips)} vs"
                         f" {_fv(a.placebo_flips)})")
    if extras.run_to_run:
        r = extras.run_to_run
        d = r.strict_disagreement["all_pairs"]
        lines += ["", f"Extras: run-to-run strict flips (repeat vs original, all_pairs): "
                  f"{d.count}/{d.denominator}; exact-score: "
                  f"{_fv(r.exact_score_disagreement_valid_both)}"]
    return lines


def render_markdown(run_id: str, stats: StatsResult, gate: GateResult | None,
                    figures: Sequence[str], variants: Sequence[str] | None = None,
                    figures_note: str | None = None) -> str:
    stats = in_cohort_order(stats, variants or [])
    lines = [f"# guardrepro report: {md_text(run_id)}", ""]
    lines.append(f"Expected rows: {stats.rows.expected} "
                 f"({stats.expected_source}); by status: "
                 + ", ".join(f"{k} {v}" for k, v in stats.rows.by_status.items()))
    b = stats.settings.to_dict()
    lines += ["", f"Intervals: {b['method']}, {b['replicates']} replicates, seed {b['seed']}, "
              f"confidence {b['confidence']}, batches of {b['batch']}, clusters "
              f"{b['clusters']}; flip rate stratified by domain:gold in valid_both_only, "
              "deltas stratified in both views, the rest unstratified.", ""]
    tables = {t.key: t for t in report_tables(stats, gate, variants)}
    if gate is not None:
        lines += _gate_lines(gate, tables["gate"])
    lines += ["## Variants", "", *_md_table(tables["variants"])]
    if "flips" in tables:
        lines += ["", "## Flips per edit", "", *_md_table(tables["flip_summary"]), "",
                  "### Paired statistics vs original (every statistic, both views)", "",
                  *_md_table(tables["flips"])]
        lines += ["", "Extras: exact-score changes among pairs valid on both sides:", ""]
        for e, block in stats.edits.items():
            lines.append(f"- {md_text(e)}: {_fv(block.exact_score.changed_valid_both)}")
    lines += _extras_lines(stats)
    lines += ["", "## Figures", ""]
    for f in figures:
        lines += [f"![{f}]({f})", "", f"*{CAPTIONS[f]}*" if f in CAPTIONS else "", ""]
    if figures_note:
        lines.append(figures_note)
    lines.append("")
    return "\n".join(lines)


def figures_available() -> bool:
    """Whether matplotlib (the ``report`` extra) can be imported."""
    return importlib.util.find_spec("matplotlib") is not None


FIGURES_NOTE = "figures skipped: install the report extra (pip install 'guardrepro[report]')"


def build_report(run_dir: str | Path, *, recompute: bool = False,
                 replicates: int | None = None, seed: int | None = None,
                 cohort: str | Path | None = None,
                 other_guards: Sequence[str | Path] = (), progress: bool = False,
                 split_table: GuardSplitTable | None = None,
                 inputs: ReportInputs | None = None,
                 drift_reference: str | Path | None = None) -> Path:
    """Write report.md and the figures into ``run_dir``; returns report.md.

    ``other_guards``: runs of other guards on the same cohort; the report then
    adds ``guard_table.png`` / ``guard_table.json`` (``checks.report.guard_table``).
    ``progress``: bars on stderr while statistics and the guard table are
    computed. ``split_table``: a ``checks.report.guard_splits`` table (guards on
    every split), written as ``guard_splits.json`` with ``guard_splits.png``.
    ``replicates``/``seed``: None reuses stats.json whatever its settings
    (``load_or_compute_stats``); the defaults when something is computed.
    ``inputs``: the run, its stats and gate as the caller read them
    (``report_inputs``), else read here. ``drift_reference``: a run (or
    records file) whose p_unsafe the drift scatter sets against this run's."""
    run_dir = Path(run_dir)
    if inputs is None:
        inputs = report_inputs(run_dir, recompute=recompute, replicates=replicates, seed=seed,
                               cohort=cohort, progress=progress)
    run, manifest, gate = inputs.data, inputs.data.manifest, inputs.gate
    stats = in_cohort_order(inputs.stats, run.variants)
    rows = run.rows
    figures: list[str] = []
    if figures_available():
        figures.append(plot_flip_rates(stats, run_dir / FLIP_PNG, rows).name)
        if gate is not None:
            figures.append(plot_score_confusion(gate, run_dir / CONFUSION_PNG).name)
        figures.append(plot_margin_histogram(rows, gate, run_dir / MARGIN_PNG).name)
    text = render_markdown(manifest.run_id, stats, gate, figures,
                           variants=variant_order([r.variant for r in rows]),
                           figures_note=None if figures else FIGURES_NOTE)
    text += score_report(run, stats.scores, run_dir, drift_reference, figures_available())
    if other_guards:
        from guardrepro.checks.report.guard_table import (
            format_guard_table,
            guard_table,
            guard_table_figure,
        )

        table = guard_table([run, *map(Path, other_guards)],
                            replicates=DEFAULT_REPLICATES if replicates is None else replicates,
                            seed=DEFAULT_SEED if seed is None else seed, progress=progress)
        write_json_atomic(run_dir / GUARD_TABLE_JSON, table.to_dict())
        text += "\n## Guards side by side\n\n" + format_guard_table(table) + "\n"
        if figures_available():
            guard_table_figure(table, run_dir / GUARD_TABLE_PNG)
            text += f"\n![{GUARD_TABLE_PNG}]({GUARD_TABLE_PNG})\n"
    if split_table is not None:
        from guardrepro.checks.report.guard_splits import format_markdown, guard_split_figure

        write_json_atomic(run_dir / GUARD_SPLITS_JSON, split_table.to_dict())
        text += "\n## Guards on every split\n\n" + format_markdown(split_table) + "\n"
        if figures_available():
            guard_split_figure(split_table, run_dir / GUARD_SPLITS_PNG)
            text += f"\n![{GUARD_SPLITS_PNG}]({GUARD_SPLITS_PNG})\n"
    path = run_dir / "report.md"
    write_atomic(path, text)
    return path


__all__ = ["CAPTIONS", "CONFUSION_PNG", "FIGURES_NOTE", "FLIP_PNG", "MARGIN_PNG", "DomainBar",
           "FlipBar", "ReportInputs", "Table", "build_report", "domain_bars", "figures_available",
           "flip_bars",
           "flip_summary", "load_gate", "load_or_compute_stats", "margin_groups",
           "plot_flip_rates", "plot_margin_histogram", "plot_score_confusion",
           "render_markdown", "report_inputs", "report_tables"]


def score_report(run: RunData, scores: Any, run_dir: Path,
                 drift_reference: str | Path | None, figures: bool) -> str:
    """The scored-classifier section and, against ``drift_reference``, the
    drift scatter (``checks.report.score_figures``)."""
    from guardrepro.checks.report.score_figures import drift_section, score_section

    text = score_section(run.rows, scores, run_dir, name=run.manifest.run_id, figures=figures)
    if drift_reference is not None:
        ref = read_records_file(drift_reference)
        text += drift_section(str(drift_reference), ref.records,
                              {run.manifest.run_id: run.records}, run_dir, figures=figures)
    return text
