"""Run teacher-forced divergence against a reference run (models loaded here).

Input: the reference run directory and the profile that made it; candidate
profiles. Output: the reference log-prob file (``divergence.REFERENCE_FILE``)
and, per candidate, ``{"rows": [...], "overall": {...}}`` (see
``guardrepro.experiments.divergence`` for the figures and invariants).

Invariants: prompt ids come from the reference profile's guard and tokenizer
and must reproduce each record's ``input_sha256``; the candidate sees exactly
the reference's ids (never its own tokenization); a candidate whose vocabulary
differs from the reference's is refused.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from guardrepro.errors import InputError, ProvenanceError
from guardrepro.experiments.divergence import (
    ForcedRow,
    forced_logits,
    forced_rows,
    load_reference,
    log_softmax,
    row_divergence,
    save_reference,
    summarize,
)
from guardrepro.progress import progress_iter
from guardrepro.run.profile import RunProfile


def _open_runner(profile: RunProfile, home: str | Path | None) -> tuple[Any, Any]:
    from guardrepro.run.resolve import resolve_profile
    from guardrepro.run.runners.registry import create_runner

    resolved = resolve_profile(profile, home=home)
    runner = create_runner(profile.descriptor, resolved.checkpoint_dir, resolved.runner_options,
                           eos_token_ids=resolved.tokenizer.eos_token_ids,
                           pad_token_id=resolved.tokenizer.pad_token_id,
                           decode=resolved.tokenizer.decode)
    return resolved, runner


def reference_rows(profile: RunProfile, run_dir: Path, resolved: Any) -> list[ForcedRow]:
    """Prompt ids, generated ids and decision index of every recorded row."""
    from guardrepro.guards.registry import record_parser
    from guardrepro.run.attempts import token_index_at
    from guardrepro.run.pipeline import prepare_rows
    from guardrepro.rundir.cohort import read_cohort
    from guardrepro.rundir.manifest import read_manifest
    from guardrepro.rundir.records import read_records

    manifest = read_manifest(run_dir)
    if manifest is None:
        raise InputError("no manifest.json", file=str(run_dir))
    records = read_records(run_dir / "records.jsonl", parsers=record_parser)
    by_id = {r.row_id: r for r in records}
    cohort = [row for row in read_cohort(manifest.cohort["path"]) if row.row_id in by_id]
    prepared = prepare_rows(resolved.guard, resolved.tokenizer, cohort,
                            profile.decoding.max_new_tokens)
    prompts: dict[str, tuple[int, ...]] = {}
    decisions: dict[str, int | None] = {}
    for p in prepared:
        rec = by_id[p.row.row_id]
        if p.input_sha256 != rec.input_sha256:
            raise ProvenanceError(f"{run_dir}: row {rec.row_id!r} renders differently with "
                                  f"{profile.path} than when it was recorded")
        prompts[rec.row_id] = p.token_ids
        offset = resolved.guard.decision_char_offset(rec.output_text)
        decisions[rec.row_id] = None if offset is None else token_index_at(
            rec.output_token_ids, offset, resolved.tokenizer.decode)
    return forced_rows(records, prompts, decisions)


def build_reference(profile: RunProfile, run_dir: Path, out: Path, *,
                    home: str | Path | None = None, progress: bool = True) -> Path:
    """Score the reference run on its own tokens and save the log-probs once."""
    from guardrepro.rundir.manifest import read_manifest

    resolved, runner = _open_runner(profile, home)
    try:
        rows = reference_rows(profile, run_dir, resolved)
        logprobs = []
        for row in progress_iter(rows, "reference logits", "row", enabled=progress):
            logprobs.append(log_softmax(forced_logits(runner, row)).astype(np.float32))
    finally:
        runner.close()
    manifest = read_manifest(run_dir)
    assert manifest is not None
    save_reference(out, rows, logprobs, {"run": str(run_dir), "profile": str(profile.path),
                                         "provenance_sha256": manifest.provenance_sha256})
    return out


def candidate_divergence(profile: RunProfile, reference: Path, *,
                         home: str | Path | None = None, progress: bool = True,
                         label: str = "divergence",
                         on_row: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Per-row and overall divergence of the candidate from the stored reference."""
    ref = load_reference(reference)
    _, runner = _open_runner(profile, home)
    per_row, kls = [], []
    try:
        for i, row in enumerate(progress_iter(ref.rows, label, "row", enabled=progress)):
            logits = forced_logits(runner, row)
            if logits.shape != ref.logprobs[i].shape:
                raise InputError(f"row {row.row_id!r}: candidate logits {logits.shape} vs "
                                 f"reference {ref.logprobs[i].shape} (different vocabulary?)",
                                 file=str(reference))
            item, kl = row_divergence(row, ref.logprobs[i], logits)
            per_row.append(item)
            kls.append(kl)
            if on_row is not None:
                on_row(i)
    finally:
        runner.close()
    return {"reference": dict(ref.meta), "rows": per_row, "overall": summarize(per_row, kls)}
