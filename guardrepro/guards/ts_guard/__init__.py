"""TS-Guard (and the toy guard, which shares its output format): template
rendering, the tag parser (``guardrepro.guards.ts_guard.parser``) and decoding defaults."""

from guardrepro.guards.ts_guard.adapter import (
    CHATML_TOKENS,
    TOY_GUARD_MAX_NEW_TOKENS,
    TS_GUARD_EXPECTED,
    TS_GUARD_MAX_ATTEMPTS,
    TS_GUARD_MAX_NEW_TOKENS,
    TS_GUARD_SPECIAL_TOKENS,
    TS_GUARD_TEMPERATURE,
    TS_GUARD_TOP_P,
    SpecialTokens,
    TSGuardAdapter,
)

__all__ = [
    "CHATML_TOKENS",
    "TOY_GUARD_MAX_NEW_TOKENS",
    "TS_GUARD_EXPECTED",
    "TS_GUARD_MAX_ATTEMPTS",
    "TS_GUARD_MAX_NEW_TOKENS",
    "TS_GUARD_SPECIAL_TOKENS",
    "TS_GUARD_TEMPERATURE",
    "TS_GUARD_TOP_P",
    "SpecialTokens",
    "TSGuardAdapter",
]
