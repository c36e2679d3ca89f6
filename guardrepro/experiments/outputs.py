"""The sweep's summary table, frontier and figures, from what is on disk.

Input: a sweep directory (``reference/`` and ``runs/<name>/`` with their
``summary.json``, ``divergence.json`` and records) and its spec.
Output: ``summary.json`` and ``summary.md`` (one row per configuration),
``frontier.json`` and ``frontier.md`` (``guardrepro.experiments.frontier``), and the PNG
figures ``frontier.png`` (the two chosen axes, harm whiskers = the cluster
bootstrap interval, frontier points joined), ``kl.png`` (mean and p99 KL per
recipe) and ``margins.png`` (per row, the candidate's decision margin under
teacher forcing, flipped rows marked).

The summary is typed: one ``SummaryRow`` per configuration, its figures
``checks.core.figure.Figure`` (the rate shape, top-1 agreement the count
shape, as ``divergence.json`` writes it), the frontier a
``frontier.FrontierReport``.

Invariants: everything is recomputed from the files, so a resumed sweep and a
fresh one write the same outputs; every file is written atomically.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from guardrepro.checks.core.bootstrap import MIN_VERDICT_ROWS, Interval
from guardrepro.checks.core.figure import COUNT, RATE, Figure, decode
from guardrepro.checks.core.formatting import frac
from guardrepro.checks.core.serde import JsonValue, as_json_value, opt
from guardrepro.checks.report.figures import annotate_apart, pyplot, save_png
from guardrepro.checks.stats.drift import ScoreDrift, record_drift
from guardrepro.experiments.frontier import (
    AXES,
    Config,
    FrontierReport,
    format_frontier,
    frontier_report,
    load_config,
)
from guardrepro.experiments.spec import SweepSpec
from guardrepro.limits import read_json_file
from guardrepro.rundir.outputs import write_json_atomic
from guardrepro.rundir.read import read_records_file
from guardrepro.rundir.records import write_atomic


def _json(path: Path) -> Any:
    return read_json_file(path)


def config_dirs(spec: SweepSpec, out: Path, device: str) -> list[tuple[str, Path]]:
    on_cpu = device.startswith("Device(cpu")
    names = [e.chosen(on_cpu).name for e in spec.recipes] + [r.name for r in spec.rules]
    return [(spec.reference_name, out / "reference")] + [(n, out / "runs" / n) for n in names]


@dataclass(frozen=True)
class SummaryRow(JsonValue):
    """One configuration of ``summary.json``: what it is, its cost, errors and
    harm (from the frontier), its agreement with the reference and, for a
    recipe, its divergence and token identity (its own ``summary.json``)."""

    name: str
    kind: str
    recipe: Mapping[str, Any] | None  # the recipe as its artifact.json records it
    device: str | None
    artifact_bytes: int | None
    rows: int
    invalid_rows: int
    mean_kl: float | None
    p99_kl: float | None
    decision_mean_kl: float | None
    decision_min_margin: float | None
    harm_per_100: float
    peak_memory_bytes: int | None
    rows_per_s: float | None
    decode_tok_per_s: float | None
    identical_tokens: Figure | None = opt(shape=RATE)
    strict_agreement: Figure | None = opt(shape=RATE)
    exact_agreement: Figure | None = opt(shape=RATE)
    top1_agreement: Figure | None = opt(shape=COUNT)
    fn: Figure = opt(shape=RATE)
    fp: Figure = opt(shape=RATE)
    # per-row |delta p_unsafe| against the reference (None: no p_unsafe on the rows)
    p_unsafe_drift: ScoreDrift | None = opt(default=None)


def _side_figure(side: Mapping[str, Any], key: str, shape: str) -> Figure | None:
    data = side.get(key)
    return None if data is None else decode(data, shape)


def summary_rows(spec: SweepSpec, out: Path, device: str, report: FrontierReport,
                 drifts: Mapping[str, ScoreDrift | None] | None = None) -> list[SummaryRow]:
    rows = []
    for name, folder in config_dirs(spec, out, device):
        side = _json(folder / "summary.json") if (folder / "summary.json").exists() else {}
        m = report.metrics(name)
        agree = m.agreement
        div = side.get("divergence") or {}
        comp = side.get("compare") or {}
        rows.append(SummaryRow(
            name=name, kind=side.get("kind", "reference"), recipe=side.get("recipe"),
            device=side.get("device"), artifact_bytes=m.artifact_bytes, rows=m.rows,
            invalid_rows=m.invalid_rows, mean_kl=div.get("mean_kl"), p99_kl=div.get("p99_kl"),
            decision_mean_kl=div.get("decision_mean_kl"),
            decision_min_margin=div.get("decision_min_margin"), harm_per_100=m.harm_per_100,
            peak_memory_bytes=m.peak_memory_bytes, rows_per_s=m.rows_per_s,
            decode_tok_per_s=m.decode_tok_per_s,
            identical_tokens=_side_figure(comp, "identical_tokens", RATE),
            strict_agreement=None if agree is None else agree.strict,
            exact_agreement=None if agree is None else agree.exact,
            top1_agreement=_side_figure(div, "top1_agreement", COUNT),
            fn=m.fn_rate, fp=m.fp_rate, p_unsafe_drift=(drifts or {}).get(name)))
    return rows


def _g(value: Any, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def summary_table(rows: Sequence[SummaryRow]) -> str:
    head = ("| config | MB | tokens identical | strict agree | exact agree | mean KL | p99 KL "
            "| top-1 agree | decision KL | min decision margin | FN | FP | harm/100 "
            "| peak MB | rows/s |")
    lines = [head, "|" + "|".join("---" for _ in range(head.count("|") - 1)) + "|"]
    for r in rows:
        mb = None if r.artifact_bytes is None else r.artifact_bytes / 1e6
        peak = None if r.peak_memory_bytes is None else r.peak_memory_bytes / 1e6
        lines.append(
            f"| {r.name} | {_g(mb, '.2f')} | {frac(r.identical_tokens)} "
            f"| {frac(r.strict_agreement)} | {frac(r.exact_agreement)} "
            f"| {_g(r.mean_kl, '.2e')} | {_g(r.p99_kl, '.2e')} "
            f"| {frac(r.top1_agreement)} | {_g(r.decision_mean_kl, '.2e')} "
            f"| {_g(r.decision_min_margin, '.2f')} | {frac(r.fn)} | {frac(r.fp)} "
            f"| {r.harm_per_100:.1f} | {_g(peak, '.0f')} | {_g(r.rows_per_s, '.3g')} |")
    drifted = [r for r in rows if r.p_unsafe_drift is not None]
    if drifted:
        lines += ["", "p_unsafe drift against the reference, per row (|delta p_unsafe|, "
                  "95% cluster-bootstrap intervals by interaction):", "",
                  "| config | rows | mean | p95 | max | cross 0.5 | flipped | moved but held |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in drifted:
            d = r.p_unsafe_drift
            assert d is not None
            lines.append(f"| {r.name} | {d.rows} | {_ci(d.mean)} | {_ci(d.p95)} | "
                         f"{_ci(d.max)} | {d.crossings} | {d.flipped} | {d.moved_but_held} |")
    return "\n".join(lines) + "\n"


def _ci(iv: Interval) -> str:
    if iv.point is None:
        return "-"
    return f"{iv.point:.2e} [{_g(iv.lower, '.2e')}, {_g(iv.upper, '.2e')}]"


def config_drifts(configs: Sequence[Config], reference: str) -> dict[str, ScoreDrift | None]:
    """Each configuration's p_unsafe drift against the reference configuration."""
    ref = next((c for c in configs if c.name == reference), None)
    if ref is None:
        return {}
    by_id = {r.row_id: r for r in ref.records}
    return {c.name: record_drift(by_id, c.records) for c in configs if c.name != reference}


def write_outputs(spec: SweepSpec, out: Path,
                  device: str) -> tuple[list[SummaryRow], FrontierReport]:
    configs = [load_config(folder, name) for name, folder in config_dirs(spec, out, device)]
    report = frontier_report(configs, reference=spec.reference_name, costs=spec.costs,
                             axes=spec.axes, replicates=spec.replicates, seed=spec.seed)
    report = report.with_extra(sweep={"name": spec.name, "spec": str(spec.path),
                                      "spec_sha256": spec.sha256, "device": device})
    write_json_atomic(out / "frontier.json", report.to_dict())
    write_atomic(out / "frontier.md", format_frontier(report) + "\n")
    rows = summary_rows(spec, out, device, report, config_drifts(configs, spec.reference_name))
    write_json_atomic(out / "summary.json", as_json_value(rows))
    write_atomic(out / "summary.md", summary_table(rows))
    frontier_figure(report, out / "frontier.png")
    kl_figure(rows, out / "kl.png")
    margin_figure(spec, out, device, out / "margins.png")
    report = report.with_extra(recommendation=recommend(rows, report))
    write_json_atomic(out / "frontier.json", report.to_dict())
    write_atomic(out / "report.md", sweep_report(spec, device, rows, report))
    return rows, report


def recommend(rows: Sequence[SummaryRow], report: FrontierReport) -> dict[str, Any]:
    """The recipe a sweep recommends, by one of two rules, named in ``rule``.

    ``decisions``, when the reference has at least ``MIN_VERDICT_ROWS`` valid
    decisions to agree with (its agreement with itself under the gate's rule):
    the smallest recipe artifact that agrees with the reference on every one
    of them and whose paired harm interval does not show it worse; ties go to
    the lower mean KL. None when no recipe qualifies.

    ``kl``, otherwise (decisions cannot be measured, e.g. a guard whose output
    its parser never reads): the recipe with the lowest teacher-forced mean KL,
    then the highest top-1 agreement, then the smallest artifact. None when no
    recipe has a KL."""
    ref = next((r for r in rows if r.kind == "reference"), None)
    ceiling = (None if ref is None or ref.strict_agreement is None
               else int(ref.strict_agreement.count))
    if ceiling is not None and ceiling >= MIN_VERDICT_ROWS:
        return _by_decisions(rows, report, ceiling)
    return _by_kl(rows, ceiling)


def _by_decisions(rows: Sequence[SummaryRow], report: FrontierReport,
                  ceiling: int) -> dict[str, Any]:
    worse = {p.a for p in report.paired_vs_reference if p.verdict == f"{p.b} better"}
    ok = [r for r in rows if r.kind == "recipe" and r.name not in worse
          and r.strict_agreement is not None and r.strict_agreement.count == ceiling
          and r.artifact_bytes is not None]
    if not ok:
        return {"name": None, "rule": "decisions",
                "reason": "no recipe agrees with the reference on every row"}
    best = min(ok, key=lambda r: (r.artifact_bytes or 0, r.mean_kl or 0.0))
    size = best.artifact_bytes or 0
    return {"name": best.name, "artifact_bytes": best.artifact_bytes, "rule": "decisions",
            "reason": (f"rule decisions ({ceiling} valid reference decisions, at least "
                       f"{MIN_VERDICT_ROWS}): smallest artifact ({size / 1e6:.2f} MB) with "
                       f"strict agreement {frac(best.strict_agreement)} and exact agreement "
                       f"{frac(best.exact_agreement)} with the reference, mean KL "
                       f"{_g(best.mean_kl, '.2e')}, smallest decision margin "
                       f"{_g(best.decision_min_margin, '.2f')}; the paired harm interval "
                       "does not show it worse")}


def _by_kl(rows: Sequence[SummaryRow], ceiling: int | None) -> dict[str, Any]:
    valid = "no" if not ceiling else f"only {ceiling}"
    why = (f"rule kl: decisions not measurable ({valid} valid reference decisions, fewer "
           f"than the {MIN_VERDICT_ROWS} a ranking by decision agreement needs), so recipes "
           "are ranked by teacher-forced mean KL, then top-1 agreement, then size")
    scored = [r for r in rows if r.kind == "recipe" and r.mean_kl is not None]
    if not scored:
        return {"name": None, "rule": "kl", "reason": why + "; no recipe has a KL"}

    def key(r: SummaryRow) -> tuple[float, float, int]:
        top1 = r.top1_agreement.point if r.top1_agreement is not None else None
        size = r.artifact_bytes if r.artifact_bytes is not None else 2**63
        return (float(r.mean_kl or 0.0), -(top1 if top1 is not None else -1.0), size)

    best = min(scored, key=key)
    size = "-" if best.artifact_bytes is None else f"{best.artifact_bytes / 1e6:.2f} MB"
    return {"name": best.name, "artifact_bytes": best.artifact_bytes, "rule": "kl",
            "reason": (f"{why}: lowest mean KL {_g(best.mean_kl, '.2e')}, top-1 agreement "
                       f"{frac(best.top1_agreement)}, {size}; its decisions were not "
                       "compared")}


def sweep_report(spec: SweepSpec, device: str, rows: Sequence[SummaryRow],
                 report: FrontierReport) -> str:
    rec = report.extra["recommendation"]
    lines = [
        f"# Sweep {spec.name}", "",
        f"Spec `{spec.path.name}` (sha256 {spec.sha256[:12]}...), MLX device {device}, "
        f"rows: {spec.rows}{f' (first {spec.limit})' if spec.limit else ''}, reference "
        f"`{spec.reference_name}`. Costs c_FN={spec.costs['FN']:g}, "
        f"c_FP={spec.costs['FP']:g}; invalid rows fail closed.", "",
        "## Summary", "", summary_table(rows),
        "KL is KL(reference || recipe) per generated token, teacher forced on the "
        "reference's own tokens (full vocabulary); the decision token carries the first "
        "character of the harmfulness rating.", "",
        "## Frontier", "", "```", format_frontier(report), "```", "",
        "![frontier](frontier.png)", "", "![KL per recipe](kl.png)", "",
        "![decision margins against flips](margins.png)", "",
        "## Recommendation", "",
        (f"`{rec['name']}`: {rec['reason']}." if rec["name"] else rec["reason"] + "."), "",
    ]
    return "\n".join(lines)


def frontier_figure(report: FrontierReport, path: Path) -> Path:
    plt = pyplot()
    x_axis, y_axis = report.frontier.axes
    on = set(report.frontier.frontier)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    points = []
    labels: list[tuple[str, float, float]] = []
    for m in report.configurations:
        x, y = getattr(m, AXES[x_axis][0]), getattr(m, AXES[y_axis][0])
        if x is None or y is None:
            continue
        x = x / 1e6 if x_axis in ("memory", "bytes") else x
        err = None
        low, high = m.harm_interval.lower, m.harm_interval.upper
        if y_axis == "harm" and low is not None and high is not None:
            err = [[y - low], [high - y]]
        ax.errorbar([x], [y], yerr=err, fmt="o", capsize=3,
                    color="tab:blue" if m.name in on else "tab:gray")
        labels.append((m.name, x, y))
        if m.name in on:
            points.append((x, y))
    if points:
        xs, ys = zip(*sorted(points), strict=True)
        ax.step(xs, ys, where="post", color="tab:blue", alpha=0.5)
    annotate_apart(ax, labels)  # configurations often share a harm value: no overlaps
    unit = " (MB)" if x_axis in ("memory", "bytes") else ""
    ax.set_xlabel(f"{x_axis}{unit}")
    ax.set_ylabel(y_axis + (" per 100 rows (95% cluster bootstrap)" if y_axis == "harm" else ""))
    ax.set_title("cost-harm frontier (blue: on the frontier)")
    return save_png(fig, path)


def kl_figure(rows: Sequence[SummaryRow], path: Path) -> Path:
    plt = pyplot()
    scored = [r for r in rows if r.mean_kl is not None]
    fig, ax = plt.subplots(figsize=(7, 3.5))
    names = [r.name for r in scored]
    ax.bar(names, [r.mean_kl for r in scored], label="mean KL per token")
    ax.plot(names, [r.p99_kl for r in scored], "o", color="tab:red", label="p99 KL")
    ax.set_yscale("log")
    ax.set_ylabel("KL(reference || recipe), nats")
    ax.legend(fontsize=8)
    ax.tick_params(axis="x", rotation=30)
    return save_png(fig, path)


def flips(reference: Path, run: Path) -> dict[str, bool]:
    ref = {r.row_id: r.strict_decision for r in read_records_file(reference).records}
    return {r.row_id: r.strict_decision != ref[r.row_id]
            for r in read_records_file(run).records if r.row_id in ref}


def margin_figure(spec: SweepSpec, out: Path, device: str, path: Path) -> Path:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ticks: list[str] = []
    for name, folder in config_dirs(spec, out, device)[1:]:
        div_file = folder / "divergence.json"
        if not div_file.exists():
            continue
        flipped = flips(out / "reference", folder)
        rows = [r for r in _json(div_file)["rows"] if r["decision_margin"] is not None]
        kept = [r["decision_margin"] for r in rows if not flipped.get(r["row_id"])]
        moved = [r["decision_margin"] for r in rows if flipped.get(r["row_id"])]
        ax.scatter(kept, [len(ticks)] * len(kept), color="tab:blue", s=10, alpha=0.5)
        ax.scatter(moved, [len(ticks)] * len(moved), color="tab:red", s=30, zorder=3)
        ticks.append(name)
    ax.set_yticks(range(len(ticks)), ticks)
    ax.set_xlabel("decision-token top1-top2 logit margin (teacher forced); red = strict flip")
    return save_png(fig, path)
