"""Which rows each worker of ``run --workers N`` makes: a split balanced on prompt size.

Input: the rows a run still has to do and the worker count. Output: for each
row, the worker that makes it (0-based), fixed before any worker starts.

Invariants:

- Deterministic: the split depends on the rows to do alone (their order and
  sizes), never on timing, so a rerun of the same command splits the same
  rows the same way, and every batch a worker makes, hence every record down
  to the last bit of its margins, is the same.
- Balanced on what is known in advance: a row's cost grows with its prompt
  (prefill, and every decoding step reads the prompt's keys and values), so
  rows are taken largest first and each goes to the worker with the least
  size so far (longest processing time first; ties to the lower worker,
  equal sizes in their given order). A row's size is the length of its
  sample as JSON (``row_size``): the texts the prompt renders, read without a
  tokenizer, so the parent splits before any worker loads one. How long each
  answer will be is not known, and not guessed.
- Why not by row id: a hash of the id ignores size. On the synthetic
  32-row long-prompt cohort it gave one of two workers all four
  13,087-token prompts, and that worker ran 1.5x as long as the other;
  split by size, each gets two (docs/THROUGHPUT.md). ``--shard k/N`` (several
  hosts, merged later) keeps the hash, which needs no other row to decide.
- One rule for both engines: ``--engine ray`` cuts its units with it too
  (``ray_pool.split_units``), so K units on Ray batch the rows exactly as K
  local workers do.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Callable, Sequence
from typing import TypeVar

from guardrepro.schema import CohortRow

T = TypeVar("T")


def row_size(row: CohortRow) -> int:
    """The size a row's prompt is balanced by: characters of its sample as JSON
    (sorted keys), which holds every text the prompt renders."""
    return len(json.dumps(row.sample, ensure_ascii=False, sort_keys=True))


def balanced_parts(sizes: Sequence[int], parts: int) -> list[int]:
    """The part (0 to ``parts - 1``) of each item of ``sizes``: largest first,
    each to the part with the least total so far (see the module docstring)."""
    if parts < 1:
        raise ValueError(f"parts must be >= 1, got {parts}")
    order = sorted(range(len(sizes)), key=lambda i: (-sizes[i], i))
    totals = [(0, part) for part in range(parts)]  # a heap of (total, part)
    out = [0] * len(sizes)
    for i in order:
        total, part = heapq.heappop(totals)
        out[i] = part
        heapq.heappush(totals, (total + sizes[i], part))
    return out


def balanced_split(items: Sequence[T], parts: int, size: Callable[[T], int]) -> list[list[T]]:
    """``items`` in ``parts`` lists by ``balanced_parts`` on ``size`` (each list in
    the items' order)."""
    out: list[list[T]] = [[] for _ in range(parts)]
    for item, part in zip(items, balanced_parts([size(i) for i in items], parts), strict=True):
        out[part].append(item)
    return out
