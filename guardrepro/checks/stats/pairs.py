"""Pairs of an original row and its edited row, per base.

Input: the rows of a run or predictions file (``rundir.read.RowResult``) and an edit
variant name.

Output: ``Pair`` values, one per base that has both an ``original`` row and a
row of the edit, in sorted base_sample_id order.

Invariants: strict decision = score != 0, and a row without a valid score
(missing, errored, invalid) fails closed to decision 1; the gold strict label
is 1 unless the gold score is 0. A second row of one variant for one base is
an error, and so is an edit row that disagrees with its original on domain
or gold label. The stratum of a pair is ``"<domain>:<gold strict label>"``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from guardrepro.errors import InputError
from guardrepro.rundir.read import ORIGINAL, RowResult
from guardrepro.schema import strict_decision

PLACEBO = "placebo"
REPEAT = "repeat"
PUBLISHED_EDITS = ("marker_paraphrase", "tool_alias", "combined")


@dataclass(frozen=True)
class Pair:
    base_sample_id: str
    domain: str
    gold_label: float
    original: RowResult
    edit: RowResult

    @property
    def d_orig(self) -> int:
        return strict_decision(self.original.score if self.original.valid else None)

    @property
    def d_edit(self) -> int:
        return strict_decision(self.edit.score if self.edit.valid else None)

    @property
    def gold_strict(self) -> int:
        return strict_decision(self.gold_label)

    @property
    def valid_both(self) -> bool:
        return self.original.valid and self.edit.valid

    @property
    def stratum(self) -> str:
        return f"{self.domain}:{self.gold_strict}"


def make_pairs(rows: Sequence[RowResult], variant: str) -> list[Pair]:
    """(original, variant) pairs by base_sample_id, bases sorted."""
    originals: dict[str, RowResult] = {}
    edits: dict[str, RowResult] = {}
    for r in rows:
        target = originals if r.variant == ORIGINAL else edits if r.variant == variant else None
        if target is None:
            continue
        if r.base_sample_id in target:
            raise InputError(f"two {r.variant!r} rows for base {r.base_sample_id!r}",
                             field="base_sample_id")
        target[r.base_sample_id] = r
    pairs = []
    for base in sorted(originals):
        orig, edit = originals[base], edits.get(base)
        if edit is None:
            continue
        if (edit.domain, edit.gold_label) != (orig.domain, orig.gold_label):
            raise InputError(
                f"base {base!r}: {variant} row disagrees with the original on domain or gold",
                field="gold_label",
            )
        pairs.append(Pair(base, orig.domain, orig.gold_label, orig, edit))
    return pairs


def ordered_variants(rows: Sequence[RowResult]) -> list[str]:
    """original first, then the published edits, the controls, then others sorted."""
    known = [ORIGINAL, *PUBLISHED_EDITS, PLACEBO, REPEAT]
    present = {r.variant for r in rows}
    return [v for v in known if v in present] + sorted(present - set(known))
