"""The lean decoder's KV buffers (``runners.lean``): groups of decoding rows.

Input: per prompt, its prefilled keys and values per layer (``KV``) and its
length. Output: ``KVGroup`` objects, each a preallocated buffer (layer, row,
kv_head, column, dim) with its rows' prompts right-aligned at the next free
column, a key mask (left padding masked) and each row's next position.

A decoding step reads every column of a group for every row of it, so a row
whose prompt is much shorter than its group's longest row pays for the
padding. Rows are therefore kept in several groups when one group would pad
too much (``fits``): the projections and the MLP of a step still run over
every row at once, and only attention runs per group. On the published
long-prompt profile (prompts of 988 to 13,087 tokens) a single group made
every row of a batch read the 13k-token row's columns.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

GROW = 256  # KV buffer columns added at a time
# A group takes a row (or another group) when the padded columns of the merged
# group stay within MERGE_RATIO x the columns its rows need, or within
# MERGE_SLACK columns of them: another group costs a few small kernels per
# layer and step, which a few thousand columns of attention outweigh.
MERGE_RATIO = 1.5
MERGE_SLACK = 2048
KV = list[tuple[torch.Tensor, torch.Tensor]]  # one prompt's (keys, values) per layer


def fits(rows: int, width: int, need: int, other_rows: int, other_width: int,
         other_need: int) -> bool:
    """Whether two groups (``rows`` rows of ``width`` columns whose rows need ``need``
    columns in all, and the other's) decode together: the merged group's columns
    (all rows at the wider width) against what the rows need."""
    merged = (rows + other_rows) * max(width, other_width)
    needed = need + other_need
    return merged <= MERGE_RATIO * needed or merged - needed <= MERGE_SLACK


def partition(lengths: Sequence[int]) -> list[list[int]]:
    """Indices into ``lengths`` in groups that ``fits`` allows, shortest first."""
    groups: list[list[int]] = []
    width = need = 0
    for index in sorted(range(len(lengths)), key=lambda i: lengths[i]):
        n = lengths[index]
        if groups and fits(len(groups[-1]), width, need, 1, n, n):
            groups[-1].append(index)
            width, need = max(width, n), need + n
        else:
            groups.append([index])
            width, need = n, n
    return groups


class KVGroup:
    """Decoding rows sharing one KV buffer: ``rows`` are their prompt indices,
    prompts right-aligned at ``used`` (the next column a step writes)."""

    def __init__(self, caches: list[KV], lengths: list[int], layers: int,
                 rows: list[int]) -> None:
        self.rows = list(rows)
        self.width = max(lengths)
        first = caches[0][0][0]
        _, kv_heads, _, dim = first.shape
        shape = (layers, len(caches), kv_heads, self.width + GROW, dim)
        # uninitialised: every column up to ``used`` is written below or by a
        # step before it is read, except the left padding, zeroed here (it is
        # masked, but 0 * garbage could be NaN in the values product)
        self.keys = first.new_empty(shape)
        self.values = first.new_empty(shape)
        for row, (cache, n) in enumerate(zip(caches, lengths, strict=True)):
            self.keys[:, row, :, : self.width - n] = 0
            self.values[:, row, :, : self.width - n] = 0
            for i in range(layers):
                self.keys[i, row, :, self.width - n : self.width] = cache[i][0][0]
                self.values[i, row, :, self.width - n : self.width] = cache[i][1][0]
        self.used = self.width
        pad = torch.tensor([self.width - n for n in lengths], device=first.device)
        cols = torch.arange(self.keys.shape[3], device=first.device)
        self.mask = cols[None, :] >= pad[:, None]  # True = attend
        self.padded = bool((pad > 0).any())
        self.positions = torch.tensor(lengths, dtype=torch.long, device=first.device)[:, None]
        self.need = sum(lengths)  # columns the rows attend to, padding left out

    def reserve(self) -> None:
        if self.used < self.keys.shape[3]:
            return
        grow = self.keys.new_zeros((*self.keys.shape[:3], GROW, self.keys.shape[4]))
        self.keys = torch.cat([self.keys, grow], dim=3)
        self.values = torch.cat([self.values, grow.clone()], dim=3)
        ones = self.mask.new_ones((self.mask.shape[0], GROW))
        self.mask = torch.cat([self.mask, ones], dim=1)

    def advance(self) -> None:
        """After a step wrote column ``used`` of every row."""
        self.used += 1
        self.positions = self.positions + 1
        self.need += len(self.rows)

    def bias(self, dtype: torch.dtype) -> torch.Tensor | None:
        """The additive key mask of the next step (-inf on left padding), or None."""
        if not self.padded:
            return None
        col = self.used
        bias = torch.zeros(self.mask.shape[0], col + 1, dtype=dtype, device=self.mask.device)
        bias.masked_fill_(~self.mask[:, : col + 1], float("-inf"))
        return bias[:, None, None, :]

    def keep(self, local: list[int]) -> None:
        """Keep the rows at these positions of ``rows``, in this order."""
        rows = torch.tensor(local, dtype=torch.long, device=self.keys.device)
        self.rows = [self.rows[i] for i in local]
        self.keys = self.keys.index_select(1, rows)
        self.values = self.values.index_select(1, rows)
        self.mask = self.mask.index_select(0, rows)
        self.positions = self.positions.index_select(0, rows)
        self.need = int(self.positions.sum())
        self.padded = bool((~self.mask[:, : self.used]).any())
        self._trim()

    def _trim(self) -> None:
        """Drop the leading columns that are padding in every row (left behind by
        rows that left), once there are ``GROW`` of them: a row's attention reads
        the buffer's width, so it must follow the live rows, not the longest row
        ever held. Columns are storage only (positions are per row)."""
        attended = self.mask[:, : self.used].any(dim=0).nonzero()
        first = int(attended[0]) if attended.numel() else self.used
        if first < GROW:
            return
        self.keys = self.keys[:, :, :, first:].contiguous()
        self.values = self.values[:, :, :, first:].contiguous()
        self.mask = self.mask[:, first:].contiguous()
        self.used -= first
        self.padded = bool((~self.mask[:, : self.used]).any())

    def takes(self, other: KVGroup) -> bool:
        """Whether ``other`` should join this group (``fits``)."""
        return fits(len(self.rows), self.used, self.need, len(other.rows), other.used,
                    other.need)

    def add(self, other: KVGroup) -> None:
        """Append ``other``'s rows after this group's, right-aligned at this group's
        next column: the narrower of the two is padded on the left (masked)."""
        grow = other.used - self.used
        if grow > 0:  # the other's prompts are longer than this group's columns: pad ours
            self.keys, self.values, self.mask = _pad_left(self.keys, self.values, self.mask, grow)
            self.used += grow
        elif grow < 0:
            other.keys, other.values, other.mask = _pad_left(other.keys, other.values,
                                                             other.mask, -grow)
        width = max(self.keys.shape[3], other.keys.shape[3])
        ours, theirs = _pad_right(self, width), _pad_right(other, width)
        self.keys = torch.cat([ours[0], theirs[0]], dim=1)
        self.values = torch.cat([ours[1], theirs[1]], dim=1)
        self.mask = torch.cat([ours[2], theirs[2]], dim=0)
        self.positions = torch.cat([self.positions, other.positions], dim=0)
        self.rows += other.rows
        self.need += other.need
        self.padded = bool((~self.mask[:, : self.used]).any())


def _pad_left(keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor,
              columns: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``columns`` zero (masked) columns before the buffers' first."""
    shape = (*keys.shape[:3], columns, keys.shape[4])
    return (torch.cat([keys.new_zeros(shape), keys], dim=3),
            torch.cat([values.new_zeros(shape), values], dim=3),
            torch.cat([mask.new_zeros((mask.shape[0], columns)), mask], dim=1))


def _pad_right(group: KVGroup,
               width: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The group's buffers widened to ``width`` columns (free columns after its last)."""
    extra = width - group.keys.shape[3]
    if extra == 0:
        return group.keys, group.values, group.mask
    shape = (*group.keys.shape[:3], extra, group.keys.shape[4])
    return (torch.cat([group.keys, group.keys.new_zeros(shape)], dim=3),
            torch.cat([group.values, group.values.new_zeros(shape)], dim=3),
            torch.cat([group.mask, group.mask.new_ones((group.mask.shape[0], extra))], dim=1))


def place(groups: list[KVGroup], joined: list[KVGroup]) -> None:
    """Put newly prefilled groups among ``groups``: each joins the first group
    that takes it, or stays a group of its own (appended)."""
    for new in joined:
        for group in groups:
            if group.takes(new):
                group.add(new)
                break
        else:
            groups.append(new)


def drop(groups: list[KVGroup], keep: Sequence[int]) -> list[KVGroup]:
    """The groups with only the rows at positions ``keep`` (ascending, counted over
    the groups' rows in order) left; emptied groups go."""
    kept = set(keep)
    out, start = [], 0
    for group in groups:
        n = len(group.rows)
        local = [p - start for p in range(start, start + n) if p in kept]
        start += n
        if len(local) < n and local:
            group.keep(local)
        if local:
            out.append(group)
    return out
