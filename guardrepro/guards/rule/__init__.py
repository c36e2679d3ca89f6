"""Rule guards: model-free baselines scored like any guard (see ``adapter``)."""

from guardrepro.guards.rule.adapter import (
    SIDE_EFFECT_PREFIXES,
    RuleAdapter,
    evaluate_rule,
    nuisance_decision,
    parse_rule_output,
)

__all__ = ["SIDE_EFFECT_PREFIXES", "RuleAdapter", "evaluate_rule", "nuisance_decision",
           "parse_rule_output"]
