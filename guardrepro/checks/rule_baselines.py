"""Rule baselines: guards that need no model, scored like any other guard.

Input: cohort rows (``schema.CohortRow``: the sample's ``history`` and
``current_action`` fields) and, for the lookup, labelled benchmark rows
(``tsbench.BenchRow``) of a declared training split.
Output: one strict decision (1 = unsafe) per row.

Two predictors, both frozen (see docs/PROTOCOL.md, guard observational
association and tool-name lookup):

- ``nuisance``: unsafe exactly when the history contains ``<information>``
  (case-insensitive) AND the tool key (``checks.audit.tool_key``) starts with
  one of the side-effect prefixes ``SIDE_EFFECT_PREFIXES``.
- ``lookup``: per tool key the training split's majority strict label
  (ties unsafe); keys unseen in training get the split's global majority.

Invariants: the lookup is fitted only on the rows of the declared split
(``train_split``): ``benchmark-minus-cohort`` (every benchmark row whose base
sample is not in the cohort, so no evaluated row is seen in training) or
``benchmark`` (all rows, declared leaky). An empty split is an error.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from guardrepro.bench.shortcuts import fit_lookup, nuisance_fires, predict_lookup, tool_key
from guardrepro.bench.tsbench import BenchRow
from guardrepro.errors import InputError
from guardrepro.schema import CohortRow, strict_decision

RULES = ("nuisance", "lookup")
TRAIN_SPLITS = ("benchmark-minus-cohort", "benchmark")


def nuisance_decision(sample: Any) -> int:
    """1 when the history holds the marker and the tool has a side-effect prefix."""
    return int(nuisance_fires(sample.get("history"), sample.get("current_action")))


@dataclass(frozen=True)
class LookupModel:
    """A fitted tool-name lookup: key -> strict label, and the fallback."""

    table: dict[str, int]
    fallback: int
    train_split: str
    train_rows: int

    def predict(self, samples: Sequence[Any]) -> list[int]:
        keys = [tool_key(s.get("current_action")) for s in samples]
        return predict_lookup(self.table, self.fallback, keys)

    def describe(self) -> dict[str, Any]:
        return {"train_split": self.train_split, "train_rows": self.train_rows,
                "keys": len(self.table), "fallback": self.fallback}


def training_rows(bench: Sequence[BenchRow], cohort_bases: Iterable[str],
                  train_split: str) -> list[BenchRow]:
    """The rows of the declared split (see module docstring)."""
    if train_split not in TRAIN_SPLITS:
        raise InputError(f"train_split must be one of {TRAIN_SPLITS}, got {train_split!r}",
                         field="train_split")
    if train_split == "benchmark":
        rows = list(bench)
    else:
        held_out = set(cohort_bases)
        rows = [r for r in bench if r.base_sample_id not in held_out]
    if not rows:
        raise InputError(f"the training split {train_split!r} has no rows", field="train_split")
    return rows


def fit_lookup_model(bench: Sequence[BenchRow], cohort_bases: Iterable[str],
                     train_split: str) -> LookupModel:
    rows = training_rows(bench, cohort_bases, train_split)
    keys = [tool_key(r.raw.get("current_action")) for r in rows]
    labels = [strict_decision(r.score) for r in rows]
    table, fallback = fit_lookup(keys, labels)
    return LookupModel(table, fallback, train_split, len(rows))


def rule_decisions(rule: str, rows: Sequence[CohortRow],
                   lookup: LookupModel | None = None) -> list[int]:
    """Strict decisions of ``rule`` on ``rows`` (``lookup`` needs a fitted model)."""
    if rule == "nuisance":
        return [nuisance_decision(r.sample) for r in rows]
    if rule == "lookup":
        if lookup is None:
            raise InputError("the lookup rule needs a fitted model", field="rule")
        return lookup.predict([r.sample for r in rows])
    raise InputError(f"rule must be one of {RULES}, got {rule!r}", field="rule")
