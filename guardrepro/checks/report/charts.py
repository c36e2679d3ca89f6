"""The report's PNG figures and the data each one draws.

Input: the checks' typed results (``StatsResult``, ``GateResult``) and the
run's rows. Output: ``flip_rates.png`` (left: strict flip rate per edit in
both views with its interval; right: per edit x domain, all pairs, with
count/n and an interval per bar), ``score_confusion.png``,
``margin_hist.png``, and their data (``flip_bars``, ``domain_bars``,
``margin_groups``), which the notebooks draw too. ``CAPTIONS`` says in words
what each figure plots; ``report.md`` and ``report.html`` print it under the
figure.

Invariants: one colour per edit in every panel (the view is told apart by
hatching, never by colour); a bar of height zero is drawn as a marked zero
(an outline and its ``0/n``), never as empty space; every bar carries its
count and denominator.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from guardrepro.checks.core.bootstrap import ratio_interval
from guardrepro.checks.core.figure import Figure, Number
from guardrepro.checks.parity.gate_types import GateResult
from guardrepro.checks.report.figures import pyplot, save_png
from guardrepro.checks.stats.compute import VIEWS, StatsResult
from guardrepro.checks.stats.pairs import ORIGINAL, make_pairs
from guardrepro.rundir.read import RowResult
from guardrepro.schema import strict_decision

FLIP_PNG = "flip_rates.png"
CONFUSION_PNG = "score_confusion.png"
MARGIN_PNG = "margin_hist.png"
CAPTIONS = {
    FLIP_PNG: "Left: strict flip rate of each edit against its original row, in both views "
              "(solid: all_pairs, fail-closed, interval unstratified; hatched: "
              "valid_both_only, interval stratified by domain:gold), bars labelled "
              "flips/pairs, error bars the cluster-bootstrap interval. Right: the same "
              "all_pairs flip rate per domain, labelled flips/pairs, with its interval "
              "(clusters = base sample); a zero is drawn as an outlined bar at 0.",
    CONFUSION_PNG: "Original rows: the reference's score (rows) against this run's score "
                   "(columns), counts; 'invalid' is a row without a parsed score.",
    MARGIN_PNG: "Decision-token margin (logit gap at the decision token) of each row, "
                "split by strict agreement with the reference under the gate's rule "
                "(with gate.json; a row without a parsed score on both sides is a group "
                "of its own, not a disagreement) or by whether the edited row flipped "
                "(without).",
}
VIEW_HATCH = {"all_pairs": "", "valid_both_only": "//"}


def _err(s: Figure) -> tuple[float, float]:
    rate = s.point
    if rate is None or s.lower is None or s.upper is None:
        return 0.0, 0.0
    return max(rate - s.lower, 0.0), max(s.upper - rate, 0.0)


@dataclass(frozen=True)
class FlipBar:
    """One bar of the flip-rate panel: an edit's flip rate in one view."""

    edit: str
    view: str
    count: Number
    denominator: Number
    point: float | None
    lower: float | None
    upper: float | None


@dataclass(frozen=True)
class DomainBar:
    """One bar of the by-domain panel: an edit's flips in one domain (all_pairs);
    ``lower``/``upper`` the interval when the rows were given."""

    edit: str
    domain: str
    count: Number
    denominator: Number
    lower: float | None = None
    upper: float | None = None

    @property
    def rate(self) -> float:
        return self.count / self.denominator if self.denominator else 0.0


def flip_bars(stats: StatsResult) -> list[FlipBar]:
    """The flip-rate panel's data: every edit in both views, edits in stats order."""
    return [FlipBar(e, view, f.count, f.denominator, f.point, f.lower, f.upper)
            for e, block in stats.edits.items() for view in VIEWS
            for f in (block.views[view].flip_rate,)]


def domain_bars(stats: StatsResult, rows: Sequence[RowResult] | None = None) -> list[DomainBar]:
    """The by-domain panel's data: every edit x domain it has pairs in (all_pairs);
    with ``rows``, each with the interval engine's bounds (stats' settings,
    clusters = base sample, unstratified, as the all_pairs flip rate)."""
    out = []
    settings = stats.settings
    for e, block in stats.edits.items():
        pairs = make_pairs(rows, e) if rows is not None else []
        for d, c in block.views["all_pairs"].counts.by_domain.items():
            lower = upper = None
            sub = [p for p in pairs if p.domain == d]
            if sub:
                iv = ratio_interval([int(p.d_orig != p.d_edit) for p in sub], [1] * len(sub),
                                    [p.base_sample_id for p in sub],
                                    replicates=settings.replicates, seed=settings.seed,
                                    confidence=settings.confidence)
                lower, upper = iv.lower, iv.upper
            out.append(DomainBar(e, d, c.flip_rate.count, c.flip_rate.denominator, lower, upper))
    return out


def _bar(ax: object, x: float, rate: float, width: float, color: str, hatch: str,
         err: tuple[float, float], text: str, label: str | None) -> float:
    """One labelled bar; a zero gets an outline at 0 so it reads as a zero."""
    lo, hi = err
    if rate == 0.0:
        ax.bar(x, 0.012, width=width, bottom=0.0, facecolor="none",  # type: ignore[attr-defined]
               edgecolor=color, hatch=hatch, linewidth=1.2, label=label)
    else:
        ax.bar(x, rate, width=width, color=color, hatch=hatch,  # type: ignore[attr-defined]
               edgecolor="white" if hatch else color, yerr=[[lo], [hi]], capsize=3,
               label=label)
    top = max(rate + hi, 0.012)
    ax.text(x, top + 0.01, text, ha="center", fontsize=6.5)  # type: ignore[attr-defined]
    return top


def plot_flip_rates(stats: StatsResult, path: str | Path,
                    rows: Sequence[RowResult] | None = None) -> Path:
    """Both panels (``CAPTIONS[FLIP_PNG]``); ``rows`` adds the per-domain intervals."""
    plt = pyplot()
    edits = list(stats.edits)
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.4), gridspec_kw={"width_ratios": [1, 2]})
    if not edits:
        for ax in axes:
            ax.text(0.5, 0.5, "no edited variants in this run", ha="center", va="center")
            ax.set_axis_off()
        return save_png(fig, Path(path))
    color = {e: f"C{i}" for i, e in enumerate(edits)}
    ax = axes[0]
    tops = [0.0]
    for bar in flip_bars(stats):
        i, j = edits.index(bar.edit), VIEWS.index(bar.view)
        err = _err(stats.edits[bar.edit].views[bar.view].flip_rate)
        tops.append(_bar(ax, i + (j - 0.5) * 0.38, bar.point or 0.0, 0.36, color[bar.edit],
                         VIEW_HATCH[bar.view], err, f"{bar.count}/{bar.denominator}", None))
    for view in VIEWS:
        ax.bar(0, 0, color="lightgrey", hatch=VIEW_HATCH[view], edgecolor="white", label=view)
    ax.set_ylim(0, max(tops) * 1.2 + 0.06)
    ax.set_xticks(range(len(edits)), edits, rotation=20, fontsize=8)
    ax.set_ylabel("strict flip rate vs original")
    ax.set_title(f"flips by edit ({stats.settings.confidence:g} cluster-bootstrap interval)",
                 fontsize=9)
    ax.legend(fontsize=7)
    ax = axes[1]
    bars = domain_bars(stats, rows)
    domains = sorted({b.domain for b in bars})
    width = 0.8 / max(len(edits), 1)
    tops = [0.0]
    for b in bars:
        i, k = edits.index(b.edit), domains.index(b.domain)
        err = (0.0, 0.0) if b.lower is None or b.upper is None else (
            max(b.rate - b.lower, 0.0), max(b.upper - b.rate, 0.0))
        tops.append(_bar(ax, k + (i - (len(edits) - 1) / 2) * width, b.rate, width * 0.95,
                         color[b.edit], "", err, f"{b.count}/{b.denominator}", None))
    for e in edits:  # legend entries drawn apart, so a zero bar never sets an edit's swatch
        ax.bar(0, 0, color=color[e], label=e)
    ax.set_ylim(0, max(tops) * 1.2 + 0.06)
    ax.set_xticks(range(len(domains)), domains, fontsize=8)
    ax.set_ylabel("strict flip rate vs original (all_pairs)")
    n = sum(b.denominator for b in bars if b.edit == edits[0])
    ax.set_title(f"flips by domain, all_pairs (fail-closed), n = {n} pairs per edit; "
                 + ("interval per bar" if rows is not None else "no intervals"), fontsize=9)
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
        neither = {d.row_id for d in gate.disagreement_rows if d.both_invalid}
        for r in rows:
            if r.row_id not in agree:
                continue
            if r.decision_margin is None:
                no_margin += 1
                continue
            key = ("agrees with reference" if agree[r.row_id] else
                   "invalid on both sides" if r.row_id in neither else
                   "disagrees with reference")
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
