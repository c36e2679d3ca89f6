"""The pandas face of guardrepro (``import guardrepro as gr``).

Input: run directories (``records.jsonl`` + ``manifest.json``), cohort JSONL
files, gate specs. Output: pandas DataFrames with typed columns, the checks'
own typed results (``checks.stats.compute.StatsResult``, ``checks.parity.gate.GateResult``,
whose ``to_frame()`` tables come from ``checks.core.tables``) and exports of tables
to CSV or Parquet.

Invariants:
- ``load_run`` has one row per *expected* cohort row (the checks' row set):
  a row without a record is present with ``status == "missing"`` and null
  score, never dropped. Variants are an ordered categorical in cohort order
  with ``original`` first.
- ``strict_decision`` is fail-closed: invalid and missing rows count as
  unsafe (1), exactly as in the checks.
- Nullable columns use pandas' nullable dtypes (``Float64``, ``Int64``,
  ``boolean``, ``string``), so a missing score stays missing, never NaN-coerced
  into a number or a boolean.
- Nothing here computes a statistic of its own: stats, gate, compare and
  attribution come from the same functions as the CLI verbs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from guardrepro.checks.core.bootstrap import DEFAULT_REPLICATES, DEFAULT_SEED
from guardrepro.checks.core.tables import pandas, write_table
from guardrepro.checks.parity.attribute import attribute as run_attribution
from guardrepro.checks.parity.compare import Comparison, RowComparison, compare_runs
from guardrepro.checks.parity.gate import GateResult
from guardrepro.checks.parity.loaders import RunSource, load_reference, load_run_input
from guardrepro.checks.report.markdown import load_gate as read_gate
from guardrepro.checks.report.markdown import load_or_compute_stats
from guardrepro.checks.stats.compute import StatsResult, compute_stats
from guardrepro.rundir.cohort import read_cohort
from guardrepro.rundir.read import RowResult, RunData, load_run_data, variant_order
from guardrepro.schema import strict_decision

RUN_DTYPES = {
    "row_id": "string", "base_sample_id": "string", "domain": "string",
    "gold_label": "float64", "status": "category", "score": "Float64", "valid": "bool",
    "strict_decision": "Int8", "decision_margin": "Float64", "p_unsafe": "Float64",
    "error_type": "string",
    "output_text": "string", "output_tokens": "Int64", "prompt_tokens": "Int64",
    "input_sha256": "string", "output_token_ids": "object", "components": "object",
    "backend": "string", "run_id": "string",
}


def read_run(path: str | Path, cohort: str | Path | None = None) -> RunData:
    """A run directory read once (``rundir.read.load_run_data``: manifest, records,
    cohort, expected rows and their hashes): what ``load_run``, ``stats``,
    ``gate`` and ``compare`` take instead of a path, so nothing is read again."""
    return load_run_data(path, cohort)


def load_run(path: str | Path | RunData, cohort: str | Path | None = None) -> Any:
    """DataFrame of a run: one row per expected cohort row (see module docstring).

    ``path`` is a run directory (read once, ``rundir.read.load_run_data``) or a
    ``RunData`` already read; ``cohort`` overrides the cohort named in its
    manifest (without either, the expected rows are the records' grid)."""
    pd = pandas()
    data = path if isinstance(path, RunData) else load_run_data(path, cohort)
    rows, records = data.expected, data.by_id
    out = []
    for r in rows.rows:
        rec = records.get(r.row_id)
        out.append({
            "row_id": r.row_id, "base_sample_id": r.base_sample_id, "variant": r.variant,
            "domain": r.domain, "gold_label": r.gold_label, "status": r.status,
            "score": r.score, "valid": r.valid,
            "strict_decision": strict_decision(r.score),  # fail-closed
            "decision_margin": r.decision_margin,
            "p_unsafe": r.p_unsafe,
            "error_type": rec.error_type if rec else None,
            "output_text": rec.output_text if rec else None,
            "output_tokens": len(rec.output_token_ids) if rec else None,
            "prompt_tokens": rec.prompt_tokens if rec else None,
            "input_sha256": rec.input_sha256 if rec else None,
            "output_token_ids": list(rec.output_token_ids) if rec else None,
            "components": dict(rec.components) if rec and rec.components else None,
            "backend": rec.provenance.backend if rec else None,
            "run_id": rec.run_id if rec else None,
        })
    df = pd.DataFrame(out, columns=["row_id", "base_sample_id", "variant", *[
        c for c in RUN_DTYPES if c not in ("row_id", "base_sample_id")]])
    df = df.astype(RUN_DTYPES)
    order = variant_order([r.variant for r in rows.rows])
    df["variant"] = pd.Categorical(df["variant"], categories=order, ordered=True)
    df.attrs.update({"run_dir": str(data.run_dir if isinstance(path, RunData) else path),
                     "expected_source": rows.expected_source,
                     "records": rows.records})
    return df


def load_cohort(path: str | Path) -> Any:
    """DataFrame of a cohort file: one row per line, the row's top-level fields
    plus each ``sample`` field as ``sample.<name>``; ``row_id`` first."""
    pd = pandas()
    out = []
    for row in read_cohort(path):
        data = row.to_dict()
        sample = data.pop("sample")
        out.append({"row_id": row.row_id, **data,
                    **{f"sample.{k}": v for k, v in sample.items()}})
    df = pd.DataFrame(out)
    df["variant"] = pd.Categorical(df["variant"], categories=variant_order(list(df["variant"])),
                                   ordered=True)
    df.attrs["cohort_path"] = str(path)
    return df


def stats(run: Any, *, replicates: int | None = None, seed: int | None = None,
          cohort: str | Path | None = None) -> StatsResult:
    """Statistics of a run directory or ``RunData`` (its stats.json when its
    cache key matches: ``checks.stats.cache``; None settings match any, else
    computed and written) or of a ``load_run`` DataFrame (always computed; None
    settings: the defaults)."""
    if isinstance(run, RunData):
        return load_or_compute_stats(run.run_dir, replicates=replicates, seed=seed,
                                     cohort=cohort, run=run)
    if isinstance(run, str | Path):
        return load_or_compute_stats(run, replicates=replicates, seed=seed, cohort=cohort)
    rows = [RowResult(r.row_id, r.base_sample_id, str(r.variant), r.domain,
                      float(r.gold_label), r.status,
                      None if _is_na(r.score) else float(r.score),
                      None if _is_na(r.decision_margin) else float(r.decision_margin))
            for r in run.itertuples(index=False)]
    source = run.attrs.get("expected_source", "dataframe")
    return compute_stats(rows, replicates=DEFAULT_REPLICATES if replicates is None else replicates,
                         seed=DEFAULT_SEED if seed is None else seed, expected_source=source)


def _is_na(value: Any) -> bool:
    return value is None or bool(pandas().isna(value))


def load_gate(run: str | Path) -> GateResult | None:
    """The run directory's gate.json (written by ``guardrepro gate``), or None."""
    return read_gate(run)


def gate(run: str | Path | RunData, spec: str | Path, *, cohort: str | Path | None = None,
         conservative: bool = False) -> GateResult:
    """The parity gate of a run directory (or its ``RunData``) against a spec
    (nothing is written)."""
    from guardrepro.checks.parity.rows import gate_run

    return gate_run(run, spec, cohort=cohort, conservative=conservative)


def compare(a: str | Path | RunData, b: str | Path | RunData) -> Any:
    """Row-by-row comparison of two runs (directories or ``RunData``); the summary
    is in ``df.attrs``."""
    return comparison_frame(compare_runs(a, b))


def comparison_frame(comparison: Comparison) -> Any:
    """A ``Comparison``'s rows as a DataFrame; the summary in ``df.attrs`` as
    JSON (``CompareSummary.to_dict()``: attrs travel into Parquet metadata)."""
    cols = [f.name for f in fields(RowComparison)]
    df = pandas().DataFrame([asdict(r) for r in comparison.rows], columns=cols)
    for col in ("score_a", "score_b", "margin_a", "margin_b"):
        df[col] = df[col].astype("Float64")
    df["first_divergence"] = df["first_divergence"].astype("Int64")
    df["exact_agree"] = df["exact_agree"].astype("boolean")
    df.attrs["summary"] = comparison.summary().to_dict()
    return df


def export(df: Any, path: str | Path) -> Path:
    """Write a DataFrame from this API as CSV or Parquet (by suffix), atomically."""
    return write_table(df, path)


def attribute(reference: RunSource, *, bf16: RunSource | None = None,
              quantized: Sequence[RunSource] = (), sampled: Sequence[RunSource] = (),
              replicates: int = DEFAULT_REPLICATES, seed: int = DEFAULT_SEED) -> Any:
    """Attribution of every disagreement (one row per run, row and level);
    the full ``Attribution`` is in ``df.attrs["attribution"]``. The reference is a
    gate spec or a run; each run is a directory or records file (read once) or a
    run already read (``read_run``'s ``RunData``, or a ``rundir.read.RecordsFile``),
    which is not read again."""
    ref, key_field, info = load_reference(reference)
    att = run_attribution(
        ref, key_field=key_field, reference_info=info,
        bf16=None if bf16 is None else load_run_input(bf16, key_field),
        quantized=[load_run_input(q, key_field) for q in quantized],
        sampled=[load_run_input(s, key_field) for s in sampled],
        replicates=replicates, seed=seed)
    cols = ["run", "key", "row_id", "base_sample_id", "domain", "level", "cause",
            "reference", "local", "bf16", "sampled", "margin", "bf16_margin", "sampled_margins"]
    df = pandas().DataFrame([asdict(r) for run in att.runs for r in run.rows], columns=cols)
    df["margin"] = df["margin"].astype("Float64")
    df.attrs["attribution"] = att.to_dict()
    return df
