"""The audit ladder: what each rung of the shortcut-sensitivity method may and
may not be taken to show (docs/PROTOCOL.md, "The audit ladder").

Input: a rung number. Output: that rung's statements as a ``Rung``
(``checks.audits.types``; ``to_dict()`` is the embedded object), one source for
every output that embeds them (tool lookup, association, stats).
"""

from __future__ import annotations

from guardrepro.checks.audits.types import Ladder, Rung
from guardrepro.errors import InputError

LADDER: tuple[Rung, ...] = (
    Rung(
        rung=1,
        name="label predictability (tool-name lookup)",
        verb="guardrepro audit tool-lookup",
        may_show="how well the tool name alone predicts the gold label, within the "
                 "benchmark (grouped cross-validation) and across domains "
                 "(leave-one-domain-out): whether the labels leave a shortcut open",
        may_not_show="anything about a guard: no model output is used, and a "
                     "predictable label does not mean any guard relies on the tool name",
    ),
    Rung(
        rung=2,
        name="association of the guard's decisions with nuisance features",
        verb="guardrepro audit association",
        may_show="whether the guard's block decisions co-vary with the nuisance "
                 "features (the <information> marker, side-effect tool prefixes) on "
                 "these rows, within tool and within gold class",
        may_not_show="that a feature causes the decisions (observational, non-causal: "
                     "rows with and without a feature differ in other ways), nor "
                     "anything beyond these rows and these predictions",
    ),
    Rung(
        rung=3,
        name="paired edits (counterfactual flips)",
        verb="guardrepro stats RUN_DIR",
        may_show="the causal effect of each specific edit (marker paraphrase, tool "
                 "alias, combined), for that edit only, on the frozen run's decisions "
                 "for the cohort's rows",
        may_not_show="the effect of the underlying feature in general, of other edits, "
                     "or on other rows, guards, runs or decoding settings; few flips do "
                     "not show that the guard ignores the feature",
    ),
)


# Rung 1 run on a guard's own predictions (``audit tool-lookup --preds``):
# the same lookup, now about that guard's decisions.
GUARD_RUNG1 = Rung(
    rung=1,
    name="tool-name predictability of a guard's decisions",
    verb="guardrepro audit tool-lookup --preds RUN_DIR",
    may_show="how well the tool name alone predicts this guard's decisions on these rows, "
             "within the benchmark and across domains, beside how well it predicts the "
             "gold labels; and whether the guard errs where the tool-name lookup errs",
    may_not_show="that the guard uses the tool name (observational: the tool name goes "
                 "with the rest of the step), nor anything beyond these rows and these "
                 "predictions",
)


def ladder() -> Ladder:
    """The three rungs with what each may and may not be taken to show."""
    return Ladder(LADDER)


def interpretation(rung: int, *, guard: bool = False) -> Rung:
    """One rung's statements, to embed in that rung's output; ``guard``: rung 1
    on a guard's predictions (``GUARD_RUNG1``)."""
    if guard and rung == 1:
        return GUARD_RUNG1
    for entry in LADDER:
        if entry.rung == rung:
            return entry
    raise InputError(f"no rung {rung}", field="rung")
