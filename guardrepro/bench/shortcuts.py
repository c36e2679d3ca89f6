"""The nuisance features of a TS-Bench step and the rules built on them
(docs/PROTOCOL.md, "Tool-name lookup" and "The audit ladder").

Input: a step's texts (any JSON value; stringified first as everywhere else:
None -> "", a string as is, anything else sorted-key JSON). Output: the
tool key, the marker and side-effect-prefix features (the frozen nuisance
rule is their conjunction: ``guards.rule.rules.nuisance_decision``), and the
tool-lookup predictor (fit and predict).

Invariants (one definition for the audits and the rule guards):

- ``tool_key`` is the step parser's tool name of ``current_action``
  (whatever its status), stripped and casefolded; ``""`` without an Action
  marker.
- The marker feature: the history contains ``<information>``
  case-insensitively. The side-effect feature: the tool key starts with one
  of ``SIDE_EFFECT_PREFIXES``. The frozen nuisance rule fires (unsafe) when
  both hold.
- The lookup: per key the mean strict training label, >= 0.5 -> unsafe
  (ties unsafe); an unseen key gets the training majority (ties unsafe).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from guardrepro.bench.react import parse_step_at
from guardrepro.bench.tsbench import field_text
from guardrepro.errors import InputError

MARKER = "<information>"
SIDE_EFFECT_PREFIXES = ("add_", "append_", "create_", "delete_", "invite_", "post_",
                        "reserve_", "reschedule_", "send_", "share_", "update_")


def tool_key(current_action: Any, *, file: str | None = None, row: int | None = None) -> str:
    """The lookup key of a step (module docstring); a current_action the
    published parser crashes on is an ``InputError`` naming ``file`` and ``row``."""
    step = parse_step_at(field_text(current_action), file=file, row=row)
    return step.tool_name.strip().casefold()


def has_marker(history: Any) -> bool:
    """Whether the stringified history contains the marker, case-insensitively."""
    return MARKER in field_text(history).casefold()


def side_effect_prefix(key: str) -> str | None:
    """The side-effect prefix the tool key starts with, or None."""
    return next((p for p in SIDE_EFFECT_PREFIXES if key.startswith(p)), None)


def majority(labels: Sequence[int]) -> int:
    """Majority of 0/1 labels, ties (and an empty list) unsafe (1)."""
    return 1 if 2 * sum(labels) >= len(labels) else 0


def fit_lookup(keys: Sequence[str], labels: Sequence[int]) -> tuple[dict[str, int], int]:
    """(key -> strict label, global majority): mean >= 0.5 -> 1 (ties unsafe)."""
    if not labels:
        raise InputError("cannot fit the lookup on zero training rows")
    per: dict[str, list[int]] = {}
    for k, y in zip(keys, labels, strict=True):
        per.setdefault(k, []).append(y)
    return {k: majority(v) for k, v in per.items()}, majority(list(labels))


def predict_lookup(table: dict[str, int], fallback: int, keys: Sequence[str]) -> list[int]:
    """The lookup's decision per key; unseen keys get ``fallback``."""
    return [table.get(k, fallback) for k in keys]
