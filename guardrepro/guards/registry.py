"""The guards: one spec file each (``guards/<name>.toml``), nothing else to register.

Input: a guard name (a shipped spec, a local one in ``./guards/``) or the path
of a spec, and for a guard prompted by a one-message template its verified
template. Output: a ``GuardAdapter`` (``adapter.SpecGuard``), its parser alone
(``get_parser``, for verbs that never render a prompt: ``parse``,
``reparse``, and the re-check of records on read), or what a spec declares
(``adapter_info``: needs a template, needs a model, scoring, score mapping,
source).

Nothing here imports a guard's code: the adapter module is loaded by
``get_guard``, and upstream evaluator code (TS-Guard's parser, the Llama
Guard 3 and Qwen3Guard rules, the rule guards) only when a parser that names
it is built. An unknown name is an ``InputError`` on field ``guard`` that
suggests a close name only when one is close.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from guardrepro.errors import InputError
from guardrepro.guards.base import ExpectedTokens, GuardAdapter, GuardTemplate, ParseResult
from guardrepro.guards.spec import GuardSpec, find_spec

if TYPE_CHECKING:
    from guardrepro.guards.parsers import SpecParser


@dataclass(frozen=True)
class AdapterInfo:
    """What a guard spec declares, for checks that build no adapter."""

    spec: GuardSpec

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def needs_template(self) -> bool:
        return self.spec.needs_template

    @property
    def needs_model(self) -> bool:
        return self.spec.needs_model

    @property
    def scoring(self) -> str:
        """``parse``, ``logit`` or ``rule``."""
        return self.spec.scoring

    @property
    def scores(self) -> str:
        return self.spec.scores

    @property
    def source(self) -> str:
        return self.spec.source

    @property
    def parser(self) -> Callable[[str], ParseResult]:
        return _parser(self.spec).parse


def adapter_info(name: str) -> AdapterInfo:
    """The declarations of guard ``name`` (a name or a spec path)."""
    return AdapterInfo(find_spec(name))


def get_guard(name: str, template: GuardTemplate | None = None) -> GuardAdapter:
    """The adapter for guard ``name`` (bound to ``template`` when it takes one)."""
    from guardrepro.guards.adapter import SpecGuard

    spec = find_spec(name)
    if spec.needs_template and template is None:
        raise InputError(f"guard {spec.name!r} needs a prompt template (template_lock + "
                         "template_file, or template_path)", field="guard")
    return SpecGuard(spec, template if spec.needs_template else None)


@functools.cache
def _parser_at(path: str, sha256: str) -> SpecParser:
    from guardrepro.guards.parsers import SpecParser

    return SpecParser(find_spec(path).parser)


def _parser(spec: GuardSpec) -> SpecParser:
    return _parser_at(str(spec.path), spec.sha256)


def get_parser(name: str) -> Callable[[str], ParseResult]:
    """The output parser of guard ``name`` (no template needed)."""
    return _parser(find_spec(name)).parse


def record_parser(name: str) -> Callable[[str], ParseResult] | None:
    """The parser a record of guard ``name`` is re-checked with on read
    (``rundir.records.read_records(parsers=record_parser)``): the spec's parser
    when the guard is scored by parsing its output, else None (a logit or
    rule guard, or a name no spec here declares)."""
    try:
        spec = find_spec(name)
    except InputError:
        return None
    if spec.scoring != "parse":
        return None
    return _parser(spec).parse


def _unbound(name: str) -> GuardAdapter:
    """Guard ``name``'s adapter for its declarations only (no template bound)."""
    spec = find_spec(name)
    return get_guard(name, GuardTemplate("", "") if spec.needs_template else None)


def expected_tokens(name: str) -> ExpectedTokens:
    """The special tokens guard ``name``'s checkpoint must declare (by token string)."""
    from guardrepro.guards.adapter import expected_of

    return expected_of(find_spec(name))


def decoding_defaults(name: str, mode: str) -> dict[str, Any]:
    """Guard ``name``'s own decoding for ``mode`` (``GuardAdapter.decoding_defaults``)."""
    return _unbound(name).decoding_defaults(mode)


def decision_labels(name: str) -> Mapping[str, float]:
    """Guard ``name``'s decision labels (label text -> score; empty for a rule
    guard): ``GuardAdapter.decision_labels``."""
    return _unbound(name).decision_labels
