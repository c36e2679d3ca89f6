"""Cost and harm of guard configurations, dominance and the Pareto frontier.

Input: configurations, each a name plus its records (a run directory or a
``records.jsonl`` file: model runs, quantized copies and rule baselines alike)
and optionally its artifact size; the per-error costs ``c_FN`` and ``c_FP``;
the name of the reference configuration.
Output: per configuration its cost (artifact bytes, peak memory, rows/s,
prefill and decode tok/s, all from the records), its strict errors (FN, FP
with denominators), its cost-weighted harm per 100 rows with a cluster
bootstrap interval, its agreement with the reference (strict and exact);
dominance relations; the frontier on two chosen axes; paired harm
differences against the reference.

Invariants:
- Strict decisions are fail-closed: an invalid row (no parsed score) is an
  "unsafe" decision. Gold is strict: gold score != 0 is unsafe. A row is an FN
  when gold is unsafe and the decision safe, an FP when gold is safe and the
  decision unsafe. Harm per 100 rows = 100 * (c_FN * FN + c_FP * FP) / rows.
- A dominates B when A is no worse on every chosen axis and strictly better
  on at least one. Equal configurations do not dominate each other, so ties
  both stay on the frontier. A configuration with an unknown value on a
  chosen axis is not placed (named, with the axis) rather than guessed.
- Every configuration is measured on the rows all of them have: runs over
  different row sets (the demo's MLX run scores the 64 originals, its
  transformers run all 256 rows) are restricted to the shared rows, and
  ``frontier.json`` then says how many (``shared_rows``) and how many rows of
  each configuration were left out (``rows_left_out``); runs over the same
  rows (a sweep) are untouched. No shared row at all is an ``InputError``.
- Paired differences use only rows present in both configurations (the counts
  of unpaired rows are reported); the interval is the percentile cluster
  bootstrap of the mean per-row difference (clusters = base sample) from
  ``checks.core.bootstrap.ratio_interval``; "better" needs an interval that
  excludes 0, has a width and rests on ``MIN_VERDICT_ROWS`` rows ("not enough rows").

Typed: ``FrontierReport`` (``to_dict()`` = ``frontier.json``) of ``ConfigMetrics``
(rates as ``Figure``, harm with its ``Interval``, ``Agreement``, mean p_unsafe drift),
two ``Pareto``, ``PairedDifference`` rows; a sweep's additions go through ``with_extra``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from guardrepro.checks.core.bootstrap import (
    DEFAULT_REPLICATES,
    DEFAULT_SEED,
    MIN_VERDICT_ROWS,
    NOT_ENOUGH_ROWS,
    Interval,
    ratio_interval,
)
from guardrepro.checks.core.figure import RATE, Figure
from guardrepro.checks.core.formatting import fixed, frac, sig3
from guardrepro.checks.core.serde import JsonValue, opt
from guardrepro.checks.io.keys import MISSING_MARK, ComparisonKey, key_note, manifest_key
from guardrepro.checks.stats.drift import record_drift
from guardrepro.errors import InputError
from guardrepro.experiments.artifact_side import run_artifact_bytes
from guardrepro.schema import Record, strict_decision

# axis -> (field in the metrics, True when lower is better)
AXES: dict[str, tuple[str, bool]] = {
    "harm": ("harm_per_100", True), "memory": ("peak_memory_bytes", True),
    "bytes": ("artifact_bytes", True), "rows_per_s": ("rows_per_s", False),
    "fn": ("fn", True), "fp": ("fp", True), "disagreement": ("strict_disagreement", True),
    "drift": ("p_unsafe_drift", True),  # mean |delta p_unsafe| against the reference
}
DEFAULT_COSTS = {"FN": 1.0, "FP": 1.0}


@dataclass(frozen=True)
class Config:
    """A named configuration: its records and (when known) its artifact size."""

    name: str
    source: str
    records: tuple[Record, ...]
    artifact_bytes: int | None
    key: ComparisonKey | None = None  # what it was measured under (checks.io.keys)


@dataclass(frozen=True)
class Agreement(JsonValue):
    """Agreement with the reference on the shared rows (``agreement``)."""

    rows: int
    strict: Figure = opt(shape=RATE)
    exact: Figure = opt(shape=RATE)


@dataclass(frozen=True)
class ConfigMetrics(JsonValue):
    """Cost, errors, harm and agreement of one configuration (``config_metrics``)."""

    name: str
    source: str
    rows: int
    invalid_rows: int
    artifact_bytes: int | None
    peak_memory_bytes: int | None
    seconds: float
    rows_per_s: float | None
    prefill_tok_per_s: float | None
    decode_tok_per_s: float | None
    fn: int
    fp: int
    harm_per_100: float
    harm_interval: Interval
    agreement: Agreement | None
    strict_disagreement: float | None
    fn_rate: Figure = opt(shape=RATE)
    fp_rate: Figure = opt(shape=RATE)
    key: ComparisonKey | None = None
    p_unsafe_drift: float | None = None  # mean |delta p_unsafe| vs the reference, or None


@dataclass(frozen=True)
class Pareto(JsonValue):
    """The frontier on ``axes``, the dominated names with their dominators and
    the names not placed with their unknown axes (``pareto``)."""

    axes: tuple[str, ...]
    frontier: tuple[str, ...]
    dominated: Mapping[str, tuple[str, ...]]
    unplaced: Mapping[str, tuple[str, ...]]


@dataclass(frozen=True)
class PairedDifference(JsonValue):
    """Harm per 100 rows of ``a`` minus ``b`` on their shared rows (``paired_difference``)."""

    a: str
    b: str
    rows: int
    only_in_a: int
    only_in_b: int
    harm_difference_per_100: float
    interval: Interval
    verdict: str


@dataclass(frozen=True)
class FrontierReport(JsonValue):
    """Everything ``frontier.json`` holds; ``extra`` (written beside the other
    keys) is what a caller adds, as a sweep its ``sweep`` and ``recommendation``."""

    costs: Mapping[str, float]
    reference: str | None
    configurations: tuple[ConfigMetrics, ...]
    frontier: Pareto
    dominance_all_axes: Pareto
    paired_vs_reference: tuple[PairedDifference, ...]
    extra: Mapping[str, Any] = opt(spread=True, default_factory=dict)

    def with_extra(self, **extra: Any) -> FrontierReport:
        return replace(self, extra={**self.extra, **extra})

    def metrics(self, name: str) -> ConfigMetrics:
        """The configuration named ``name``."""
        for m in self.configurations:
            if m.name == name:
                return m
        raise InputError(f"no configuration {name!r}", field="name")


def load_config(path: str | Path, name: str | None = None) -> Config:
    """A configuration from a run directory or a records.jsonl file."""
    from guardrepro.rundir.read import read_records_file

    path = Path(path)
    file = read_records_file(path)
    records = file.records
    if not records:
        raise InputError("no records", file=str(file.path))
    label = name or (path.name if path.is_dir() else path.parent.name)
    from guardrepro.rundir.manifest import read_manifest

    key = manifest_key(read_manifest(path if path.is_dir() else path.parent),
                       records[0].provenance, benchmark=records[0].cohort,
                       label_mode="strict", view="fail_closed")
    return Config(label, str(path), records, run_artifact_bytes(path), key)


def parse_costs(text: str | None) -> dict[str, float]:
    """``"FN=5,FP=1"`` -> {"FN": 5.0, "FP": 1.0}; both default to 1."""
    costs = dict(DEFAULT_COSTS)
    if not text:
        return costs
    for part in text.split(","):
        key, sep, value = part.partition("=")
        key = key.strip().upper()
        if not sep or key not in costs:
            raise InputError(f"expected FN=<number>,FP=<number>, got {part!r}", field="costs")
        try:
            costs[key] = float(value)
        except ValueError as exc:
            raise InputError(f"not a number: {value!r}", field=f"costs.{key}") from exc
        if costs[key] < 0:
            raise InputError("costs must be >= 0", field=f"costs.{key}")
    return costs


def row_harm(record: Record, costs: Mapping[str, float]) -> tuple[int, int, float]:
    """(fn, fp, harm) of one row, fail-closed."""
    gold = strict_decision(record.gold_label)
    decision = record.strict_decision
    fn = int(gold == 1 and decision == 0)
    fp = int(gold == 0 and decision == 1)
    return fn, fp, costs["FN"] * fn + costs["FP"] * fp


def _speed(records: Sequence[Record]) -> dict[str, Any]:
    wall = float(sum(r.timings.total_s for r in records))
    prefill = float(sum(r.timings.prefill_s for r in records))
    decode = float(sum(r.timings.decode_s for r in records))
    prompt = sum(r.prompt_tokens for r in records)
    output = sum(len(r.output_token_ids) for r in records)
    return {
        "seconds": wall,
        "rows_per_s": len(records) / wall if wall > 0 else None,
        "prefill_tok_per_s": prompt / prefill if prefill > 0 else None,
        "decode_tok_per_s": output / decode if decode > 0 else None,
    }


def agreement(records: Sequence[Record], reference: Mapping[str, Record]) -> Agreement:
    """Strict and exact-score agreement on shared rows, by the gate's rule: a
    row agrees only when both sides are valid (strict: same decision, over all
    shared rows; exact: same score, over the jointly valid rows)."""
    shared = [(r, reference[r.row_id]) for r in records if r.row_id in reference]
    valid = [(a, b) for a, b in shared if a.valid and b.valid]
    strict = sum(1 for a, b in valid if a.strict_decision == b.strict_decision)
    exact = sum(1 for a, b in valid if a.score == b.score)
    return Agreement(len(shared), Figure.of(strict, len(shared)), Figure.of(exact, len(valid)))


def config_metrics(config: Config, costs: Mapping[str, float],
                   reference: Mapping[str, Record] | None, *, replicates: int,
                   seed: int) -> ConfigMetrics:
    """Cost, errors, harm (with interval) and agreement of one configuration."""
    records = config.records
    per_row = [row_harm(r, costs) for r in records]
    fn = sum(p[0] for p in per_row)
    fp = sum(p[1] for p in per_row)
    gold_unsafe = sum(strict_decision(r.gold_label) for r in records)
    invalid = sum(1 for r in records if not r.valid)
    harm = 100.0 * sum(p[2] for p in per_row) / len(records)
    interval = ratio_interval([100.0 * p[2] for p in per_row], [1.0] * len(records),
                              [r.base_sample_id for r in records], replicates=replicates,
                              seed=seed)
    peaks = [r.peak_memory_bytes for r in records]
    agree = None if reference is None else agreement(records, reference)
    moved = None if reference is None else record_drift(reference, records, replicates=1)
    drift = None if moved is None else moved.mean.point
    speed = _speed(records)
    return ConfigMetrics(
        name=config.name, source=config.source, rows=len(records), invalid_rows=invalid,
        artifact_bytes=config.artifact_bytes,
        peak_memory_bytes=None if any(p is None for p in peaks) else max(
            int(p) for p in peaks if p is not None),
        seconds=speed["seconds"], rows_per_s=speed["rows_per_s"],
        prefill_tok_per_s=speed["prefill_tok_per_s"],
        decode_tok_per_s=speed["decode_tok_per_s"], fn=fn, fp=fp,
        fn_rate=Figure.of(fn, gold_unsafe), fp_rate=Figure.of(fp, len(records) - gold_unsafe),
        harm_per_100=harm, harm_interval=interval, agreement=agree,
        strict_disagreement=None if agree is None or agree.strict.point is None
        else 1.0 - agree.strict.point, key=config.key, p_unsafe_drift=drift)


def axis_value(metrics: ConfigMetrics, axis: str) -> float | None:
    if axis not in AXES:
        raise InputError(f"unknown axis {axis!r}; one of {sorted(AXES)}", field="axes")
    value = getattr(metrics, AXES[axis][0])
    return None if value is None else float(value)


def dominates(a: ConfigMetrics, b: ConfigMetrics, axes: Sequence[str]) -> bool:
    """A is no worse than B on every axis and strictly better on one (known values only)."""
    strictly = False
    for axis in axes:
        va, vb = axis_value(a, axis), axis_value(b, axis)
        if va is None or vb is None:
            return False
        lower = AXES[axis][1]
        if (va > vb) if lower else (va < vb):
            return False
        if va != vb:
            strictly = True
    return strictly


def pareto(metrics: Sequence[ConfigMetrics], axes: Sequence[str]) -> Pareto:
    """Frontier on ``axes``: names on it, each dominated name with its dominators,
    and configurations not placed (unknown value on an axis)."""
    placed = [m for m in metrics if all(axis_value(m, a) is not None for a in axes)]
    unplaced = {m.name: tuple(a for a in axes if axis_value(m, a) is None)
                for m in metrics if not any(m is p for p in placed)}
    dominated: dict[str, tuple[str, ...]] = {}
    for m in placed:
        by = tuple(o.name for o in placed if o is not m and dominates(o, m, axes))
        if by:
            dominated[m.name] = by
    frontier = tuple(m.name for m in placed if m.name not in dominated)
    return Pareto(tuple(axes), frontier, dominated, unplaced)


def paired_verdict(a: str, b: str, interval: Interval, rows: int) -> str:
    """``"<a> better"`` when the interval of A - B lies below 0, ``"<b> better"``
    above; a claim resting on fewer than ``MIN_VERDICT_ROWS`` rows or on an
    interval of zero width (every cluster the same difference: the bootstrap
    shows no spread to judge by) is ``"not enough rows"`` instead."""
    low, high = interval.lower, interval.upper
    if low is None or high is None or low <= 0 <= high:
        return "no difference shown (interval includes 0)"
    if rows < MIN_VERDICT_ROWS:
        return f"{NOT_ENOUGH_ROWS} ({rows} rows, fewer than {MIN_VERDICT_ROWS})"
    if low == high:
        return f"{NOT_ENOUGH_ROWS} (the interval has zero width)"
    return f"{a} better" if high < 0 else f"{b} better"


def paired_difference(a: Config, b: Config, costs: Mapping[str, float], *, replicates: int,
                      seed: int) -> PairedDifference:
    """Harm per 100 rows of A minus B on their shared rows, with a cluster interval."""
    mine = {r.row_id: r for r in a.records}
    theirs = {r.row_id: r for r in b.records}
    shared = [rid for rid in mine if rid in theirs]
    if not shared:
        raise InputError(f"{a.name} and {b.name} share no rows", field="paired")
    diffs = [100.0 * (row_harm(mine[rid], costs)[2] - row_harm(theirs[rid], costs)[2])
             for rid in shared]
    clusters = [mine[rid].base_sample_id for rid in shared]
    interval = ratio_interval(diffs, [1.0] * len(diffs), clusters, replicates=replicates,
                              seed=seed)
    verdict = paired_verdict(a.name, b.name, interval, len(shared))
    return PairedDifference(a.name, b.name, len(shared), len(mine) - len(shared),
                            len(theirs) - len(shared), sum(diffs) / len(diffs), interval,
                            verdict)


def shared_rows(configs: Sequence[Config]) -> tuple[list[Config], dict[str, int]]:
    """Every configuration restricted to the rows all of them have (harm per
    100 rows and dominance compare like with like), and per configuration that
    had more, how many of its rows were left out (empty: same rows)."""
    common = set.intersection(*({r.row_id for r in c.records} for c in configs))
    if not common:
        raise InputError(f"the configurations {[c.name for c in configs]} share no rows",
                         field="runs")
    left = {c.name: len(c.records) - len(common) for c in configs
            if len(c.records) != len(common)}
    if not left:
        return list(configs), {}
    return [replace(c, records=tuple(r for r in c.records if r.row_id in common))
            for c in configs], left


def frontier_report(configs: Sequence[Config], *, reference: str | None,
                    costs: Mapping[str, float], axes: Sequence[str] = ("memory", "harm"),
                    replicates: int = DEFAULT_REPLICATES,
                    seed: int = DEFAULT_SEED) -> FrontierReport:
    """Everything ``frontier.json`` holds (see module docstring)."""
    if len(axes) != 2:
        raise InputError("the frontier needs exactly two axes", field="axes")
    names = [c.name for c in configs]
    if len(set(names)) != len(names):
        raise InputError(f"configuration names must be unique, got {names}", field="name")
    if reference is not None and reference not in names:
        raise InputError(f"reference {reference!r} is not one of {names}", field="reference")
    configs, left_out = shared_rows(configs)
    ref = next((c for c in configs if c.name == reference), None)
    ref_rows = None if ref is None else {r.row_id: r for r in ref.records}
    metrics = [config_metrics(c, costs, ref_rows, replicates=replicates, seed=seed)
               for c in configs]
    all_axes = [a for a in AXES if a not in ("fn", "fp")]
    paired = () if ref is None else tuple(
        paired_difference(c, ref, costs, replicates=replicates, seed=seed)
        for c in configs if c is not ref)
    report = FrontierReport(dict(costs), reference, tuple(metrics), pareto(metrics, axes),
                            pareto(metrics, all_axes), paired)
    if left_out:  # only then: runs over the same rows keep frontier.json as it was
        report = report.with_extra(shared_rows=metrics[0].rows, rows_left_out=left_out)
    return report


def _mb(value: Any) -> str:
    return MISSING_MARK if value is None else f"{value / 1e6:.1f}"


def _or_mark(value: Any, text: str) -> str:
    return MISSING_MARK if value is None else text  # a missing figure is never a 0


# set side by side: the configurations
CONFIG_PARTS = ("guard", "guard_spec", "checkpoint", "backend", "dtype", "decoding")


def format_frontier(report: FrontierReport) -> str:
    """A readable table of the configurations, the frontier and paired differences."""
    costs = report.costs
    lines = [f"{'configuration':<22} {'bytes MB':>8} {'peak MB':>8} {'rows/s':>7} "
             f"{'prefill':>8} {'decode':>7} {'FN':>7} {'FP':>7} {'harm/100':>9} "
             f"{'95% CI':>15} {'strict':>7} {'exact':>7}"]
    for m in report.configurations:
        ci = m.harm_interval
        interval = (MISSING_MARK if ci.lower is None or ci.upper is None
                    else f"[{ci.lower:.1f}, {ci.upper:.1f}]")
        agree = m.agreement
        lines.append(
            f"{m.name:<22} {_mb(m.artifact_bytes):>8} {_mb(m.peak_memory_bytes):>8} "
            f"{_or_mark(m.rows_per_s, sig3(m.rows_per_s)):>7} "
            f"{_or_mark(m.prefill_tok_per_s, fixed(m.prefill_tok_per_s, 0)):>8} "
            f"{_or_mark(m.decode_tok_per_s, fixed(m.decode_tok_per_s, 0)):>7} "
            f"{m.fn_rate.count:>3}/{m.fn_rate.denominator:<3} "
            f"{m.fp_rate.count:>3}/{m.fp_rate.denominator:<3} "
            f"{m.harm_per_100:>9.2f} {interval:>15} "
            f"{frac(None if agree is None else agree.strict, MISSING_MARK):>7} "
            f"{frac(None if agree is None else agree.exact, MISSING_MARK):>7}")
    front = report.frontier
    if "rows_left_out" in report.extra:
        left = ", ".join(f"{name} {n}" for name, n in report.extra["rows_left_out"].items())
        lines.append(f"rows: the {report.extra['shared_rows']} rows every configuration has "
                     f"(left out: {left})")
    keys = [m.key for m in report.configurations]
    if keys and all(k is not None for k in keys):
        lines.append(key_note([k for k in keys if k is not None], compared=CONFIG_PARTS))
    lines.append(f"costs: c_FN={costs['FN']:g}, c_FP={costs['FP']:g} (invalid rows fail closed)")
    lines.append(f"frontier ({front.axes[0]} vs {front.axes[1]}): " + ", ".join(front.frontier))
    for name, by in front.dominated.items():
        lines.append(f"  dominated: {name} (by {', '.join(by)})")
    for name, missing in front.unplaced.items():
        lines.append(f"  not placed: {name} (unknown {', '.join(missing)})")
    for p in report.paired_vs_reference:
        low, high = p.interval.lower, p.interval.upper
        shown = MISSING_MARK if low is None or high is None else f"[{low:+.2f}, {high:+.2f}]"
        lines.append(f"paired harm {p.a} - {p.b}: {p.harm_difference_per_100:+.2f} "
                     f"per 100 rows on {p.rows} rows {shown}: {p.verdict}")
    return "\n".join(lines)
