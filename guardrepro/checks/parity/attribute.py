"""Attribute every disagreement with a reference to one cause.

Input: a reference (the released predictions, or any run's records), keyed by
row id (records reference) or by base sample id (released predictions: the
original rows only); an unquantized greedy run (``bf16``, the "full
precision" run of the backend family); zero or more quantized greedy runs;
zero or more sampled runs in the authors' mode (K seeded repeats). Every run
is a list of ``Record`` values.

Output: an ``Attribution``: for each greedy run, one ``RowCause`` per row
where the run and the reference disagree, at each level where they do, with
exactly one cause; per level, counts per cause over an honest denominator
with a cluster-bootstrap interval (clusters = base sample); the sampling-noise
floor; the decision margins of the rows behind each cause.

Levels. ``strict``: the row disagrees under the parity gate's rule
(``gate_types.strict_agrees``: it agrees only when both sides are valid and
their strict decisions are equal, so a row invalid on either side is a
disagreement even when both fail closed to 1; denominator: rows present in
both; the gate's 64 also counts missing rows, listed here as ``missing``).
Each strict row carries the gate's ``reason`` (``strict``,
``local_invalid``, ``reference_invalid``). ``exact``: both rows are valid and
their scores differ (denominator: jointly valid rows). A row that disagrees
strictly and is jointly valid disagrees at both levels and gets a cause at
each. At a level, a row's value is its fail-closed strict decision
("0"/"1") or its exact score ("0.0", "0.5", "1.0", "invalid"); the causes
compare these values.

Causes, tested in this order; the first that holds is the row's cause, so
each (row, level) has exactly one:

0. ``identical``: the reference is a run's records and this row generated
   exactly the reference's tokens and text from the same prompt (``input_sha256``),
   whatever the parse state: nothing moved, and the row disagrees only because
   the gate's rule counts an invalid row (here invalid on both sides) as a
   disagreement.
1. ``sampling``: the row's sampled repeats disagree among themselves (at least
   two distinct values) and the reference value is among them: the reference
   is one of the answers the sampler gives on this row.
2. ``quantization``: the attributed run is quantized and its value differs
   from the unquantized greedy run's value on the same row.
3. ``backend``: the unquantized greedy run differs from the reference beyond
   the sampling spread: the reference value is not among the sampled values
   (or no sampled runs were given).
4. ``unexplained``: none of the above (e.g. the sampled repeats agree with
   the reference but greedy decoding does not, or no unquantized run was
   given). Shown as such, never folded into another cause.

Sampling-noise floor: over the reference rows with at least two sampled
repeats present, the share whose repeats disagree among themselves (per
level); no greedy reproduction can be expected to agree with a sampled
reference better than one minus this share.

Invariants: no row is dropped; reference rows absent from a run are counted
as ``missing`` for that run; a run with a duplicate key is an error.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from guardrepro.checks.core.bootstrap import (
    DEFAULT_REPLICATES,
    DEFAULT_SEED,
    QUICK_REPLICATES,
    ratio_interval,
)
from guardrepro.checks.core.figure import CI, RATE_BOUNDS, Figure
from guardrepro.checks.core.formatting import frac
from guardrepro.checks.core.serde import JsonValue, opt
from guardrepro.checks.parity.compare import quantiles
from guardrepro.checks.parity.gate_types import disagreement_reason, strict_agrees
from guardrepro.checks.stats.drift import ScoreDrift, drift_line, score_drift
from guardrepro.errors import InputError
from guardrepro.rundir.read import ORIGINAL
from guardrepro.schema import Record, strict_decision

CAUSES = ("identical", "sampling", "quantization", "backend", "unexplained")
LEVELS = ("strict", "exact")
LEVEL_RULES = {
    "strict": "gate_rule: disagrees unless both sides are valid and the strict decisions "
              "are equal",
    "exact": "jointly_valid: both sides valid and the scores differ",
}


@dataclass(frozen=True)
class RefValue:
    """One reference row: its score (None when invalid) and cluster id; a
    records reference also carries the generated token ids and the prompt hash
    (None for released predictions, which hold no tokens)."""

    key: str
    score: float | None
    base_sample_id: str
    domain: str | None = None
    token_ids: tuple[int, ...] | None = None
    input_sha256: str | None = None
    output_text: str | None = None
    p_unsafe: float | None = None  # a records reference row's P(unsafe), when valid

    def same_tokens(self, local: Record) -> bool:
        """True when ``local`` generated exactly this row's tokens (and text) from
        the same prompt."""
        return (self.token_ids is not None and self.input_sha256 == local.input_sha256
                and tuple(local.output_token_ids) == self.token_ids
                and local.output_text == self.output_text)


@dataclass(frozen=True)
class RunInput:
    """A run taking part in the attribution, keyed like the reference."""

    label: str
    records: Mapping[str, Record]
    backend: str = ""

    @classmethod
    def from_records(cls, label: str, records: Sequence[Record], key_field: str,
                     backend: str = "") -> RunInput:
        """Key ``records`` by ``key_field`` (``row_id``, or ``base_sample_id``
        over the original rows only); a key seen twice is an ``InputError``."""
        out: dict[str, Record] = {}
        for rec in records:
            if key_field == "base_sample_id" and rec.variant != ORIGINAL:
                continue
            key = rec.row_id if key_field == "row_id" else rec.base_sample_id
            if key in out:
                raise InputError(f"run {label!r}: two records share {key_field} {key!r}",
                                 field=key_field)
            out[key] = rec
        if not backend and records:
            backend = records[0].provenance.backend
        return cls(label, out, backend)


def strict_value(score: float | None) -> str:
    """Fail-closed strict decision as a value: invalid counts as unsafe."""
    return str(strict_decision(score))


def exact_value(score: float | None) -> str:
    return "invalid" if score is None else str(float(score))


def value(score: float | None, level: str) -> str:
    return strict_value(score) if level == "strict" else exact_value(score)


def disagreement_levels(ref: float | None, local: Record) -> list[str]:
    """Levels at which ``local`` disagrees with the reference score ``ref``."""
    out = []
    if not strict_agrees(local.valid, ref is not None, strict_decision(local.score),
                         strict_decision(ref)):
        out.append("strict")
    if ref is not None and local.valid and float(ref) != local.score:
        out.append("exact")
    return out


def assign_cause(level: str, ref: float | None, local: Record, *, quantized: bool,
                 bf16: Record | None, sampled: Sequence[Record],
                 identical: bool = False) -> str:
    """The one cause of a disagreement at ``level`` (order in the module docstring);
    ``identical``: the run generated the reference's own tokens."""
    if identical:
        return "identical"
    ref_v = value(ref, level)
    spread = {value(s.score, level) for s in sampled}
    if len(spread) > 1 and ref_v in spread:
        return "sampling"
    if quantized and bf16 is not None and value(bf16.score, level) != value(local.score, level):
        return "quantization"
    if (bf16 is not None and value(bf16.score, level) != ref_v
            and (not sampled or ref_v not in spread)):
        return "backend"
    return "unexplained"


@dataclass(frozen=True)
class RowCause:
    """One disagreeing (row, level) of one attributed run."""

    run: str
    key: str
    row_id: str
    base_sample_id: str
    domain: str
    level: str
    cause: str
    reference: str
    local: str
    bf16: str | None
    sampled: list[str]
    margin: float | None
    bf16_margin: float | None
    sampled_margins: list[float | None]
    reason: str = ""  # strict level: the gate's reason (gate_types.disagreement_reason)


@dataclass(frozen=True)
class RunAttribution:
    """Counts and rows for one attributed greedy run."""

    label: str
    role: str  # "unquantized" or "quantized"
    backend: str
    compared: int
    jointly_valid: int
    missing: list[str]
    rows: list[RowCause]
    counts: dict[str, dict[str, Figure]] = opt(shape=RATE_BOUNDS, default_factory=dict)
    margins: dict[str, dict[str, Any]] = opt(default_factory=dict)
    # p_unsafe drift against the reference: moved but held vs flipped (None: no p_unsafe)
    score_drift: ScoreDrift | None = opt(omit_none=True, default=None)

    def denominator(self, level: str) -> int:
        return self.compared if level == "strict" else self.jointly_valid


@dataclass(frozen=True)
class Attribution(JsonValue):
    """The attribution JSON object (``checks.core.serde``; figures in the
    ``rate_bounds`` shape; a run without p_unsafe has no ``score_drift`` key)."""

    reference: dict[str, Any]
    key_field: str
    sampled_runs: list[str]
    noise_floor: dict[str, Figure] = opt(shape=RATE_BOUNDS)
    runs: list[RunAttribution] = opt()
    settings: dict[str, Any] = opt()


def _interval(hits: Sequence[int], dens: Sequence[int], clusters: Sequence[str],
              replicates: int, seed: int) -> Figure:
    count, den = sum(hits), sum(dens)
    iv = ratio_interval(hits, dens, clusters, replicates=replicates, seed=seed) if den else None
    return Figure.of(count, den, interval=CI(iv.lower if iv else None, iv.upper if iv else None))


def noise_floor(reference: Mapping[str, RefValue], sampled: Sequence[RunInput], *,
                replicates: int, seed: int) -> dict[str, Figure]:
    """Per level: share of reference rows (with >= 2 repeats) whose repeats disagree."""
    out: dict[str, Figure] = {}
    for level in LEVELS:
        hits, dens, clusters = [], [], []
        for key, ref in reference.items():
            reps = [s.records[key] for s in sampled if key in s.records]
            if level == "exact":
                reps = [r for r in reps if r.valid]
            if len(reps) < 2:
                continue
            hits.append(int(len({value(r.score, level) for r in reps}) > 1))
            dens.append(1)
            clusters.append(ref.base_sample_id)
        out[level] = _interval(hits, dens, clusters, replicates, seed)
    return out


def attribute_run(run: RunInput, *, quantized: bool, reference: Mapping[str, RefValue],
                  bf16: RunInput | None, sampled: Sequence[RunInput],
                  replicates: int = DEFAULT_REPLICATES,
                  seed: int = DEFAULT_SEED) -> RunAttribution:
    """Every disagreement of ``run`` with the reference, each with one cause."""
    rows: list[RowCause] = []
    missing: list[str] = []
    flags: dict[str, list[tuple[str, str]]] = {lvl: [] for lvl in LEVELS}  # (key, cause)
    in_den: dict[str, list[str]] = {lvl: [] for lvl in LEVELS}
    for key, ref in reference.items():
        local = run.records.get(key)
        if local is None:
            missing.append(key)
            continue
        in_den["strict"].append(key)
        if ref.score is not None and local.valid:
            in_den["exact"].append(key)
        b = bf16.records.get(key) if bf16 is not None else None
        reps = [s.records[key] for s in sampled if key in s.records]
        for level in disagreement_levels(ref.score, local):
            cause = assign_cause(level, ref.score, local, quantized=quantized, bf16=b,
                                 sampled=reps, identical=ref.same_tokens(local))
            flags[level].append((key, cause))
            rows.append(RowCause(
                run=run.label, key=key, row_id=local.row_id,
                base_sample_id=local.base_sample_id, domain=local.domain, level=level,
                cause=cause, reference=value(ref.score, level), local=value(local.score, level),
                bf16=None if b is None else value(b.score, level),
                sampled=[value(r.score, level) for r in reps], margin=local.decision_margin,
                bf16_margin=None if b is None else b.decision_margin,
                sampled_margins=[r.decision_margin for r in reps],
                reason=(disagreement_reason(True, local.valid, ref.score is not None)
                        if level == "strict" else "")))
    counts: dict[str, dict[str, Figure]] = {}
    margins: dict[str, dict[str, Any]] = {}
    for level in LEVELS:
        keys = in_den[level]
        clusters = [reference[k].base_sample_id for k in keys]
        by_key = dict(flags[level])
        counts[level] = {"disagreements": _interval(
            [int(k in by_key) for k in keys], [1] * len(keys), clusters, replicates, seed)}
        margins[level] = {}
        for cause in CAUSES:
            counts[level][cause] = _interval([int(by_key.get(k) == cause) for k in keys],
                                             [1] * len(keys), clusters, replicates, seed)
            margins[level][cause] = quantiles(
                [r.margin for r in rows if r.level == level and r.cause == cause]).to_dict()
    return RunAttribution(
        label=run.label, role="quantized" if quantized else "unquantized", backend=run.backend,
        compared=len(in_den["strict"]), jointly_valid=len(in_den["exact"]), missing=missing,
        rows=rows, counts=counts, margins=margins,
        score_drift=_drift(reference, run, in_den["strict"], replicates, seed))


def _drift(reference: Mapping[str, RefValue], run: RunInput, keys: Sequence[str],
           replicates: int, seed: int) -> ScoreDrift | None:
    """|delta p_unsafe| of the run against the reference on ``keys``: rows that
    moved but held their strict decision apart from rows that flipped."""
    local = [run.records[k] for k in keys]
    return score_drift(
        list(keys), [reference[k].p_unsafe for k in keys],
        [r.p_unsafe if r.valid else None for r in local],
        [reference[k].base_sample_id for k in keys],
        [strict_decision(reference[k].score) for k in keys],
        [r.strict_decision for r in local], replicates=min(replicates, QUICK_REPLICATES),
        seed=seed)


def attribute(reference: Mapping[str, RefValue], *, key_field: str,
              reference_info: Mapping[str, Any] | None = None,
              bf16: RunInput | None = None, quantized: Sequence[RunInput] = (),
              sampled: Sequence[RunInput] = (), replicates: int = DEFAULT_REPLICATES,
              seed: int = DEFAULT_SEED) -> Attribution:
    """Attribute the disagreements of ``bf16`` and each ``quantized`` run."""
    if bf16 is None and not quantized:
        raise InputError("attribution needs at least one greedy run (--bf16 or --quantized)")
    labels = [r.label for r in (*([bf16] if bf16 else []), *quantized, *sampled)]
    if len(set(labels)) != len(labels):
        raise InputError(f"two runs share a label: {labels}")
    runs = []
    if bf16 is not None:
        runs.append(attribute_run(bf16, quantized=False, reference=reference, bf16=bf16,
                                  sampled=sampled, replicates=replicates, seed=seed))
    for q in quantized:
        runs.append(attribute_run(q, quantized=True, reference=reference, bf16=bf16,
                                  sampled=sampled, replicates=replicates, seed=seed))
    return Attribution(
        reference=dict(reference_info or {}), key_field=key_field,
        sampled_runs=[s.label for s in sampled],
        noise_floor=noise_floor(reference, sampled, replicates=replicates, seed=seed),
        runs=runs,
        settings={"causes_in_order": list(CAUSES), "levels": list(LEVELS),
                  "level_rules": dict(LEVEL_RULES),
                  "bootstrap": {"replicates": replicates, "seed": seed,
                                "clusters": "base_sample_id", "stratified": False}})


def reference_from_records(records: Sequence[Record], key_field: str) -> dict[str, RefValue]:
    """A records reference keyed like the runs (``row_id`` or ``base_sample_id``)."""
    keyed = RunInput.from_records("reference", records, key_field)
    return {k: RefValue(k, r.score, r.base_sample_id, r.domain,
                        tuple(r.output_token_ids), r.input_sha256, r.output_text,
                        r.p_unsafe if r.valid else None)
            for k, r in keyed.records.items()}


def _fmt_count(c: Figure) -> str:
    if c.point is None:
        return frac(c)
    ci = "" if c.lower is None else f" [{c.lower:.3f}, {c.upper:.3f}]"
    return f"{frac(c)} ({c.point:.3f}){ci}"


def _fmt_margin(q: Mapping[str, Any]) -> str:
    if not q["n"]:
        return "-"
    return f"min {q['q00']:.2f} median {q['q50']:.2f} max {q['q100']:.2f}"


def format_table(att: Attribution) -> str:
    """Readable summary: noise floor, counts per cause with intervals, rows."""
    lines = []
    if att.sampled_runs:
        nf = att.noise_floor
        n = len(att.sampled_runs)
        lines.append(f"sampling-noise floor ({n} sampled repeat{'' if n == 1 else 's'}): "
                     f"strict {_fmt_count(nf['strict'])}, exact {_fmt_count(nf['exact'])}")
    else:
        lines.append("sampling-noise floor: no sampled runs given (the sampling cause "
                     "cannot be assigned)")
    for run in att.runs:
        lines.append("")
        lines.append(f"{run.label} ({run.role}, {run.backend or 'backend unknown'}): "
                     f"{run.compared} rows compared, {len(run.missing)} missing")
        lines.append(f"  {'cause':<14}{'strict (gate rule)':<32}{'exact (jointly valid)':<32}"
                     "margins (strict)")
        for cause in ("disagreements", *CAUSES):
            s, e = run.counts["strict"][cause], run.counts["exact"][cause]
            m = _fmt_margin(run.margins["strict"][cause]) if cause in CAUSES else ""
            lines.append(f"  {cause:<14}{_fmt_count(s):<32}{_fmt_count(e):<32}{m}")
        for level in LEVELS:
            if att.sampled_runs:
                hits = run.counts[level]["sampling"].count
                total = run.counts[level]["disagreements"].count
                lines.append(f"  sampling alone explains {hits} of {total} {level} "
                             f"disagreement{'' if total == 1 else 's'}")
        if run.score_drift is not None:
            lines.append(f"  {drift_line(run.score_drift)} (moved but held: the decision "
                         "stayed; flipped: it changed)")
        for r in run.rows:
            why = f" ({r.reason})" if r.reason and r.reason != "strict" else ""
            lines.append(f"  {r.key}  {r.level:<6} {r.cause + why:<13} ref {r.reference} "
                         f"local {r.local} bf16 {r.bf16 or '-'} sampled "
                         f"[{','.join(r.sampled)}] margin "
                         f"{'-' if r.margin is None else f'{r.margin:.2f}'}")
    return "\n".join(lines)


def write_json(att: Attribution, out: str | Path) -> Path:
    from guardrepro.rundir.outputs import write_json_atomic

    return write_json_atomic(out, att.to_dict())
