"""Rule baselines written as runs: records like any guard's, with no model.

Input: a cohort JSONL file, a rule (``checks.rule_baselines``), and for the
lookup rule the benchmark rows of its declared training split.
Output: a run directory (``manifest.json`` + ``records.jsonl`` +
``artifact.json`` with zero artifact bytes) readable by ``gate``, ``stats``,
``compare`` and ``frontier``.

Invariants: each record's ``score`` is the rule's strict decision (0.0 or
1.0, status ok), ``peak_memory_bytes`` is 0 (no weights), ``timings`` are the
measured seconds of the rule itself; ``input_sha256`` hashes the sample's
canonical JSON (there is no prompt). The provenance names the rule, its
training split and the number of training rows, so a rerun with another split
is refused like any provenance change; an existing complete run is kept.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import guardrepro
from guardrepro.checks.rule_baselines import LookupModel, rule_decisions
from guardrepro.checks.runio import write_json_atomic
from guardrepro.run.records import (
    RecordWriter,
    RunManifest,
    check_resumable,
    git_commit,
    read_manifest,
    utc_now,
    write_manifest,
)
from guardrepro.schema import (
    Provenance,
    Record,
    Timings,
    canonical_json,
    read_cohort,
    sha256_text,
)

RULE_PARSER = "guardrepro-rule-1"


def rule_provenance(rule: str, lookup: LookupModel | None) -> Provenance:
    config: dict[str, Any] = {"rule": rule}
    if lookup is not None:
        config.update(lookup.describe())
    return Provenance(guard=f"rule-{rule}", backend="rule", backend_config=config,
                      artifact_tree_sha256="none", model_revision="none",
                      template_sha256="none", chat_template_sha256="none",
                      parser_version=RULE_PARSER, decoding={"mode": "rule"},
                      package_versions={"guardrepro": guardrepro.__version__})


def run_rule(rule: str, cohort_path: Path, run_dir: Path, *,
             lookup: LookupModel | None = None) -> int:
    """Write the rule's records for every cohort row not yet recorded; returns how many."""
    cohort_path, run_dir = cohort_path.resolve(), run_dir.resolve()
    rows = read_cohort(cohort_path)
    provenance = rule_provenance(rule, lookup)
    manifest = RunManifest(
        run_id=run_dir.name, created_at=utc_now(), provenance=provenance,
        provenance_sha256=provenance.sha256,
        cohort={"path": str(cohort_path), "sha256": sha256_text(cohort_path.read_text(
            encoding="utf-8")), "rows": len(rows)},
        profile={"path": "none", "sha256": "none"}, shard=None, rows_selected=len(rows),
        guardrepro_version=guardrepro.__version__, git_commit=git_commit())
    with RecordWriter(run_dir) as writer:
        existing = read_manifest(run_dir)
        if existing is not None:
            check_resumable(existing, manifest, run_dir)
            manifest = existing
        else:
            write_manifest(run_dir, manifest)
        todo = [r for r in rows if r.row_id not in writer.records]
        start = time.perf_counter()
        decisions = rule_decisions(rule, todo, lookup)
        per_row = (time.perf_counter() - start) / max(1, len(todo))
        for row, decision in zip(todo, decisions, strict=True):
            writer.append(_record(manifest.run_id, row, float(decision), provenance, per_row))
    write_json_atomic(run_dir / "artifact.json", {"artifact_bytes": 0, "rule": rule})
    return len(todo)


def _record(run_id: str, row: Any, score: float, provenance: Provenance,
            seconds: float) -> Record:
    return Record(
        run_id=run_id, row_id=row.row_id, base_sample_id=row.base_sample_id,
        cohort=row.cohort, variant=row.variant, domain=row.domain,
        gold_label=row.gold_label,
        input_sha256=sha256_text(canonical_json(dict(row.sample))), prompt_tokens=0,
        provenance_sha256=provenance.sha256, provenance=provenance, status="ok",
        score=score, error_type=None, components=None, decision_margin=None,
        output_text="", output_token_ids=[], finish_reason="rule", attempts=(),
        timings=Timings(prefill_s=0.0, decode_s=0.0, total_s=seconds),
        peak_memory_bytes=0, created_at=utc_now())


def load_lookup(cohort_spec: Path, cohort_rows: Sequence[Any], train_split: str,
                home: str | Path | None) -> LookupModel:
    """Fit the lookup on the declared split of the cohort spec's benchmark."""
    from guardrepro.artifacts.fetch import materialize
    from guardrepro.bench.cohort.spec import load_spec
    from guardrepro.bench.tsbench import load_benchmark
    from guardrepro.checks.rule_baselines import fit_lookup_model

    spec = load_spec(cohort_spec)
    bench = load_benchmark(materialize(spec.data_lock, home), spec.benchmark)
    return fit_lookup_model(bench, {r.base_sample_id for r in cohort_rows}, train_split)
