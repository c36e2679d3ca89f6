"""Does batching change a runner's outputs? Batch 1 vs the profile's batch size.

Input: a run profile, a cohort file, a sample size ``n`` and a seed. Output:
``InvarianceReport``: for each of the ``n`` sampled rows, the tokens generated
when the row is alone in its ``generate`` call and when it shares calls of the
profile's ``batch_size`` with the other sampled rows, compared token by token.

Invariants:

- The sample is deterministic: rows ordered by sha256 of ``"{seed}:{row_id}"``,
  the first ``n`` taken, then run in cohort order. It depends on the row ids
  and the seed only, never on the file order.
- Both passes use one loaded runner, the same prompt token ids (rendered and
  tokenized once, as the pipeline does) and the profile's decoding (in sampled
  mode every row keeps its attempt-0 seed in both passes). The batch-1 pass
  runs first; a runner with a prefix cache (vLLM) has it cleared before each
  pass so the batched pass recomputes every prompt.
- Per row: ``identical`` (same ids and finish reason), ``first_divergence``
  (index of the first generated position where the two differ, including one
  sequence ending before the other; None when identical), and the common
  prefix length. ``token_agreement`` = sum of common-prefix lengths / sum of
  the longer lengths: the share of generated tokens produced identically
  before any divergence.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from guardrepro.decoding import DecodingParams
from guardrepro.errors import InputError
from guardrepro.run.runners.backends import Backend
from guardrepro.run.runners.base import Generation, GenerationRequest
from guardrepro.rundir.cohort import read_cohort_hashed
from guardrepro.schema import CohortRow
from guardrepro.serde.fields import JsonValue


@dataclass(frozen=True)
class RowAgreement:
    row_id: str
    identical: bool
    first_divergence: int | None
    common_prefix: int
    tokens_batch1: int
    tokens_batched: int
    finish_batch1: str
    finish_batched: str

    @classmethod
    def compare(cls, row_id: str, alone: Generation, batched: Generation) -> RowAgreement:
        a, b = alone.token_ids, batched.token_ids
        prefix = 0
        while prefix < min(len(a), len(b)) and a[prefix] == b[prefix]:
            prefix += 1
        same_ids = len(a) == len(b) == prefix
        identical = same_ids and alone.finish_reason == batched.finish_reason
        # equal ids with different finish reasons diverge at the end
        divergence = None if identical else prefix
        return cls(row_id, identical, divergence, prefix, len(a), len(b),
                   alone.finish_reason, batched.finish_reason)


@dataclass(frozen=True)
class InvarianceReport(JsonValue):
    JSON_DERIVED: ClassVar[tuple[Any, ...]] = ("identical_sequences", "token_agreement",
                                               "invariant")

    profile: str
    backend: str
    cohort: str
    cohort_sha256: str
    sample: int
    seed: int
    batch_size: int
    decoding: dict[str, Any]
    runner: dict[str, Any]
    rows: list[RowAgreement]
    seconds_batch1: float = 0.0
    seconds_batched: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def identical_sequences(self) -> int:
        return sum(1 for r in self.rows if r.identical)

    @property
    def token_agreement(self) -> float:
        total = sum(max(r.tokens_batch1, r.tokens_batched) for r in self.rows)
        if total == 0:
            return 1.0
        return sum(r.common_prefix for r in self.rows) / total

    @property
    def invariant(self) -> bool:
        return self.identical_sequences == len(self.rows)


def compare_passes(
    alone: Sequence[Generation], batched: Sequence[Generation]
) -> list[RowAgreement]:
    """Row-by-row agreement of two passes over the same requests (same order)."""
    if [g.row_id for g in alone] != [g.row_id for g in batched]:
        raise InputError("the two passes cover different rows")
    return [RowAgreement.compare(a.row_id, a, b) for a, b in zip(alone, batched, strict=True)]


def select_sample(rows: Sequence[CohortRow], n: int, seed: int) -> list[CohortRow]:
    """``n`` rows chosen by seeded hash of their ids, returned in cohort order."""
    if n < 1:
        raise InputError(f"sample size must be >= 1, got {n}", field="sample")
    if n > len(rows):
        raise InputError(f"sample of {n} rows from a cohort of {len(rows)}", field="sample")

    def key(row: CohortRow) -> str:
        return hashlib.sha256(f"{seed}:{row.row_id}".encode()).hexdigest()

    chosen = {row.row_id for row in sorted(rows, key=key)[:n]}
    return [row for row in rows if row.row_id in chosen]


def _reset_cache(runner: Any) -> None:
    reset = getattr(runner, "reset_prefix_cache", None)
    if callable(reset):
        reset()


def _pass(runner: Any, requests: Sequence[GenerationRequest], params: DecodingParams,
          size: int, bar: Any) -> tuple[list[Generation], float]:
    """The requests in calls of ``size`` (the runner's prefix cache reset first):
    the generations and the seconds the pass took."""
    _reset_cache(runner)
    start = time.perf_counter()
    out: list[Generation] = []
    for begin in range(0, len(requests), size):
        chunk = requests[begin : begin + size]
        out.extend(runner.generate(chunk, params))
        bar.update(len(chunk))
    return out, time.perf_counter() - start


def _passes(runner: Any, requests: Sequence[GenerationRequest], params: DecodingParams,
            sizes: Sequence[int],
            progress: bool) -> tuple[list[Generation], float, list[tuple[list[Generation], float]]]:
    """The batch-1 pass first, then one pass per size in ``sizes``."""
    from guardrepro.progress import progress_bar

    bar = progress_bar((1 + len(sizes)) * len(requests), "check-invariance", "row",
                       enabled=progress)
    try:
        alone, seconds_alone = _pass(runner, requests, params, 1, bar)
        batched = [_pass(runner, requests, params, size, bar) for size in sizes]
    finally:
        bar.close()
    return alone, seconds_alone, batched


def parse_sizes(text: str) -> list[int]:
    """``"16,44,64"`` -> [16, 44, 64] (each >= 1; ``InputError`` naming
    ``batch_size`` otherwise; duplicates dropped, order kept)."""
    sizes: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit() or int(part) < 1:
            raise InputError(f"batch sizes must be integers >= 1, got {part!r} in {text!r}",
                             field="batch_size")
        if int(part) not in sizes:
            sizes.append(int(part))
    return sizes


def concurrency_note(backend: Backend, options: dict[str, Any], size: int) -> str | None:
    """A note when the profile computes fewer than ``size`` requests together
    (vLLM's ``max_num_seqs``, the lean decoder's ``decode_slots``)."""
    declared = backend.doctor.concurrency
    if not isinstance(declared, tuple):
        return None
    table = backend.options
    values = {name: table.value({**options, "batch_size": size}, name) for name in declared}
    limits = {n: int(v) for n, v in values.items() if v is not None and int(v) < size}
    if not limits:
        return None
    named = ", ".join(f"{n} = {v}" for n, v in sorted(limits.items()))
    return (f"batch size {size}: at most {min(limits.values())} requests are computed "
            f"together ({named})")


def check_invariance(
    profile_path: str | Path,
    cohort_path: str | Path,
    sample: int,
    *,
    seed: int = 0,
    batch_size: int | None = None,
    home: str | Path | None = None,
    progress: bool = True,
) -> InvarianceReport:
    """Run ``sample`` rows at batch 1 and at the batch size (the profile's, or
    ``batch_size`` when given) with one runner and compare the tokens."""
    sizes = None if batch_size is None else [batch_size]
    return check_invariance_sizes(profile_path, cohort_path, sample, seed=seed,
                                  batch_sizes=sizes, home=home, progress=progress)[0]


def check_invariance_sizes(
    profile_path: str | Path,
    cohort_path: str | Path,
    sample: int,
    *,
    seed: int = 0,
    batch_sizes: Sequence[int] | None = None,
    home: str | Path | None = None,
    progress: bool = True,
) -> list[InvarianceReport]:
    """One report per batch size in ``batch_sizes`` (default: the profile's), each
    comparing that size's pass with one batch-1 pass, all with one runner
    (loaded with the largest size as its ``batch_size``)."""
    from guardrepro.run.pipeline import prepare_rows
    from guardrepro.run.profile import RunProfile
    from guardrepro.run.resolve import resolve_profile
    from guardrepro.run.runners.registry import chunk_size, create_runner

    profile = RunProfile.load(profile_path)
    if batch_sizes:
        if min(batch_sizes) < 1:
            raise InputError(f"batch sizes must be >= 1, got {list(batch_sizes)}",
                             field="batch_size")
        profile = profile.with_backend_options(batch_size=max(batch_sizes))
    chunk = chunk_size(profile.descriptor, profile.backend_options)
    sizes = list(batch_sizes) if batch_sizes else [chunk]
    if chunk < max(sizes):
        sizes = [1 for _ in sizes]  # a backend without batching: one request per call
    cohort_path = Path(cohort_path).resolve()
    cohort_rows, cohort_sha256 = read_cohort_hashed(cohort_path)  # one read: rows and hash
    rows = select_sample(cohort_rows, sample, seed)
    resolved = resolve_profile(profile, home=home)
    params = profile.decoding
    prepared = prepare_rows(resolved.guard, resolved.tokenizer, rows, params.max_new_tokens,
                            cohort_path=cohort_path)
    requests = [
        GenerationRequest(
            p.row.row_id,
            p.token_ids,
            params.seed_for(p.row.base_sample_id, p.row.serialization, 1),  # first attempt
            p.text,
        )
        for p in prepared
    ]
    runner = create_runner(
        profile.descriptor,
        resolved.checkpoint_dir,
        resolved.runner_options,
        eos_token_ids=resolved.tokenizer.eos_token_ids,
        pad_token_id=resolved.tokenizer.pad_token_id,
        decode=resolved.tokenizer.decode,
    )
    try:
        description = dict(runner.describe())
        alone, seconds_alone, passes = _passes(runner, requests, params, sizes, progress)
    finally:
        runner.close()
    reports = []
    for size, (batched, seconds_batched) in zip(sizes, passes, strict=True):
        notes = ["the batch size is 1: both passes run one request per call"] if size == 1 \
            else []
        limit = concurrency_note(profile.descriptor, dict(profile.backend_options), size)
        notes.extend([limit] if limit else [])
        reports.append(InvarianceReport(
            profile=str(profile.path), backend=profile.backend, cohort=str(cohort_path),
            cohort_sha256=cohort_sha256, sample=sample, seed=seed, batch_size=size,
            decoding=params.to_dict(), runner=description, rows=compare_passes(alone, batched),
            seconds_batch1=seconds_alone, seconds_batched=seconds_batched, notes=notes))
    return reports


def format_table(report: InvarianceReport) -> str:
    """A fixed-width table of the rows and a summary."""
    header = ("row_id", "identical", "first_div", "tokens_b1", f"tokens_b{report.batch_size}",
              "finish_b1", f"finish_b{report.batch_size}")
    body = [
        (r.row_id, "yes" if r.identical else "NO",
         "-" if r.first_divergence is None else str(r.first_divergence),
         str(r.tokens_batch1), str(r.tokens_batched), r.finish_batch1, r.finish_batched)
        for r in report.rows
    ]
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
             for line in [header, *body]]
    n = len(report.rows)
    lines.append("")
    lines.append(
        f"{report.backend} batch 1 vs batch {report.batch_size}: "
        f"{report.identical_sequences}/{n} sequences identical, token agreement "
        f"{report.token_agreement:.4f} ({report.seconds_batch1:.1f} s vs "
        f"{report.seconds_batched:.1f} s)"
    )
    lines.extend(f"note: {note}" for note in report.notes)
    return "\n".join(lines)
