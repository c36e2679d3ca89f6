"""Row-by-row comparison of two runs (e.g. BF16 vs Q8, or transformers vs MLX).

Input: two runs, each a run directory holding ``records.jsonl`` or a records
JSONL file itself (one ``Record.to_dict()`` per line). Output: a
``Comparison`` with one ``RowComparison`` per row id present in both runs and
a summary whose every rate carries its denominator.

Invariants:
- Rows are matched by ``row_id`` only; a duplicate row id inside one run is
  an error, rows present in one run only are listed, never dropped.
- Token identity compares ``output_token_ids`` exactly; ``first_divergence``
  is the first index where they differ (the shorter length when one is a
  prefix of the other), ``None`` when identical.
- Exact-score agreement is defined on jointly valid rows only (both status
  ``ok``). Strict agreement follows the parity gate's rule: a row agrees
  only when both records are valid and their strict decisions
  (``score != 0``) are equal; its denominator is every row in both runs, so
  two unparsable outputs never count as agreement.
- Decisions are measurable when at least half the rows in both runs are
  valid on both sides (``decisions_measurable``); otherwise the table says
  so under the token identity it leads with.
- Margins are the records' ``decision_margin`` (top1 - top2 logit at the
  decision position); margin quantiles are reported separately for rows whose
  strict decision agrees and rows where it does not, so one can see whether
  the movers were near-ties.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from guardrepro.artifacts.store import atomic_write_bytes
from guardrepro.checks.core.figure import RATE, Figure
from guardrepro.checks.core.formatting import frac_percent, sig3
from guardrepro.checks.core.serde import JsonValue, load_json_value, opt
from guardrepro.checks.stats.drift import ScoreDrift, drift_line, score_drift
from guardrepro.errors import InputError
from guardrepro.rundir.manifest import RunManifest, read_manifest
from guardrepro.rundir.read import RunData, read_records_file
from guardrepro.schema import Record
from guardrepro.textsafe import shown

QUANTILES = (0.0, 0.25, 0.5, 0.75, 1.0)


def first_divergence(a: Sequence[int], b: Sequence[int]) -> int | None:
    """First index where two token sequences differ; None if identical."""
    for index, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return index
    if len(a) != len(b):
        return min(len(a), len(b))
    return None


# the scored-row keys, written only where a side has a P(unsafe)
_SCORED = ("p_unsafe_a", "p_unsafe_b")


@dataclass(frozen=True)
class RowComparison(JsonValue):
    row_id: str
    variant: str
    domain: str
    gold_label: float
    same_input: bool
    tokens_identical: bool
    first_divergence: int | None
    tokens_a: int
    tokens_b: int
    status_a: str
    status_b: str
    score_a: float | None
    score_b: float | None
    exact_agree: bool | None  # None unless both rows are valid
    strict_a: int
    strict_b: int
    strict_agree: bool
    margin_a: float | None
    margin_b: float | None
    # P(unsafe) on each side and the interaction (written only where a side has one)
    p_unsafe_a: float | None = opt(omit_none=_SCORED, default=None)
    p_unsafe_b: float | None = opt(omit_none=_SCORED, default=None)
    base_sample_id: str | None = opt(omit_none=_SCORED, default=None)


def compare_row(a: Record, b: Record) -> RowComparison:
    both_valid = a.valid and b.valid
    return RowComparison(
        row_id=a.row_id,
        variant=a.variant,
        domain=a.domain,
        gold_label=a.gold_label,
        same_input=a.input_sha256 == b.input_sha256,
        tokens_identical=list(a.output_token_ids) == list(b.output_token_ids),
        first_divergence=first_divergence(a.output_token_ids, b.output_token_ids),
        tokens_a=len(a.output_token_ids),
        tokens_b=len(b.output_token_ids),
        status_a=a.status,
        status_b=b.status,
        score_a=a.score,
        score_b=b.score,
        exact_agree=(a.score == b.score) if both_valid else None,
        strict_a=a.strict_decision,
        strict_b=b.strict_decision,
        strict_agree=both_valid and a.strict_decision == b.strict_decision,
        margin_a=a.decision_margin,
        margin_b=b.decision_margin,
        p_unsafe_a=a.p_unsafe if a.valid else None,
        p_unsafe_b=b.p_unsafe if b.valid else None,
        base_sample_id=a.base_sample_id if _scored(a) or _scored(b) else None,
    )


def _scored(record: Record) -> bool:
    return record.valid and record.p_unsafe is not None


def decisions_measurable(jointly_valid: int, rows: int) -> bool:
    """Decisions can be compared when at least half the rows are valid on both
    sides; below that, strict agreement mostly counts unparsed rows (each a
    disagreement by the gate's rule) and token identity is the measure."""
    return 2 * jointly_valid >= rows


def rate(count: int, denominator: int) -> Figure:
    """count / denominator (None over 0), written in the ``rate`` shape."""
    return Figure.of(count, denominator)


@dataclass(frozen=True)
class Quantiles(JsonValue):
    """Count of present values, count of missing ones, and the quantiles at
    ``QUANTILES`` (None when no value is present)."""

    n: int
    missing: int
    q00: float | None
    q25: float | None
    q50: float | None
    q75: float | None
    q100: float | None


def quantiles(values: Iterable[float | None]) -> Quantiles:
    """Count of present values, count of missing ones, and ``numpy.quantile``
    (linear interpolation) at ``QUANTILES``."""
    items = list(values)
    present = [v for v in items if v is not None]
    qs = np.quantile(np.asarray(present, dtype=float), QUANTILES) if present else None
    return Quantiles(len(present), len(items) - len(present),
                     *(None if qs is None else float(qs[i]) for i in range(len(QUANTILES))))


@dataclass(frozen=True)
class MarginPair(JsonValue):
    """Margin quantiles of one group of rows in run A and in run B."""

    a: Quantiles
    b: Quantiles

    @classmethod
    def of(cls, rows: Sequence[RowComparison]) -> MarginPair:
        return cls(quantiles([r.margin_a for r in rows]), quantiles([r.margin_b for r in rows]))


MARGIN_GROUPS = ("strict_agree", "strict_disagree", "score_disagree")


@dataclass(frozen=True)
class CompareSummary(JsonValue):
    """The comparison's figures; every rate carries its denominator."""

    rows_a: int
    rows_b: int
    rows_in_both: int
    only_in_a: int
    only_in_b: int
    input_mismatch: Figure = opt(shape=RATE)
    valid_a: Figure = opt(shape=RATE)
    valid_b: Figure = opt(shape=RATE)
    identical_tokens: Figure = opt(shape=RATE)
    exact_score_agreement: Figure = opt(shape=RATE)
    strict_agreement: Figure = opt(shape=RATE)
    strict_disagreements: tuple[str, ...] = opt()
    score_disagreements: tuple[str, ...] = opt()
    token_divergences: tuple[str, ...] = opt()
    margins: Mapping[str, MarginPair] = opt()  # keyed by MARGIN_GROUPS
    # at least half the rows in both are valid on both sides (``decisions_measurable``)
    decisions_measurable: bool = opt(default=True)
    # |delta p_unsafe| per row (``checks.stats.drift``); None (not written): no p_unsafe
    score_drift: ScoreDrift | None = opt(default=None)


@dataclass(frozen=True)
class Comparison(JsonValue):
    """Two runs row by row; ``to_dict()`` is the compare JSON object, ``to_json()``
    its text as ``write_json`` writes it (ASCII)."""

    JSON_ASCII: ClassVar[bool] = True

    run_a: str
    run_b: str
    rows: list[RowComparison]
    only_a: list[str]
    only_b: list[str]
    rows_a: int
    rows_b: int
    sides: Mapping[str, Any] | None = None  # checks.parity.sides.compare_sides of the two runs

    def summary(self) -> CompareSummary:
        both = self.rows
        n = len(both)
        joint = [r for r in both if r.exact_agree is not None]
        agree = [r for r in both if r.strict_agree]
        disagree = [r for r in both if not r.strict_agree]
        score_moved = [r for r in joint if not r.exact_agree]
        return CompareSummary(
            rows_a=self.rows_a,
            rows_b=self.rows_b,
            rows_in_both=n,
            only_in_a=len(self.only_a),
            only_in_b=len(self.only_b),
            input_mismatch=rate(sum(not r.same_input for r in both), n),
            valid_a=rate(sum(r.status_a == "ok" for r in both), n),
            valid_b=rate(sum(r.status_b == "ok" for r in both), n),
            identical_tokens=rate(sum(r.tokens_identical for r in both), n),
            exact_score_agreement=rate(sum(bool(r.exact_agree) for r in joint), len(joint)),
            strict_agreement=rate(len(agree), n),
            strict_disagreements=tuple(r.row_id for r in disagree),
            score_disagreements=tuple(r.row_id for r in score_moved),
            token_divergences=tuple(r.row_id for r in both if not r.tokens_identical),
            margins={"strict_agree": MarginPair.of(agree),
                     "strict_disagree": MarginPair.of(disagree),
                     "score_disagree": MarginPair.of(score_moved)},
            decisions_measurable=decisions_measurable(len(joint), n),
            score_drift=score_drift(
                [r.row_id for r in both], [r.p_unsafe_a for r in both],
                [r.p_unsafe_b for r in both], [r.base_sample_id or r.row_id for r in both],
                [r.strict_a for r in both], [r.strict_b for r in both]),
        )

    def to_dict(self) -> dict[str, Any]:
        """The compare JSON object (summary, rows only in one run, every row)."""
        out = {
            "run_a": self.run_a,
            "run_b": self.run_b,
            "summary": _summary_dict(self.summary()),
            "only_a": list(self.only_a),
            "only_b": list(self.only_b),
            "rows": [r.to_dict() for r in self.rows],
        }
        if self.sides is not None:
            out["sides"] = dict(self.sides)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, file: str | None = None) -> Comparison:
        """The inverse of ``to_dict`` (the summary is recomputed from the rows)."""
        rows = load_json_value(list[RowComparison], data["rows"], file=file, at="rows")
        summary = data["summary"]
        return cls(data["run_a"], data["run_b"], rows, list(data["only_a"]),
                   list(data["only_b"]), summary["rows_a"], summary["rows_b"],
                   data.get("sides"))


def _summary_dict(summary: CompareSummary) -> dict[str, Any]:
    out = summary.to_dict()
    if out.get("score_drift", ...) is None:
        del out["score_drift"]
    return dict(out)


def compare_records(
    a: Mapping[str, Record], b: Mapping[str, Record], *, run_a: str = "A", run_b: str = "B"
) -> Comparison:
    """Compare two keyed record sets; rows in both are listed in A's order."""
    rows = [compare_row(rec, b[row_id]) for row_id, rec in a.items() if row_id in b]
    return Comparison(
        run_a=run_a,
        run_b=run_b,
        rows=rows,
        only_a=[row_id for row_id in a if row_id not in b],
        only_b=[row_id for row_id in b if row_id not in a],
        rows_a=len(a),
        rows_b=len(b),
    )


def _manifest_of(run: str | Path | RunData) -> RunManifest | None:
    """The manifest of a run given as a directory or a records file (None without
    one), or of a run already read."""
    if isinstance(run, RunData):
        return run.manifest
    run = Path(run)
    return read_manifest(run if run.is_dir() else run.parent)


def _records_of(run: str | Path | RunData) -> tuple[Record, ...]:
    return run.records if isinstance(run, RunData) else read_records_file(run).records


def _cohort_of(manifest: RunManifest | None) -> tuple[str, str] | None:
    """(path, sha256) of the cohort a run was made of, from its manifest."""
    if manifest is None:
        return None
    return str(manifest.cohort.get("path")), str(manifest.cohort.get("sha256"))


def compare_runs(run_a: str | Path | RunData, run_b: str | Path | RunData, *,
                 shared_rows: bool = False) -> Comparison:
    """Load both runs (each file read once; a ``RunData`` is not read again) and
    compare them row by row (``sides``: what each run was).

    Runs made of different cohorts (by their manifests' cohort sha256) are refused
    unless ``shared_rows``: then only the rows both hold are compared, and there
    must be at least one."""
    manifest_a, manifest_b = _manifest_of(run_a), _manifest_of(run_b)
    cohort_a, cohort_b = _cohort_of(manifest_a), _cohort_of(manifest_b)
    records_a, records_b = _records_of(run_a), _records_of(run_b)
    run_a, run_b = (r.run_dir if isinstance(r, RunData) else r for r in (run_a, run_b))
    comparison = compare_records({r.row_id: r for r in records_a},
                                 {r.row_id: r for r in records_b},
                                 run_a=str(run_a), run_b=str(run_b))
    differ = cohort_a is not None and cohort_b is not None and cohort_a[1] != cohort_b[1]
    shared = len(comparison.rows)
    if differ and not shared_rows:
        assert cohort_a is not None and cohort_b is not None
        raise InputError(
            f"the runs were made of different cohorts: A of {cohort_a[0]} (sha256"
            f" {cohort_a[1][:12]}...), B of {cohort_b[0]} (sha256 {cohort_b[1][:12]}...);"
            f" they share {shared} row ids. Pass --shared-rows to compare those {shared} rows")
    if shared == 0:
        raise InputError(f"{run_a} and {run_b} share no row id: there is nothing to compare")
    from dataclasses import replace

    from guardrepro.checks.parity.sides import compare_sides, side_from

    return replace(comparison, sides=compare_sides(
        side_from(run_a, manifest_a, records_a), side_from(run_b, manifest_b, records_b)))


def _pct(r: Figure) -> str:
    return frac_percent(r)


def format_table(comparison: Comparison) -> str:
    """A readable summary plus one line per row whose outputs differ."""
    s = comparison.summary()
    from guardrepro.checks.parity.sides import sides_line

    lines = [sides_line(comparison.sides)] if comparison.sides is not None else []
    lines += [
        f"A: {shown(comparison.run_a)} ({s.rows_a} rows)",
        f"B: {shown(comparison.run_b)} ({s.rows_b} rows)",
        f"rows in both {s.rows_in_both}, only in A {s.only_in_a}, only in B {s.only_in_b}",
        f"identical tokens   {_pct(s.identical_tokens)}  (token identity)",
    ]
    if not s.decisions_measurable:
        joint = s.exact_score_agreement.denominator
        lines.append(
            f"decisions not measurable: {joint} of {s.rows_in_both} rows are valid on both "
            "sides (fewer than half); strict agreement below counts every unparsed row as a "
            "disagreement, so token identity is the measure")
    lines += [
        f"valid A            {_pct(s.valid_a)}",
        f"valid B            {_pct(s.valid_b)}",
        f"exact score agree  {_pct(s.exact_score_agreement)}  (jointly valid rows)",
        f"strict agree       {_pct(s.strict_agreement)}  (gate rule: both valid, same decision)",
    ]
    if s.input_mismatch.count:
        lines.append(f"WARNING: input_sha256 differs on {_pct(s.input_mismatch)} rows")
    if s.score_drift is not None:
        lines.append(drift_line(s.score_drift))
    for group in MARGIN_GROUPS:
        for side in ("a", "b"):
            q: Quantiles = getattr(s.margins[group], side)
            if q.n:
                lines.append(
                    f"margin {side.upper()} [{group}] n={q.n} min {sig3(q.q00)} "
                    f"q25 {sig3(q.q25)} median {sig3(q.q50)} q75 {sig3(q.q75)} "
                    f"max {sig3(q.q100)}"
                )
    moved = [r for r in comparison.rows if not (r.tokens_identical and r.strict_agree)]
    if moved:
        header = ("row_id", "variant", "score A", "score B", "strict", "diverge@", "margin A",
                  "margin B")
        table = [header]
        for r in moved:
            table.append((
                shown(r.row_id), shown(r.variant),
                sig3(r.score_a if r.status_a == "ok" else r.status_a),
                sig3(r.score_b if r.status_b == "ok" else r.status_b),
                f"{r.strict_a}/{r.strict_b}" + ("" if r.strict_agree else " !"),
                sig3(r.first_divergence), sig3(r.margin_a), sig3(r.margin_b),
            ))
        widths = [max(len(str(row[i])) for row in table) for i in range(len(header))]
        lines.append("")
        for row in table:
            lines.append("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)))
    for label, ids in (("only in A", comparison.only_a), ("only in B", comparison.only_b)):
        if ids:  # the full lists are in the JSON output
            more = f" ... ({len(ids) - 8} more; see --json)" if len(ids) > 8 else ""
            lines.append(f"{label}: {', '.join(shown(i) for i in ids[:8])}{more}")
    return "\n".join(lines)


def write_json(comparison: Comparison, out: str | Path) -> Path:
    """Write the comparison as JSON atomically."""
    out = Path(out)
    atomic_write_bytes(out, comparison.to_json().encode("utf-8"))
    return out
