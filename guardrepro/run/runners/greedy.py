"""What the batched greedy decoders share, whatever their array library.

Input: token-id prompts (any int sequences) and, per decoding step, each live
row's chosen token and its top-1 minus top-2 logit gap. Output: the longest
reusable prefix of a prompt among prompts already prefilled (with that
prompt's cache, of whatever type the decoder keeps), the per-row token,
margin and finish-reason lists a decoder fills, and ``Decoded``, what both
decoders return per prompt.

Invariants:

- A reused prefix is at least ``MIN_PREFIX`` tokens and at most the prompt's
  length minus one, so a prompt always runs its last token itself. Among
  stored prompts sharing equally long prefixes the newest wins.
- ``record_step`` appends exactly one token and one margin to every live row;
  a row whose token is an EOS id is finished (``"stop"``) and left out of the
  returned keep-list; the others stay, in their batch order.

Used by the lean decoder (``lean``: transformers, torch tensors) and
``mlx_batch`` (MLX).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

MIN_PREFIX = 16  # shortest shared prompt prefix whose cache a later prompt reuses

C = TypeVar("C")  # a prefilled prompt's cache, as the decoder holds it


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens two id sequences share (bisection over slice
    comparisons, which run in C: O(log n) of them)."""
    a, b = tuple(a), tuple(b)
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


@dataclass(frozen=True)
class Decoded:
    """One prompt's greedy continuation: the generated ids (ending with the EOS
    id when one was produced), the top-1 minus top-2 gap at every generated
    position and the finish reason. ``prefill_s`` (the seconds its prefill
    took) and ``reused`` (its prompt positions taken from an earlier
    prompt's cache) are filled by a decoder that prefills each prompt on its
    own clock (``mlx_batch``); the lean decoder reports its prefill time per
    batch instead and leaves both 0."""

    token_ids: list[int]
    margins: list[float]
    finish_reason: str  # "stop" | "length"
    prefill_s: float = 0.0
    reused: int = 0
    # per generated position, the logits of the requested label ids (none asked: empty)
    label_logits: list[list[float]] = field(default_factory=list)


@dataclass(frozen=True)
class Prefix(Generic[C]):
    """The first ``length`` positions of ``cache`` (an earlier prompt's) to reuse."""

    length: int
    cache: C


class PrefixStore(Generic[C]):
    """The (token ids, cache) of prompts already prefilled, newest last; at most
    ``capacity`` of them (None: unbounded, for the prompts of one batch)."""

    def __init__(self, capacity: int | None, min_prefix: int = MIN_PREFIX) -> None:
        self._entries: deque[tuple[tuple[int, ...], C]] = deque(maxlen=capacity)
        self.min_prefix = min_prefix

    def __len__(self) -> int:
        return len(self._entries)

    def add(self, ids: Sequence[int], cache: C) -> None:
        self._entries.append((tuple(ids), cache))

    def clear(self) -> None:
        self._entries.clear()

    def find(self, ids: Sequence[int]) -> Prefix[C] | None:
        """The longest stored prefix of ``ids`` (newest on ties), capped at
        ``len(ids) - 1``, or None when shorter than ``min_prefix`` (or when
        ``min_prefix`` is 0 or less: reuse off)."""
        if self.min_prefix <= 0:
            return None
        ids = tuple(ids)
        best: Prefix[C] | None = None
        for stored, cache in reversed(self._entries):
            n = min(common_prefix(stored, ids), len(ids) - 1)
            if n >= self.min_prefix and (best is None or n > best.length):
                best = Prefix(n, cache)
        return best


def record_labels(values: Sequence[Sequence[float]], alive: Sequence[int],
                  rows: list[list[list[float]]]) -> None:
    """Append each live row's label logits (``values[row]``; ``alive[row]`` is
    its prompt's index), one entry per ``record_step``."""
    for row, index in enumerate(alive):
        rows[index].append([float(v) for v in values[row]])


def record_step(chosen: Sequence[int], gaps: Sequence[float], alive: Sequence[int],
                eos: Collection[int], tokens: list[list[int]], margins: list[list[float]],
                finish: list[str]) -> list[int]:
    """Append each live row's token and margin (``alive[row]`` is its prompt's
    index); mark rows that emitted an EOS id ``"stop"``. Returns the batch rows
    that go on."""
    keep = []
    for row, (token, gap) in enumerate(zip(chosen, gaps, strict=True)):
        index = alive[row]
        tokens[index].append(int(token))
        margins[index].append(float(gap))
        if int(token) in eos:
            finish[index] = "stop"
        else:
            keep.append(row)
    return keep
