"""P(unsafe) from the decision labels' tokens at the decision position.

Input: a guard's decision labels (``GuardAdapter.decision_labels``), the score
each label would give this output (``label_scores``), each label's token ids,
the generated ids, the decision token index (the generated token whose decoded
span holds ``decision_char_offset``) and, per generated step, the raw logits
(or logprobs: only differences are used) of ``union`` = every label token id,
in ``label_union`` order. Output: ``DecisionScores`` (docs/PROTOCOL.md,
"Decision labels and P(unsafe)").

Rules:

- A label's ids are its text encoded without special tokens, after the
  *lead*: the part of the decision token's decoded span before the decision
  character (``Safety: Unsafe`` is written `` Unsafe`` as one token, lead
  ``" "``). ``LEADS`` are encoded up front; a lead outside them is a reason.

- At the decision index the labels are grouped by their first token; each
  group's probability is the softmax of those first tokens' logits, taken over
  the distinct first tokens only (renormalised over the labels).
- Labels that share a first token (TS-Guard's ``0.0`` and ``0.5``) are split
  the same way at the next token where they differ, read at that step of the
  generated path when the output went through the shared tokens. When it did
  not (TS-Guard wrote ``1.0``), the split was never computed: the group's mass
  goes to its lowest-scoring label and is counted in ``unresolved``.
- ``p_unsafe`` is the mass of the labels whose score for this output is not
  0 (the strict decision); ``expected_score`` (three-level guards only) is the
  probability-weighted score.
- No ``p_unsafe`` (a ``reason`` instead) when the decision position was never
  generated, the token there is no label's first token, or the backend gave
  no label logits for a step it needs (vLLM: a label outside its top-k, NaN).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

NO_DECISION = "no decision position: the output never reached a decision label"
NO_LOGITS = "the backend returned no label logits"
# What may precede a label inside the decision token (no lead, or one space).
LEADS = ("", " ")


@dataclass(frozen=True)
class DecisionScores:
    """One output's decision-label probabilities (or the reason there are none)."""

    label_probs: dict[str, float] | None
    p_unsafe: float | None
    expected_score: float | None
    reason: str | None = None
    unresolved: float = 0.0

    @classmethod
    def missing(cls, reason: str) -> DecisionScores:
        return cls(None, None, None, reason)


LabelTable = tuple[tuple[str, tuple[tuple[str, tuple[int, ...]], ...]], ...]


def label_tokens(labels: Mapping[str, float],
                 encode: Callable[[str], Sequence[int]]) -> LabelTable:
    """Per lead (``LEADS``), each label's token ids: ``encode(lead + label)``
    (``encode``: text -> ids, no special tokens) without the ids of ``lead``
    alone when they are its prefix."""
    out = []
    for lead in LEADS:
        alone = tuple(int(i) for i in encode(lead)) if lead else ()
        table = []
        for label in labels:
            ids = tuple(int(i) for i in encode(lead + label))
            if alone and ids[: len(alone)] == alone:
                ids = ids[len(alone):]
            if not ids:
                raise ValueError(f"decision label {label!r} encodes to no tokens")
            table.append((label, ids))
        out.append((lead, tuple(table)))
    return tuple(out)


def label_union(table: LabelTable) -> tuple[int, ...]:
    """Every token id of every label under every lead, once, ascending: the ids
    a runner reads per step."""
    return tuple(sorted({i for _, labels in table for _, ids in labels for i in ids}))


def tokens_for(table: LabelTable, lead: str) -> dict[str, tuple[int, ...]] | None:
    """The labels' ids after ``lead`` (None: a lead not encoded)."""
    return next((dict(labels) for got, labels in table if got == lead), None)


def _softmax(values: Sequence[float]) -> list[float]:
    top = max(values)
    exps = [math.exp(v - top) for v in values]
    total = sum(exps)
    return [e / total for e in exps]


class _Unread(Exception):
    """A label token's logit at a step the walk needs was not returned."""


class _Walk:
    """The label trie walked along the generated path (module docstring)."""

    def __init__(self, tokens: Mapping[str, Sequence[int]], scores: Mapping[str, float],
                 column: Mapping[int, int], output: Sequence[int], index: int,
                 steps: Sequence[Sequence[float]]) -> None:
        self.tokens, self.scores, self.column = tokens, scores, column
        self.output, self.index, self.steps = output, index, steps
        self.probs: dict[str, float] = {}
        self.unresolved = 0.0

    def _settle(self, group: Sequence[str], mass: float) -> None:
        lowest = min(group, key=lambda label: (self.scores[label], label))
        self.probs[lowest] = self.probs.get(lowest, 0.0) + mass
        self.unresolved += mass if len(group) > 1 else 0.0

    def run(self, group: Sequence[str], depth: int, mass: float, on_path: bool) -> None:
        if len(group) == 1:
            self._settle(group, mass)
            return
        step = self.index + depth
        if (not on_path or step >= len(self.steps)
                or any(len(self.tokens[label]) <= depth for label in group)):
            self._settle(group, mass)
            return
        by_token: dict[int, list[str]] = {}
        for label in group:
            by_token.setdefault(self.tokens[label][depth], []).append(label)
        order = sorted(by_token)
        values = [float(self.steps[step][self.column[t]]) for t in order]
        if not all(math.isfinite(v) for v in values):
            raise _Unread(step - self.index)
        probs = _softmax(values)
        generated = self.output[step] if step < len(self.output) else None
        for token, p in zip(order, probs, strict=True):
            self.run(by_token[token], depth + 1, mass * p, on_path and generated == token)


def decision_scores(*, labels: Mapping[str, float], scores: Mapping[str, float],
                    tokens: Mapping[str, Sequence[int]] | None, union: Sequence[int],
                    output_ids: Sequence[int], index: int | None,
                    step_logits: Sequence[Sequence[float]] | None) -> DecisionScores:
    """``label_probs``, ``p_unsafe`` and ``expected_score`` (module docstring);
    ``tokens``: the labels' ids after this output's lead (None: not encoded)."""
    if index is None or index >= len(output_ids):
        return DecisionScores.missing(NO_DECISION)
    if tokens is None:
        return DecisionScores.missing(
            "the decision token starts with text other than the encoded leads "
            f"{list(LEADS)} before the label")
    first = {ids[0] for ids in tokens.values()}
    if output_ids[index] not in first:
        return DecisionScores.missing(
            f"the token at the decision position (id {output_ids[index]}) is not the first "
            "token of any decision label")
    if step_logits is None or index >= len(step_logits):
        return DecisionScores.missing(NO_LOGITS)
    column = {token: j for j, token in enumerate(union)}
    walk = _Walk(tokens, scores, column, output_ids, index, step_logits)
    try:
        walk.run(sorted(labels), 0, 1.0, True)
    except _Unread as exc:
        return DecisionScores.missing(
            f"a decision label's token was not among the logprobs the backend returned "
            f"{exc.args[0]} token(s) after the decision position")
    probs = {label: walk.probs.get(label, 0.0) for label in labels}
    p_unsafe = min(1.0, float(sum(p for label, p in probs.items() if scores[label] != 0.0)))
    three = any(v == 0.5 for v in labels.values())
    expected = sum(p * scores[label] for label, p in probs.items()) if three else None
    return DecisionScores(probs, p_unsafe, expected, None, walk.unresolved)


def logit_scores(*, labels: Mapping[str, float], score_tokens: Sequence[str],
                 score_logits: Sequence[float] | None) -> DecisionScores:
    """A logit guard (ShieldGemma): its score tokens are its labels, read at
    the first generated position (``score_logits``, in ``score_tokens`` order)."""
    if score_logits is None or len(score_logits) != len(score_tokens) or not all(
            math.isfinite(float(v)) for v in score_logits):
        return DecisionScores.missing(NO_LOGITS)
    probs = dict(zip(score_tokens, _softmax([float(v) for v in score_logits]), strict=True))
    p_unsafe = min(1.0, float(sum(p for label, p in probs.items() if labels[label] != 0.0)))
    three = any(v == 0.5 for v in labels.values())
    expected = sum(p * labels[label] for label, p in probs.items()) if three else None
    return DecisionScores({label: probs[label] for label in labels}, p_unsafe, expected)
