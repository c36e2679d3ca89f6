"""Generation attempts for prepared rows, and the records they become.

Input: ``PreparedRow`` values (a cohort row with its rendered prompt, hash and
prompt token ids), a loaded ``Runner``, a guard adapter and ``DecodingParams``.
Output: per row, the list of attempts (``schema.Attempt`` with the generation
and parse components), then one ``schema.Record``.

Invariants:

- Greedy: one attempt. Sampled (the authors' mode): up to ``max_attempts``
  attempts per row until one parses; attempt ``a`` (counted from 1, as the
  published code counts) is seeded with
  ``DecodingParams.seed_for(base_sample_id, serialization, a)`` (the
  published per-base seeds: every variant of a base shares them), and the
  seed is stored in the attempt.
- An ``InferenceError`` from the runner becomes an ``inference_error`` attempt
  for the rows concerned only: a failing batch is retried one request at a
  time to isolate them. The error message goes into ``error_type``.
- An attempt no verdict was read from is ``truncated`` when its generation
  reached ``max_new_tokens`` (``finish_reason`` "length") and the guard reads
  its verdict from the text, else ``parse_error``; both are retried in sampled
  mode.
- The record's output, status, error type, components and decision margin
  come from the last attempt; its timings are summed over attempts and its
  peak memory is their maximum.
- A logit guard is scored from the generation's ``score_logits``
  (``guard.parse_scored``); every other guard parses the text.
- The decision margin is ``step_margins[i]`` for the generated token ``i``
  whose decoded span contains the first character of the harmfulness rating
  value (``guard.decision_char_offset``): the first ``i`` with
  ``len(decode(ids[:i+1])) > offset`` (found by bisection, see
  ``token_index_at``). None when no rating was generated.
- A model guard's ``label_probs`` / ``p_unsafe`` are read at that same token
  ``i`` from the generation's ``label_logits`` (a logit guard: from its
  ``score_logits``), by ``guards.decision``; a rule guard has none.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence, Sized
from dataclasses import dataclass
from itertools import islice
from typing import Any

from guardrepro.decoding import DecodingParams
from guardrepro.errors import InferenceError
from guardrepro.guards.base import GuardAdapter
from guardrepro.guards.decision import (
    DecisionScores,
    LabelTable,
    decision_scores,
    label_tokens,
    logit_scores,
    tokens_for,
)
from guardrepro.run.runners.base import Generation, GenerationRequest, Runner
from guardrepro.rundir.record_checks import UNPARSED_STATUSES, unparsed_status
from guardrepro.rundir.records import RecordWriter, utc_now
from guardrepro.schema import Attempt, CohortRow, Provenance, Record, Timings


@dataclass(frozen=True)
class PreparedRow:
    """A cohort row with its rendered prompt, hash and prompt token ids."""

    row: CohortRow
    text: str
    input_sha256: str
    token_ids: tuple[int, ...]
    messages: tuple[tuple[str, str], ...] | None = None
    score_token_ids: tuple[int, ...] = ()
    # each decision label's token ids, and all of them once (``guards.decision``)
    label_tokens: LabelTable = ()
    label_token_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class AttemptScores:
    """What one attempt's output gave besides its ``Attempt``: the parser's
    components and the decision-label probabilities (None: a rule guard)."""

    components: Mapping[str, Any] | None
    decision: DecisionScores | None


def label_table(guard: GuardAdapter, tokenizer: Any) -> LabelTable:
    """Each decision label's token ids under ``tokenizer`` (``plain_ids``), per
    lead, for a guard scored by parsing; empty for a logit or rule guard."""
    if guard.scoring != "parse" or not guard.decision_labels:
        return ()
    return label_tokens(guard.decision_labels, tokenizer.plain_ids)


def token_index_at(
    token_ids: Sequence[int], char_offset: int, decode: Callable[[Sequence[int]], str]
) -> int | None:
    """Index of the token whose decoded span contains ``char_offset`` of
    ``decode(token_ids)``: the first ``i`` with ``len(decode(ids[:i+1])) > offset``.

    Found by bisection: O(log n) prefix decodes instead of one per token (n
    decodes of up to n tokens each was quadratic in the output length). Exact
    because a decoded prefix never gets shorter when a token is appended
    (byte-level decoders append bytes; an incomplete UTF-8 sequence shows as
    one replacement character until its last byte arrives), so the predicate
    is monotone in ``i``. ``tests/test_attempts_margin.py`` checks it against
    the linear scan.
    """
    lo, hi = 0, len(token_ids)  # answer in [lo, hi); hi = len means "none"
    while lo < hi:
        mid = (lo + hi) // 2
        if len(decode(token_ids[: mid + 1])) > char_offset:
            hi = mid
        else:
            lo = mid + 1
    return lo if lo < len(token_ids) else None


def decision_index(
    guard: GuardAdapter, generation: Generation, decode: Callable[[Sequence[int]], str]
) -> int | None:
    """The generated token at the decision position (None: never generated)."""
    offset = guard.decision_char_offset(generation.text)
    if offset is None:
        return None
    return token_index_at(generation.token_ids, offset, decode)


def decision_margin(
    guard: GuardAdapter, generation: Generation, decode: Callable[[Sequence[int]], str],
    index: int | None = None,
) -> float | None:
    if index is None:
        index = decision_index(guard, generation, decode)
    if index is None or index >= len(generation.step_margins):
        return None
    return float(generation.step_margins[index])


def _lead(guard: GuardAdapter, generation: Generation, index: int | None,
          decode: Callable[[Sequence[int]], str]) -> str:
    """The decision token's decoded text before the decision character."""
    offset = guard.decision_char_offset(generation.text)
    if index is None or offset is None:
        return ""
    return generation.text[len(decode(generation.token_ids[:index])):offset]


def attempt_decision(guard: GuardAdapter, prepared: PreparedRow, generation: Generation,
                     index: int | None,
                     decode: Callable[[Sequence[int]], str]) -> DecisionScores | None:
    """The decision-label probabilities of one generation (None: a rule guard)."""
    if not guard.decision_labels:
        return None
    if guard.scoring == "logit":
        return logit_scores(labels=guard.decision_labels, score_tokens=guard.score_tokens,
                            score_logits=generation.score_logits)
    return decision_scores(
        labels=guard.decision_labels, scores=guard.label_scores(generation.text),
        tokens=tokens_for(prepared.label_tokens, _lead(guard, generation, index, decode)),
        union=prepared.label_token_ids,
        output_ids=generation.token_ids, index=index, step_logits=generation.label_logits)


def _safe_generate(
    runner: Runner, requests: list[GenerationRequest], params: DecodingParams
) -> dict[str, Generation | str]:
    """Generation per row id, or the InferenceError message for that row."""
    try:
        gens = runner.generate(requests, params)
        if [g.row_id for g in gens] != [r.row_id for r in requests]:
            raise InferenceError(
                f"{runner.backend} runner returned rows {[g.row_id for g in gens]} for "
                f"requests {[r.row_id for r in requests]}"
            )
        return {g.row_id: g for g in gens}
    except InferenceError as exc:
        if len(requests) == 1:
            return {requests[0].row_id: f"InferenceError: {exc}"}
    out: dict[str, Generation | str] = {}
    for request in requests:  # isolate the failing request(s)
        out.update(_safe_generate(runner, [request], params))
    return out


def _attempt(
    guard: GuardAdapter,
    prepared: PreparedRow,
    result: Generation | str,
    seed: int | None,
    decode: Callable[[Sequence[int]], str],
) -> tuple[Attempt, AttemptScores]:
    """One attempt from a generation (or an inference error message), parsed."""
    if isinstance(result, str):
        missing = DecisionScores.missing("inference error: no output") \
            if guard.decision_labels else None
        return (Attempt("", [], "error", "inference_error", None, result, None, seed),
                AttemptScores(None, missing))
    parsed = guard.parse_scored(result.text, result.score_logits)
    # a logit guard reads its verdict at the first position: a length stop cuts nothing
    failed = (unparsed_status(result.finish_reason) if guard.scoring == "parse"
              else "parse_error")
    index = decision_index(guard, result, decode)
    attempt = Attempt(
        text=result.text,
        token_ids=list(result.token_ids),
        finish_reason=result.finish_reason,
        status="ok" if parsed.status == "ok" else failed,
        score=parsed.score if parsed.status == "ok" else None,
        error_type=parsed.error_type,
        decision_margin=decision_margin(guard, result, decode, index),
        seed=seed,
    )
    return attempt, AttemptScores(parsed.components,
                                  attempt_decision(guard, prepared, result, index, decode))


# One row's attempts: (attempt, its generation or None, components and label probabilities).
AttemptLog = list[tuple[Attempt, Generation | None, AttemptScores]]


def generate_chunk(
    runner: Runner,
    guard: GuardAdapter,
    chunk: Sequence[PreparedRow],
    params: DecodingParams,
    decode: Callable[[Sequence[int]], str],
) -> dict[str, AttemptLog]:
    """Every attempt for each row of ``chunk``, by row id."""
    history: dict[str, AttemptLog] = {p.row.row_id: [] for p in chunk}
    pending = list(chunk)
    for attempt_index in range(params.max_attempts):
        if not pending:
            break
        seeds = {
            p.row.row_id: params.seed_for(p.row.base_sample_id, p.row.serialization,
                                          attempt_index + 1)
            for p in pending
        }
        requests = [
            GenerationRequest(p.row.row_id, p.token_ids, seeds[p.row.row_id], p.text,
                              p.messages, p.score_token_ids, p.label_token_ids)
            for p in pending
        ]
        results = _safe_generate(runner, requests, params)
        still = []
        for p in pending:
            result = results[p.row.row_id]
            attempt, scores = _attempt(guard, p, result, seeds[p.row.row_id], decode)
            generation = result if isinstance(result, Generation) else None
            history[p.row.row_id].append((attempt, generation, scores))
            if attempt.status in UNPARSED_STATUSES:
                still.append(p)
        pending = still
    return history


def make_record(
    run_id: str,
    prepared: PreparedRow,
    attempts: AttemptLog,
    provenance: Provenance,
    provenance_sha256: str,
) -> Record:
    final, _, scores = attempts[-1]
    components, decision = scores.components, scores.decision
    timings = Timings(0.0, 0.0, 0.0)
    peaks = []
    for _, gen, _ in attempts:
        if gen is not None:
            timings += gen.timings
            if gen.peak_memory_bytes is not None:
                peaks.append(gen.peak_memory_bytes)
    row = prepared.row
    return Record(
        run_id=run_id,
        row_id=row.row_id,
        base_sample_id=row.base_sample_id,
        cohort=row.cohort,
        variant=row.variant,
        domain=row.domain,
        gold_label=row.gold_label,
        input_sha256=prepared.input_sha256,
        prompt_tokens=len(prepared.token_ids),
        provenance_sha256=provenance_sha256,
        provenance=provenance,
        status=final.status,
        score=final.score,
        error_type=final.error_type,
        components=dict(components) if components is not None else None,
        decision_margin=final.decision_margin,
        output_text=final.text,
        output_token_ids=list(final.token_ids),
        finish_reason=final.finish_reason,
        attempts=tuple(a for a, _, _ in attempts),
        timings=timings,
        peak_memory_bytes=max(peaks) if peaks else None,
        created_at=utc_now(),
        **_decision_fields(decision),
    )


def _decision_fields(decision: DecisionScores | None) -> dict[str, Any]:
    """The record's ``label_probs`` / ``p_unsafe`` / ``expected_score`` /
    ``p_unsafe_reason`` (none for a rule guard)."""
    if decision is None:
        return {}
    return {"label_probs": decision.label_probs, "p_unsafe": decision.p_unsafe,
            "expected_score": decision.expected_score, "p_unsafe_reason": decision.reason}


def generate_into(writer: RecordWriter, todo: Iterable[PreparedRow], runner: Runner,
                  guard: GuardAdapter, params: DecodingParams,
                  decode: Callable[[Sequence[int]], str], *, chunk_size: int, run_id: str,
                  provenance: Provenance, progress: bool,
                  on_rows: Callable[[int], None] | None = None,
                  total: int | None = None) -> None:
    """Generate ``todo`` (a list, or an iterator of ``total`` rows, consumed a
    chunk at a time) in chunks of ``chunk_size`` and append each row's record
    to ``writer`` as soon as its chunk is done (then ``on_rows(len(chunk))``);
    ``progress``: a bar on a terminal, a line now and then elsewhere."""
    from guardrepro.progress import progress_bar

    if total is None:
        total = len(todo) if isinstance(todo, Sized) else 0
    bar = progress_bar(total, f"run {run_id}", "row", enabled=progress)
    digest = provenance.sha256  # hashed once, not once per record
    rows = iter(todo)
    try:
        while chunk := list(islice(rows, chunk_size)):
            history = generate_chunk(runner, guard, chunk, params, decode)
            for p in chunk:
                writer.append(make_record(run_id, p, history[p.row.row_id], provenance, digest))
            bar.update(len(chunk))
            if on_rows is not None:
                on_rows(len(chunk))
    finally:
        bar.close()
