"""The guard registry: one table row per adapter.

Input: a guard name (and, for a guard prompted by a one-message template,
its verified template). Output: a ``GuardAdapter``, or its parser alone
(``get_parser``, for verbs that never render a prompt: ``parse``,
``reparse``), or the table itself (``ADAPTERS``, listed by
``guardrepro guards``).

Each ``AdapterInfo`` declares: the adapter factory, whether it needs a
template from the profile (``needs_template``: the TS-Guard family) or
builds its own prompt (conversation guards, rule guards), whether it needs
a model, its score mapping onto the common scale (safe 0, controversial
0.5, unsafe 1; strict = score != 0), and its source. How it is scored
(``parse``, ``logit`` or ``rule``) and its parser are the adapter's own
``scoring`` and ``parse``, read from an adapter built without a template
(``AdapterInfo.scoring``, ``AdapterInfo.parser``). An unknown name is an
``InputError`` on field ``guard`` that suggests a close name only when one
is close.
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from guardrepro.errors import InputError
from guardrepro.guards.base import ExpectedTokens, GuardAdapter, GuardTemplate, ParseResult
from guardrepro.guards.llama_guard import LlamaGuard3Adapter
from guardrepro.guards.qwen3guard import Qwen3GuardAdapter
from guardrepro.guards.rule import RuleAdapter
from guardrepro.guards.shieldgemma import ShieldGemmaAdapter
from guardrepro.guards.ts_guard import (
    CHATML_TOKENS,
    TOY_GUARD_MAX_NEW_TOKENS,
    TS_GUARD_EXPECTED,
    TSGuardAdapter,
)


@dataclass(frozen=True)
class AdapterInfo:
    name: str
    build: Callable[[GuardTemplate | None], GuardAdapter]
    needs_template: bool
    needs_model: bool
    scores: str
    source: str

    @property
    def scoring(self) -> str:
        """``parse``, ``logit`` or ``rule``: the adapter's ``scoring``."""
        return _unbound(self.name).scoring

    @property
    def parser(self) -> Callable[[str], ParseResult]:
        """The adapter's text parser (``GuardAdapter.parse``)."""
        return _unbound(self.name).parse


def _ts(template: GuardTemplate | None) -> GuardAdapter:
    assert template is not None
    return TSGuardAdapter(template, name="ts-guard", special_tokens=TS_GUARD_EXPECTED)


def _toy(template: GuardTemplate | None) -> GuardAdapter:
    assert template is not None
    return TSGuardAdapter(template, name="toy-guard", max_new_tokens=TOY_GUARD_MAX_NEW_TOKENS,
                          special_tokens=CHATML_TOKENS)


_TS_SCORES = "tags -> composite: 0 / 0.5 / 1 (docs/PROTOCOL.md)"

ADAPTERS: Mapping[str, AdapterInfo] = {
    info.name: info
    for info in (
        AdapterInfo("ts-guard", _ts, True, True, _TS_SCORES,
                    "TS-Guard paper and evaluator (docs/PROTOCOL.md)"),
        AdapterInfo("toy-guard", _toy, True, True, _TS_SCORES,
                    "guardrepro toy guard (guardrepro/data/toy_guard)"),
        AdapterInfo("llama-guard-3", LlamaGuard3Adapter, False, True,
                    "safe 0 / unsafe 1 (+ categories)",
                    "Llama Guard 3 1B/8B model card (meta-llama)"),
        AdapterInfo("qwen3guard", Qwen3GuardAdapter, False, True,
                    "Safe 0 / Controversial 0.5 / Unsafe 1",
                    "Qwen3Guard-Gen 0.6B/4B/8B model card (Qwen)"),
        AdapterInfo("shieldgemma", ShieldGemmaAdapter, False, True,
                    f"P(Yes) >= {ShieldGemmaAdapter.threshold} -> 1 else 0 (probability kept)",
                    "ShieldGemma 2B model card (google)"),
        AdapterInfo("rule-nuisance", lambda _t: RuleAdapter("nuisance"), False, False,
                    "rule fires 1 else 0",
                    "frozen nuisance rule (<information> + action-verb tool prefix)"),
        AdapterInfo("rule-tool-lookup", lambda _t: RuleAdapter("tool-lookup"), False, False,
                    "table label 0 / 1",
                    "tool-name lookup fitted on labelled rows (guards/rule/lookup.py)"),
    )
}
GUARD_NAMES = tuple(ADAPTERS)


def _unknown(name: str) -> InputError:
    close = difflib.get_close_matches(name, GUARD_NAMES, n=1, cutoff=0.5)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return InputError(f"unknown guard {name!r} (known: {', '.join(GUARD_NAMES)}){hint}",
                      field="guard")


def adapter_info(name: str) -> AdapterInfo:
    if name not in ADAPTERS:
        raise _unknown(name)
    return ADAPTERS[name]


def get_guard(name: str, template: GuardTemplate | None = None) -> GuardAdapter:
    """The adapter for guard ``name`` (bound to ``template`` when it takes one)."""
    info = adapter_info(name)
    if info.needs_template and template is None:
        raise InputError(f"guard {name!r} needs a prompt template (template_lock + "
                         "template_file, or template_path)", field="guard")
    return info.build(template if info.needs_template else None)


def get_parser(name: str) -> Callable[[str], ParseResult]:
    """The output parser of guard ``name`` (no template needed)."""
    return adapter_info(name).parser


def record_parser(name: str) -> Callable[[str], ParseResult] | None:
    """The parser a record of guard ``name`` is re-checked with on read
    (``run.records.read_records(parsers=record_parser)``): the adapter's parser
    when it is scored by parsing its output, else None (a logit or rule guard,
    or a guard this registry does not know)."""
    if name not in ADAPTERS or ADAPTERS[name].scoring != "parse":
        return None
    return ADAPTERS[name].parser


@functools.cache
def _unbound(name: str) -> GuardAdapter:
    """Guard ``name``'s adapter for its declarations only (no template bound;
    built once per name)."""
    info = adapter_info(name)
    return info.build(GuardTemplate("", "") if info.needs_template else None)


def expected_tokens(name: str) -> ExpectedTokens:
    """The special tokens guard ``name``'s checkpoint must declare (by token string)."""
    return _unbound(name).special_tokens


def decoding_defaults(name: str, mode: str) -> dict[str, Any]:
    """Guard ``name``'s own decoding for ``mode`` (``GuardAdapter.decoding_defaults``)."""
    return _unbound(name).decoding_defaults(mode)


def decision_labels(name: str) -> Mapping[str, float]:
    """Guard ``name``'s decision labels (label text -> score; empty for a rule
    guard): ``GuardAdapter.decision_labels``."""
    return _unbound(name).decision_labels
