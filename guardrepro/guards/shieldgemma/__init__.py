"""ShieldGemma (2B): a logit guard scored from P(Yes) at the first generated position."""

from guardrepro.guards.shieldgemma.adapter import (
    DEFAULT_THRESHOLD,
    ShieldGemmaAdapter,
    score_shieldgemma,
)

__all__ = ["DEFAULT_THRESHOLD", "ShieldGemmaAdapter", "score_shieldgemma"]
