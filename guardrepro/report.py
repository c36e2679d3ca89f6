"""The run report: ``report.md`` and PNG figures built from the checks' JSON.

Input: a run directory (``records.jsonl``, ``manifest.json``), its
``stats.json`` (computed and written first when missing) and, when present,
its ``gate.json``.

Output (in the run directory): ``flip_rates.png`` (strict flip rates with
stratified 95% bootstrap intervals, by edit and by edit x domain),
``score_confusion.png`` (reference vs local scores, only with gate.json),
``margin_hist.png`` (decision-margin histogram split by agreement with the
reference when gate.json exists, else by whether the row's edit pair flipped)
and ``report.md`` linking them. Figures use matplotlib's Agg backend; without
matplotlib (the ``report`` extra) the tables are still written and the report
says which extra adds the figures. Variants are listed in cohort order with
``original`` first. Every file is written atomically.

The plotting functions take the JSON objects (and rows) and are what the
notebooks call, so a notebook reproduces the same figures.
"""

from __future__ import annotations

import importlib.util
import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from guardrepro.cache import atomic_write_bytes
from guardrepro.checks.bootstrap import DEFAULT_DRAW_ORDER, DEFAULT_REPLICATES, DEFAULT_SEED
from guardrepro.checks.metrics import strict_decision
from guardrepro.checks.runio import (
    RowResult,
    RunRows,
    load_manifest,
    load_run,
    variant_order,
    write_json_atomic,
)
from guardrepro.checks.stats import ORIGINAL, compute_stats
from guardrepro.errors import DependencyMissingError, InputError
from guardrepro.records import write_atomic

FLIP_PNG = "flip_rates.png"
CONFUSION_PNG = "score_confusion.png"
MARGIN_PNG = "margin_hist.png"


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise DependencyMissingError(
            "figures need matplotlib: pip install 'guardrepro[report]'") from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path) -> Path:
    """Render ``fig`` as PNG and write it with the package's one atomic writer."""
    buffer = io.BytesIO()
    try:
        fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    finally:
        fig.clf()
        _pyplot().close(fig)
    atomic_write_bytes(path, buffer.getvalue())
    return path


def load_or_compute_stats(run_dir: str | Path, *, recompute: bool = False,
                          replicates: int = DEFAULT_REPLICATES, seed: int = DEFAULT_SEED,
                          draw_order: str = DEFAULT_DRAW_ORDER,
                          cohort: str | Path | None = None,
                          run: RunRows | None = None) -> dict[str, Any]:
    """stats.json of the run, computed (and written) when missing, older than
    the run's records (a resumed run), or asked.
    ``run``: the run's rows when the caller has already loaded them."""
    path = Path(run_dir) / "stats.json"
    records = Path(run_dir) / "records.jsonl"
    stale = (path.is_file() and records.is_file()
             and records.stat().st_mtime_ns > path.stat().st_mtime_ns)
    if path.is_file() and not recompute and not stale:
        try:
            data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise InputError(f"invalid JSON: {exc}", file=str(path)) from exc
        return data
    if run is None:
        run = load_run(run_dir, cohort)
    data = compute_stats(run.rows, replicates=replicates, seed=seed, progress=True,
                         expected_source=run.expected_source, draw_order=draw_order)
    data["run_dir"] = str(run_dir)
    write_json_atomic(path, data)
    return data


def load_gate(run_dir: str | Path) -> dict[str, Any] | None:
    path = Path(run_dir) / "gate.json"
    if not path.is_file():
        return None
    try:
        data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise InputError(f"invalid JSON: {exc}", file=str(path)) from exc
    return data


def _err(rate: float | None, iv: Mapping[str, Any] | None) -> tuple[float, float]:
    if rate is None or not iv or iv.get("low") is None:
        return 0.0, 0.0
    return max(rate - iv["low"], 0.0), max(iv["high"] - rate, 0.0)


def plot_flip_rates(stats: Mapping[str, Any], path: str | Path) -> Path:
    """Flip rate (all pairs, fail-closed) per edit and per edit x domain, with
    stratified intervals; bars are labelled numerator/denominator."""
    plt = _pyplot()
    edits = list(stats["edits"])
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2), gridspec_kw={"width_ratios": [1, 2]})
    if not edits:
        for ax in axes:
            ax.text(0.5, 0.5, "no edited variants in this run", ha="center", va="center")
            ax.set_axis_off()
        return _save(fig, Path(path))
    ax = axes[0]
    for i, e in enumerate(edits):
        for j, (view, color) in enumerate((("all_pairs", "tab:red"),
                                           ("valid_both_only", "tab:blue"))):
            block = stats["edits"][e]["views"][view]
            rate = block["flips"]["value"]
            lo, hi = _err(rate, block["intervals"]["flips"]["stratified"])
            x = i + (j - 0.5) * 0.38
            ax.bar(x, rate or 0.0, width=0.36, color=color, yerr=[[lo], [hi]], capsize=3,
                   label=view if i == 0 else None)
            ax.text(x, (rate or 0.0) + hi + 0.01,
                    f"{block['flips']['numerator']}/{block['flips']['denominator']}",
                    ha="center", fontsize=7)
    tops = [max((b["flips"]["value"] or 0.0) + _err(b["flips"]["value"],
                                                     b["intervals"]["flips"]["stratified"])[1]
                for b in stats["edits"][e]["views"].values()) for e in edits]
    ax.set_ylim(0, max(tops) * 1.25 + 0.05)
    ax.set_xticks(range(len(edits)), edits, rotation=20, fontsize=8)
    ax.set_ylabel("strict flip rate vs original")
    ax.set_title("flips by edit (95% stratified bootstrap)", fontsize=9)
    ax.legend(fontsize=7)
    ax = axes[1]
    domains = sorted({d for e in edits for d in stats["edits"][e]["views"]["all_pairs"]
                      ["by_domain"]})
    width = 0.8 / max(len(edits), 1)
    for i, e in enumerate(edits):
        by_dom = stats["edits"][e]["views"]["all_pairs"]["by_domain"]
        for k, d in enumerate(domains):
            if d not in by_dom:
                continue
            block = by_dom[d]
            rate = block["flips"]["value"]
            lo, hi = _err(rate, block["intervals"]["flips"]["stratified"])
            ax.bar(k + (i - (len(edits) - 1) / 2) * width, rate or 0.0, width=width * 0.95,
                   yerr=[[lo], [hi]], capsize=2, color=f"C{i}", label=e if k == 0 else None)
    ax.set_xticks(range(len(domains)), domains, fontsize=8)
    ax.set_title("flips by domain, all pairs (fail-closed)", fontsize=9)
    ax.legend(fontsize=7)
    return _save(fig, Path(path))


def plot_score_confusion(gate: Mapping[str, Any], path: str | Path) -> Path:
    """Counts of reference score (rows) by local score (columns)."""
    plt = _pyplot()
    conf = gate["confusion"]
    matrix = conf["matrix"]
    fig, ax = plt.subplots(figsize=(5.5, 4.2))
    ax.imshow(matrix, cmap="Blues")
    for i, row in enumerate(matrix):
        for j, n in enumerate(row):
            ax.text(j, i, str(n), ha="center", va="center", fontsize=10,
                    color="white" if n > max(map(max, matrix)) / 2 else "black")
    ax.set_xticks(range(len(conf["column_labels"])), conf["column_labels"])
    ax.set_yticks(range(len(conf["row_labels"])), conf["row_labels"])
    ax.set_xlabel("local score")
    ax.set_ylabel("reference score")
    ax.set_title(f"{gate['spec']['name']}: reference vs local", fontsize=9)
    return _save(fig, Path(path))


def margin_groups(rows: Sequence[RowResult], gate: Mapping[str, Any] | None,
                  ) -> tuple[str, dict[str, list[float]], int]:
    """(split description, group -> margins, rows without a margin)."""
    groups: dict[str, list[float]] = {}
    no_margin = 0
    if gate is not None:
        agree = {r["row_id"]: r["strict_agree"] for r in gate["rows"]}
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


def plot_margin_histogram(rows: Sequence[RowResult], gate: Mapping[str, Any] | None,
                          path: str | Path) -> Path:
    plt = _pyplot()
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
    return _save(fig, Path(path))


def _frac(f: Mapping[str, Any]) -> str:
    v = f["value"]
    return f"{f['numerator']}/{f['denominator']}" + ("" if v is None else f" ({v:.4f})")


@dataclass(frozen=True)
class Table:
    """One report table, rendered as Markdown or HTML from the same cells."""

    key: str
    title: str
    header: tuple[str, ...]
    rows: Sequence[tuple[str, ...]]


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def report_tables(stats: Mapping[str, Any], gate: Mapping[str, Any] | None,
                  variants: Sequence[str] | None = None) -> list[Table]:
    """The report's tables (gate checks, variants, flips) from the checks' JSON;
    ``variants`` gives the row order (cohort order, original first)."""
    tables = []
    if gate is not None:
        tables.append(Table("gate", "Parity gate", ("check", "figure", "tested", "threshold",
                                                    "result"),
                            [(c["name"], _frac(gate["figures"][c["figure"]]), str(c["tested"]),
                              str(c["threshold"]), "pass" if c["passed"] else "FAIL")
                             for c in gate["checks"]]))
    order = [v for v in (variants or []) if v in stats["variants"]]
    order += [v for v in stats["variants"] if v not in order]
    rows: list[tuple[str, ...]] = []
    for v in order:
        s = stats["variants"][v]
        m = s["metrics"]
        rows.append((v, _frac(s["coverage"]), _frac(m["accuracy"]), _frac(m["f1"]),
                     _num(m["balanced_accuracy"]["value"]), _num(m["mcc"]["value"])))
    tables.append(Table("variants", "Variants", ("variant", "coverage", "accuracy", "F1",
                                                 "balanced acc.", "MCC"), rows))
    if stats["edits"]:
        rows = []
        for e in [v for v in order if v in stats["edits"]] + [
                e for e in stats["edits"] if e not in order]:
            s = stats["edits"][e]
            a, vb = s["views"]["all_pairs"], s["views"]["valid_both_only"]
            iv = a["intervals"]["flips"]["stratified"]
            ci = "-" if not iv or iv["low"] is None else f"[{iv['low']:.4f}, {iv['high']:.4f}]"
            rows.append((e, _frac(a["flips"]), ci, _frac(vb["flips"]), _frac(a["safe_to_unsafe"]),
                         _frac(a["unsafe_to_safe"]),
                         _frac(s["exact_score"]["changed_valid_both"])))
        tables.append(Table("flips", "Flips vs original", (
            "edit", "flips (all pairs)", "95% CI (stratified)", "flips (valid both)",
            "safe->unsafe", "unsafe->safe", "exact-score changes"), rows))
    return tables


def _md_table(table: Table) -> list[str]:
    return ["| " + " | ".join(table.header) + " |", "|" + "---|" * len(table.header),
            *("| " + " | ".join(row) + " |" for row in table.rows)]


def render_markdown(run_id: str, stats: Mapping[str, Any], gate: Mapping[str, Any] | None,
                    figures: Sequence[str], variants: Sequence[str] | None = None,
                    figures_note: str | None = None) -> str:
    lines = [f"# guardrepro report: {run_id}", ""]
    lines.append(f"Expected rows: {stats['rows']['expected']} "
                 f"({stats['settings']['expected_rows']}); by status: "
                 + ", ".join(f"{k} {v}" for k, v in stats["rows"]["by_status"].items()))
    b = stats["settings"]["bootstrap"]
    lines += ["", f"Intervals: {b['method']}, {b['replicates']} replicates, seed {b['seed']}, "
              f"draw order {b.get('draw_order', 'stratum')}, clusters {b['clusters']}, "
              f"strata {b['strata']}.", ""]
    tables = {t.key: t for t in report_tables(stats, gate, variants)}
    if gate is not None:
        lines += ["## Parity gate", "", f"**{gate['verdict']}**", "", *_md_table(tables["gate"])]
        lines += ["", f"Exact-score agreement (jointly valid rows): "
                  f"{_frac(gate['figures']['exact_agreement'])}", ""]
        if gate["disagreements"]:
            lines += ["Disagreeing rows:", ""]
            for d in gate["disagreements"]:
                lines.append(f"- {d['row_id']} ({d['domain']}, gold {d['gold_label']}): reference "
                             f"{d['reference_score']}, local {d['local_score']} "
                             f"[{d['local_status']}, {d['reason']}]")
            lines.append("")
    lines += ["## Variants", "", *_md_table(tables["variants"])]
    if "flips" in tables:
        lines += ["", "## Flips vs original", "", *_md_table(tables["flips"])]
    if stats.get("placebo_corrected"):
        lines += ["", "Placebo-corrected flip rate (edit minus placebo, all pairs):", ""]
        for e, p in stats["placebo_corrected"].items():
            a = p["all_pairs"]
            iv = a["intervals"]["stratified"]
            ci = "" if not iv or iv["low"] is None else f" [{iv['low']:.4f}, {iv['high']:.4f}]"
            eff = "undefined" if a["effect"] is None else f"{a['effect']:+.4f}"
            lines.append(f"- {e}: {eff}{ci} ({_frac(a['edit_flips'])} vs "
                         f"{_frac(a['placebo_flips'])})")
    if stats.get("run_to_run"):
        r = stats["run_to_run"]
        lines += ["", f"Run-to-run strict disagreement (repeat vs original): "
                  f"{_frac(r['strict_disagreement']['all_pairs'])}; exact-score: "
                  f"{_frac(r['exact_score_disagreement_valid_both'])}"]
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
                 draw_order: str = DEFAULT_DRAW_ORDER, cohort: str | Path | None = None) -> Path:
    """Write report.md and (with matplotlib) the figures into ``run_dir``;
    returns report.md. Without matplotlib the tables are still written and
    report.md says which extra adds the figures (``FIGURES_NOTE``)."""
    run_dir = Path(run_dir)
    manifest = load_manifest(run_dir)
    run = load_run(run_dir, cohort)
    stats = load_or_compute_stats(run_dir, recompute=recompute, replicates=replicates,
                                  seed=seed, draw_order=draw_order, cohort=cohort, run=run)
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
    path = run_dir / "report.md"
    write_atomic(path, text)
    return path
