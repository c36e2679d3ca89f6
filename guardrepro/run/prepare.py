"""Rows made ready for a runner: rendered, hashed, tokenized and length-checked.

Input: a guard adapter, its tokenizer, cohort rows (a list, or an iterator such
as ``rundir.cohort_stream.CohortScan.rows``) and ``max_new_tokens``. Output:
``attempts.PreparedRow`` values; for a run read as a stream, the two passes
``check_rows`` (every row checked, nothing kept) and ``rows_to_do`` (the rows
without a record, prepared a chunk at a time).

Invariants:

- ``prepare_rows`` renders, hashes and tokenizes each row once; a row that
  cannot be rendered or is too long is a ``PromptError`` naming the cohort
  file, the row's index in the run and its id; the chat template's own system
  prompt is checked (``system_prompt_inserted``) on the run's first row.
- ``check_rows`` prepares every row of the run before anything is generated
  (a bad row is refused up front, as when every row was prepared at once)
  and keeps, of each, only whether it is to do and, for a row already
  recorded, whether its prompt hash is the record's: memory does not grow
  with the rows. ``rows_to_do`` prepares the same rows again, in the same
  order, skipping those recorded, so the rows generated are exactly those
  ``check_rows`` counted.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from itertools import islice
from pathlib import Path
from typing import Any

from guardrepro.errors import PromptError
from guardrepro.guards.base import GuardAdapter
from guardrepro.guards.decision import label_union
from guardrepro.run.attempts import PreparedRow, label_table
from guardrepro.rundir.record_index import RecordIndex
from guardrepro.schema import CohortRow, sha256_text


def prepare_rows(
    guard: GuardAdapter,
    tokenizer: Any,
    rows: Sequence[CohortRow],
    max_new_tokens: int,
    *,
    cohort_path: str | Path | None = None,
    start: int = 0,
    first: bool = True,
) -> list[PreparedRow]:
    """Render, hash, tokenize and length-check each row (PromptError names the row);
    ``start``: the index of ``rows[0]`` in the run; ``first``: ``rows[0]`` is the
    run's first row, whose system prompt is checked."""
    prepared = []
    score_ids = tuple(tokenizer.single_token_id(t) for t in guard.score_tokens)
    labels = label_table(guard, tokenizer)
    if rows and first:
        system_prompt_inserted(guard, tokenizer, rows[0].sample)
    for index, row in enumerate(rows, start=start):
        try:
            text, messages = _rendered(guard, row.sample)
            fields = {f"sample.{k}": v for k, v in row.sample.items() if isinstance(v, str)}
            tokenizer.check_chars(messages, fields, max_new_tokens)  # fail fast: no tokens
            ids = tuple(tokenizer.encode_messages(messages))
            tokenizer.check_length(len(ids), max_new_tokens)
        except (PromptError, KeyError, ValueError) as exc:
            where = f"{cohort_path}: " if cohort_path is not None else ""
            raise PromptError(f"{where}row {index} ({row.row_id}): {exc}") from exc
        pairs = tuple((m["role"], m["content"]) for m in messages)
        prepared.append(PreparedRow(row, text, sha256_text(text), ids, pairs, score_ids,
                                    labels, label_union(labels)))
    return prepared


def _rendered(guard: GuardAdapter, sample: Mapping[str, Any]) -> tuple[str, Any]:
    """The prompt text and messages of ``sample``, rendered once where the
    adapter can (``SpecGuard.rendered``)."""
    both = getattr(guard, "rendered", None)
    if both is not None:
        text, messages = both(sample)
        return text, messages
    return guard.render(sample), guard.messages(sample)


def system_prompt_inserted(guard: GuardAdapter, tokenizer: Any,
                           sample: Mapping[str, Any]) -> str | None:
    """The system prompt the chat template adds on its own to ``sample``'s
    messages (None: none), checked against the guard spec's
    ``default_system_prompt``: ``expected`` (part of the upstream setup, as
    Qwen2.5's for the TS-Guard family) passes, ``allow`` warns, ``forbid`` is
    a ``PromptError`` naming the text, the spec and how to allow it."""
    if not hasattr(tokenizer, "injected_system_prompt"):
        return None
    injected: str | None = tokenizer.injected_system_prompt(guard.messages(sample))
    policy = getattr(guard, "system_prompt", "expected" if guard.default_system_expected
                     else "allow")
    if injected is None or policy == "expected":
        return injected
    what = (f"the chat template adds a system prompt of its own to guard {guard.name!r}'s "
            f"prompt: {injected[:200]!r}")
    if policy == "forbid":
        spec = getattr(getattr(guard, "spec", None), "path", "the guard spec")
        raise PromptError(f"{what}; {spec}, field 'prompt.default_system_prompt' is "
                          '"forbid": give the guard a system message of its own in '
                          '[[prompt.messages]], or set it to "allow" (recorded in the manifest)')
    warnings.warn(what, stacklevel=3)
    return injected


PREPARE_CHUNK = 512  # rows prepared together by the two passes


def _chunks(rows: Iterable[CohortRow], size: int) -> Iterator[list[CohortRow]]:
    it = iter(rows)
    while chunk := list(islice(it, size)):
        yield chunk


def check_rows(guard: GuardAdapter, tokenizer: Any, rows: Iterable[CohortRow],
               max_new_tokens: int, *, cohort_path: str | Path, done: RecordIndex,
               chunk: int | None = None) -> tuple[int, int, dict[str, str]]:
    """Prepare every row (``prepare_rows``' errors) and keep nothing of it:
    (rows, rows without a record in ``done``, {row id: this run's prompt hash}
    for each recorded row whose record has another)."""
    total = todo = 0
    mismatched: dict[str, str] = {}
    for part in _chunks(rows, chunk or PREPARE_CHUNK):
        for p in prepare_rows(guard, tokenizer, part, max_new_tokens,
                              cohort_path=cohort_path, start=total, first=not total):
            row_id = p.row.row_id
            if row_id not in done:
                todo += 1
            elif done.input_sha256(row_id) != p.input_sha256:
                mismatched[row_id] = p.input_sha256
        total += len(part)
    return total, todo, mismatched


def rows_to_do(guard: GuardAdapter, tokenizer: Any, rows: Iterable[CohortRow],
               max_new_tokens: int, *, cohort_path: str | Path, done: RecordIndex,
               chunk: int | None = None) -> Iterator[PreparedRow]:
    """The rows without a record in ``done`` (looked up as they come), prepared
    ``chunk`` at a time, in order."""
    index = 0
    for part in _chunks(rows, chunk or PREPARE_CHUNK):
        start, index = index, index + len(part)
        todo = [row for row in part if row.row_id not in done]
        if todo:  # checked by check_rows already: nothing here raises
            yield from prepare_rows(guard, tokenizer, todo, max_new_tokens,
                                    cohort_path=cohort_path, start=start, first=False)


def mismatched_prompts(done: RecordIndex, prepared: Iterable[PreparedRow]) -> dict[str, str]:
    """{row id: its prompt hash in ``prepared``} of each recorded row whose record
    in ``done`` has another (``check_rows``' third value, for prepared rows)."""
    return {p.row.row_id: p.input_sha256 for p in prepared
            if p.row.row_id in done and done.input_sha256(p.row.row_id) != p.input_sha256}
