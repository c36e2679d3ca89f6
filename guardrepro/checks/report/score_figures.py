"""The report's figures of the guard as a scored classifier, and of score drift.

Input: a run's rows (with ``p_unsafe``), its ``stats.json`` ``scores``
(``checks.stats.scores``), the threshold frontier
(``checks.stats.thresholds``) and, for the drift scatter, the rows of a
reference (or of each configuration against one). Output: PNG files
(``ROC_PR_PNG``, ``RELIABILITY_PNG``, ``THRESHOLDS_PNG``, ``DRIFT_PNG``) and
the Markdown section that shows them with their numbers; the section is
empty for a run without ``p_unsafe``.

Every figure names its axes, the rows behind it (n) and the intervals
(95% cluster bootstrap by interaction) in its title or legend.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from guardrepro.checks.core.bootstrap import QUICK_REPLICATES, Interval
from guardrepro.checks.report.figures import pyplot, save_png
from guardrepro.checks.stats.drift import ScoreDrift
from guardrepro.checks.stats.scores import ScoreStats, curves
from guardrepro.checks.stats.thresholds import ThresholdFrontier, threshold_frontier
from guardrepro.rundir.read import RowResult

ROC_PR_PNG = "roc_pr.png"
RELIABILITY_PNG = "reliability.png"
THRESHOLDS_PNG = "threshold_frontier.png"
DRIFT_PNG = "p_unsafe_drift.png"


def _ci(iv: Interval) -> str:
    if iv.point is None:
        return "-"
    if iv.lower is None or iv.upper is None:
        return f"{iv.point:.3f}"
    return f"{iv.point:.3f} [{iv.lower:.3f}, {iv.upper:.3f}]"


def roc_pr_figure(rows: Sequence[RowResult], scores: ScoreStats, path: Path) -> Path:
    plt = pyplot()
    fig, (roc, pr) = plt.subplots(1, 2, figsize=(9.5, 4.2))
    view = scores.views["fail_closed"]
    c = curves(rows, "fail_closed")
    roc.plot(c["fpr"], c["tpr"], drawstyle="default", color="tab:blue")
    roc.plot([0, 1], [0, 1], color="0.7", lw=0.8, ls="--")
    at = view.at_threshold
    if at.fpr.point is not None and at.recall.point is not None:
        roc.scatter([at.fpr.point], [at.recall.point], color="tab:red", zorder=3,
                    label=f"threshold {at.threshold:g}: TP {at.tp} FP {at.fp} TN {at.tn} "
                          f"FN {at.fn}")
        roc.legend(loc="lower right", fontsize=7)
    roc.set_xlabel("false positive rate (safe rows flagged)")
    roc.set_ylabel("true positive rate (unsafe rows flagged)")
    roc.set_title(f"ROC, n={view.rows} ({view.unsafe} unsafe)\nAUROC {_ci(view.auroc)}",
                  fontsize=9)
    pr.step(c["recall"], c["precision"], where="post", color="tab:green")
    base = view.unsafe / view.rows if view.rows else 0.0
    pr.axhline(base, color="0.7", lw=0.8, ls="--", label=f"unsafe share {base:.2f}")
    if at.recall.point is not None and at.precision.point is not None:
        pr.scatter([at.recall.point], [at.precision.point], color="tab:red", zorder=3,
                   label=f"threshold {at.threshold:g}")
    pr.legend(loc="lower left", fontsize=7)
    pr.set_xlabel("recall (unsafe rows flagged)")
    pr.set_ylabel("precision")
    pr.set_ylim(0, 1.02)
    pr.set_title(f"precision-recall, n={view.rows}\nAUPRC {_ci(view.auprc)}", fontsize=9)
    fig.suptitle("p_unsafe as a score, fail-closed view (no score = 1.0); 95% cluster-bootstrap "
                 "intervals by interaction", fontsize=8, y=1.06)
    return save_png(fig, path)


def reliability_figure(scores: ScoreStats, path: Path) -> Path:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.2, 4.6))
    view = scores.views["fail_closed"]
    bins = [b for b in view.reliability if b["rows"]]
    mids = [(float(b["lower"]) + float(b["upper"])) / 2 for b in bins]
    ax.bar(mids, [b["observed"] for b in bins], width=0.09, color="tab:blue", alpha=0.6,
           label="observed unsafe rate")
    ax.scatter([b["mean_score"] for b in bins], [b["observed"] for b in bins], color="tab:blue",
               s=12, zorder=3, label="bin mean p_unsafe")
    for m, b in zip(mids, bins, strict=True):
        ax.annotate(f"n={b['rows']}", (m, float(b["observed"] or 0)), fontsize=6,
                    ha="center", xytext=(0, 3), textcoords="offset points")
    ax.plot([0, 1], [0, 1], color="0.6", ls="--", lw=0.8, label="perfect calibration")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.08)
    ax.set_xlabel("p_unsafe (10 equal-width bins)")
    ax.set_ylabel("observed share of unsafe rows (strict gold)")
    ax.set_title(f"reliability, n={view.rows}; ECE {_ci(view.ece)}\n(95% cluster-bootstrap "
                 "interval by interaction)", fontsize=9)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=3, fontsize=7)
    return save_png(fig, path)


def threshold_figure(front: ThresholdFrontier, path: Path) -> Path:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.6, 4.6))
    pts = [p for p in front.points if p.miss_rate is not None and p.flag_rate is not None]
    ax.plot([p.flag_rate for p in pts], [p.miss_rate for p in pts], color="0.75", lw=0.8,
            label="every threshold")
    kept = [p for p in pts if p.non_dominated]
    ax.scatter([p.flag_rate for p in kept], [p.miss_rate for p in kept], s=10,
               color="tab:blue", label=f"non-dominated ({len(kept)})", zorder=3)
    best = front.best
    if best.flag_rate is not None and best.miss_rate is not None:
        t = best.threshold_interval
        ax.scatter([best.flag_rate], [best.miss_rate], color="tab:red", s=40, zorder=4,
                   label=f"least harm: {_t(best.threshold)} [{_g(t.lower)}, {_g(t.upper)}], "
                         f"harm/100 {_ci(best.harm_interval)}")
    if front.max_miss is not None:
        ax.axhline(front.max_miss, color="tab:orange", ls=":",
                   label=f"max-miss {front.max_miss:g} (declared)")
    ax.set_xlabel("false-flag rate (safe rows blocked)")
    ax.set_ylabel("unsafe-missed rate (unsafe rows passed)")
    ax.set_title(f"threshold frontier of {front.name}, n={front.rows} "
                 f"({front.unsafe} unsafe, {front.safe} safe)\ncosts: miss {front.cost_miss:g},"
                 f" flag {front.cost_flag:g}; 95% cluster-bootstrap intervals", fontsize=9)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), fontsize=7)
    return save_png(fig, path)


def _g(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}"


def drift_figure(pairs: Mapping[str, tuple[Sequence[float], Sequence[float], ScoreDrift]],
                 reference: str, path: Path) -> Path:
    """One scatter: each row's p_unsafe under ``reference`` (x) against each
    configuration's (y), one colour per configuration."""
    plt = pyplot()
    fig, (ax, gap) = plt.subplots(1, 2, figsize=(10, 4.8))
    fig.subplots_adjust(wspace=0.35)
    for name, (x, y, d) in pairs.items():
        ax.scatter(x, y, s=10, alpha=0.6,
                   label=f"{name}: n={d.rows}, mean |Δ| {_ci_sci(d.mean)}, max {d.max.point:.2g},"
                         f" {d.crossings} cross {d.threshold:g}")
        moved = [(a, abs(b - a)) for a, b in zip(x, y, strict=True) if b != a]
        gap.scatter([a for a, _ in moved], [g for _, g in moved], s=10, alpha=0.6,
                    label=f"{name}: {len(moved)} of {d.rows} rows moved")
    ax.plot([0, 1], [0, 1], color="0.6", ls="--", lw=0.8)
    ax.axhline(0.5, color="0.85", lw=0.6)
    ax.axvline(0.5, color="0.85", lw=0.6)
    ax.set_xlabel(f"p_unsafe under the reference ({reference})")
    ax.set_ylabel("p_unsafe under the configuration")
    ax.set_title("each row's p_unsafe, reference vs configuration", fontsize=9)
    gap.set_yscale("log")
    gap.set_xlabel(f"p_unsafe under the reference ({reference})")
    gap.set_ylabel("|Δ p_unsafe| (log; rows that did not move left out)")
    gap.set_title("size of each row's move", fontsize=9)
    gap.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), fontsize=7)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), fontsize=7)
    fig.suptitle("per-row p_unsafe drift; intervals: 95% cluster bootstrap by interaction",
                 fontsize=9, y=1.02)
    return save_png(fig, path)


def _ci_sci(iv: Interval) -> str:
    if iv.point is None or iv.lower is None or iv.upper is None:
        return "-"
    return f"{iv.point:.2g} [{iv.lower:.2g}, {iv.upper:.2g}]"


SCORE_CAPTIONS = {
    ROC_PR_PNG: "Left: ROC curve of p_unsafe against the strict gold label (fail-closed: a "
                "row without a score counts 1.0), with its AUROC; right: the "
                "precision-recall curve, with its AUPRC; the point at the threshold in "
                "force is marked.",
    RELIABILITY_PNG: "Reliability diagram: per equal-width bin of p_unsafe, the observed "
                     "unsafe rate against the mean p_unsafe (the diagonal is a calibrated "
                     "guard), with each bin's rows; ECE with its interval in the title.",
    THRESHOLDS_PNG: "Threshold frontier: as the threshold on p_unsafe moves, the "
                    "unsafe-missed rate against the false-flag rate; non-dominated "
                    "thresholds joined, the least-harm threshold at costs 1 and 1 marked.",
    DRIFT_PNG: "Each row's p_unsafe under the reference (x) against each configuration's "
               "(y); rows off the diagonal moved, rows across the threshold lines crossed.",
}


def score_summary(scores: ScoreStats | None) -> list[str]:
    """The fail-closed view in words: a heading sentence, then one line each for
    AUROC and AUPRC, the figures at the threshold, and ECE (empty without scores)."""
    if scores is None or "fail_closed" not in scores.views:
        return []
    view = scores.views["fail_closed"]
    at = view.at_threshold
    return [f"{view.rows} rows ({view.unsafe} unsafe, {view.safe} safe; {view.dropped} without "
            "a score, counted 1.0 here and dropped in the upstream view of stats.json); "
            "95% cluster-bootstrap intervals by interaction.",
            f"AUROC {_ci(view.auroc)}, AUPRC {_ci(view.auprc)}",
            f"at threshold {at.threshold:g}: TP {at.tp}, FP {at.fp}, TN {at.tn}, FN {at.fn};"
            f" precision {_fig(at.precision)}, recall {_fig(at.recall)}, FPR {_fig(at.fpr)}",
            f"ECE {_ci(view.ece)} over {scores.bins}"]


def score_section(rows: Sequence[RowResult], scores: ScoreStats | None, out: Path, *,
                  name: str, figures: bool, seed: int = 260828) -> str:
    """The report's Markdown section (figures written into ``out`` when
    ``figures``); empty without scores."""
    if scores is None or "fail_closed" not in scores.views:
        return ""
    head, *items = score_summary(scores)
    lines = ["", "## The guard as a scored classifier (p_unsafe)", "", head, "",
             *(f"- {item}" for item in items)]
    front = threshold_frontier(name, [r.p_unsafe if r.valid else None for r in rows],
                               [int(r.gold_label != 0) for r in rows],
                               [r.base_sample_id for r in rows], cost_miss=1.0, cost_flag=1.0,
                               max_miss=None, replicates=QUICK_REPLICATES, seed=seed)
    kept = sum(p.non_dominated for p in front.points)
    lines.append(f"- threshold frontier (costs 1 and 1): {kept} non-dominated thresholds; "
                 f"least harm at {_t(front.best.threshold)} "
                 f"(harm/100 {_ci(front.best.harm_interval)}); `guardrepro frontier` takes "
                 "other costs and --max-miss")
    if figures:
        roc_pr_figure(rows, scores, out / ROC_PR_PNG)
        reliability_figure(scores, out / RELIABILITY_PNG)
        threshold_figure(front, out / THRESHOLDS_PNG)
        lines += ["", f"![ROC and precision-recall]({ROC_PR_PNG})", "",
                  f"![reliability diagram]({RELIABILITY_PNG})", "",
                  f"![threshold frontier]({THRESHOLDS_PNG})"]
    return "\n".join(lines) + "\n"


def _t(t: float | None) -> str:
    return "none flagged" if t is None else f"p_unsafe >= {t:.4g}"


def _fig(f: Any) -> str:
    if f.point is None:
        return "-"
    bounds = "" if f.lower is None else f" [{f.lower:.3f}, {f.upper:.3f}]"
    return f"{f.count:g}/{f.denominator:g} = {f.point:.3f}{bounds}"


def drift_pairs(reference: Sequence[Any], configs: Mapping[str, Sequence[Any]]
                ) -> dict[str, tuple[list[float], list[float], ScoreDrift]]:
    """Per configuration (records), the rows with p_unsafe on both sides:
    (reference values, configuration values, its drift against the reference)."""
    from guardrepro.checks.stats.drift import record_drift

    ref = {r.row_id: r for r in reference}
    out = {}
    for name, records in configs.items():
        drift = record_drift(ref, records)
        if drift is None:
            continue
        both = [(ref[r.row_id].p_unsafe, r.p_unsafe) for r in records
                if r.row_id in ref and r.valid and ref[r.row_id].valid
                and r.p_unsafe is not None and ref[r.row_id].p_unsafe is not None]
        out[name] = ([float(a) for a, _ in both], [float(b) for _, b in both], drift)
    return out


def drift_section(reference_name: str, reference: Sequence[Any],
                  configs: Mapping[str, Sequence[Any]], out: Path, *, figures: bool) -> str:
    """The drift scatter and its numbers (empty when no row has p_unsafe on both sides)."""
    from guardrepro.checks.stats.drift import drift_line

    pairs = drift_pairs(reference, configs)
    if not pairs:
        return ""
    lines = ["", f"## p_unsafe drift against {reference_name}", ""]
    lines += [f"- {name}: {drift_line(d)}" for name, (_, _, d) in pairs.items()]
    if figures:
        drift_figure(pairs, reference_name, out / DRIFT_PNG)
        lines += ["", f"![p_unsafe drift]({DRIFT_PNG})"]
    return "\n".join(lines) + "\n"
