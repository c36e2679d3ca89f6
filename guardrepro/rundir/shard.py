"""Deterministic sharding of a cohort for scale-out (``guardrepro run --shard k/n``).

Input: cohort rows (anything with a ``row_id``: the derived sample id) and a
shard spec ``"k/n"`` (1-based ``k``, ``1 <= k <= n``). Output: the rows of
shard ``k``, in cohort order.

Invariants:

- a row's shard depends only on its ``row_id`` and ``n`` (the sha256 of the
  id, never its position), so adding, removing or reordering other rows never
  moves it, and every host computes the same assignment;
- for a given ``n`` every row lies in exactly one shard;
- the assignment uses jump consistent hashing (Lamping & Veach, 2014) on the
  first 8 bytes of the sha256: shards are near-uniform, and going from ``n``
  to ``n + 1`` shards moves only about ``1/(n + 1)`` of the rows (all of them
  into the new shard), so shard runs stay reusable when a census grows.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import Protocol, TypeVar

from guardrepro.errors import InputError

_SHARD_RE = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")
_MASK64 = (1 << 64) - 1


class HasRowId(Protocol):
    @property
    def row_id(self) -> str: ...


R = TypeVar("R", bound=HasRowId)


def parse_shard(text: str) -> tuple[int, int]:
    """Parse ``"k/n"`` into ``(k, n)``; ``k`` is 1-based. Bad specs raise InputError."""
    match = _SHARD_RE.match(text)
    if match is None:
        raise InputError(f"shard must look like k/n (for example 2/8), got {text!r}", field="shard")
    k, n = int(match.group(1)), int(match.group(2))
    if n < 1:
        raise InputError(f"shard count n must be >= 1, got {n}", field="shard")
    if not 1 <= k <= n:
        raise InputError(f"shard index k must be in 1..{n} (1-based), got {k}", field="shard")
    return k, n


def format_shard(k: int, n: int) -> str:
    return f"{k}/{n}"


def _jump_hash(key: int, buckets: int) -> int:
    """Jump consistent hash: a bucket in ``0..buckets-1`` for a 64-bit key."""
    b, j = -1, 0
    while j < buckets:
        b = j
        key = (key * 2862933555777941757 + 1) & _MASK64
        j = int((b + 1) * (float(1 << 31) / float((key >> 33) + 1)))
    return b


def shard_of(row_id: str, n: int) -> int:
    """The 1-based shard (``1..n``) that ``row_id`` belongs to among ``n`` shards."""
    if n < 1:
        raise InputError(f"shard count must be >= 1, got {n}", field="shard")
    digest = hashlib.sha256(row_id.encode("utf-8")).digest()
    return _jump_hash(int.from_bytes(digest[:8], "big"), n) + 1


def select_shard(rows: Sequence[R], k: int, n: int) -> list[R]:
    """The rows of shard ``k`` of ``n`` (1-based), in their original order."""
    if n < 1 or not 1 <= k <= n:
        raise InputError(f"shard {k}/{n} is out of range (k is 1-based)", field="shard")
    return [row for row in rows if shard_of(row.row_id, n) == k]

