"""Guard names -> adapters.

Input: a guard name and its verified template. Output: a ``GuardAdapter``.
Known names: ``ts-guard`` (TS-Guard, ``docs/PROTOCOL.md``) and ``toy-guard`` (the
shipped toy guard: same output format and parser, its own template, a
256-token generation budget). An unknown name is an ``InputError`` that
suggests the closest known name. ``get_parser`` gives a guard's parser alone,
for verbs that never render a prompt (``parse``, ``reparse``).

``expected_special_tokens(name)`` is the EOS id set and pad id the guard's
checkpoint must declare: ts-guard {151645, 151643} / 151643 (``docs/PROTOCOL.md``);
toy-guard {2, 0} / 0 (the values shipped in
``guardrepro/data/toy_guard/generation_config.json``, pinned here as literals,
and the ids ``toy.tiny.build_tiny_qwen2`` writes, which is why tests run
tiny checkpoints under the toy-guard name). ``pipeline.resolve_profile``
enforces the pin for checkpoints from a lock and only warns for an unpinned
checkpoint directory.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable

from guardrepro.errors import InputError
from guardrepro.guards.base import GuardAdapter, GuardTemplate, ParseResult
from guardrepro.guards.ts_guard import TS_GUARD_SPECIAL_TOKENS, SpecialTokens, TSGuardAdapter
from guardrepro.parse import parse_ts_guard

TOY_GUARD_MAX_NEW_TOKENS = 256
TOY_GUARD_SPECIAL_TOKENS = SpecialTokens.of((2, 0), 0)

GUARD_NAMES = ("ts-guard", "toy-guard")


def _unknown(name: str) -> InputError:
    close = difflib.get_close_matches(name, GUARD_NAMES, n=1, cutoff=0.0)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return InputError(
        f"unknown guard {name!r} (known: {', '.join(GUARD_NAMES)}){hint}", field="guard"
    )


def get_guard(name: str, template: GuardTemplate) -> GuardAdapter:
    """The adapter for guard ``name`` bound to ``template``."""
    if name == "ts-guard":
        return TSGuardAdapter(template, name="ts-guard")
    if name == "toy-guard":
        return TSGuardAdapter(
            template,
            name="toy-guard",
            max_new_tokens=TOY_GUARD_MAX_NEW_TOKENS,
            special_tokens=TOY_GUARD_SPECIAL_TOKENS,
        )
    raise _unknown(name)


def expected_special_tokens(name: str) -> SpecialTokens:
    """The EOS id set and pad id guard ``name``'s checkpoint must declare."""
    if name == "ts-guard":
        return TS_GUARD_SPECIAL_TOKENS
    if name == "toy-guard":
        return TOY_GUARD_SPECIAL_TOKENS
    raise _unknown(name)


def get_parser(name: str) -> Callable[[str], ParseResult]:
    """The output parser of guard ``name`` (no template needed)."""
    if name in GUARD_NAMES:
        return parse_ts_guard
    raise _unknown(name)
