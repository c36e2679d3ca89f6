"""The one guard adapter: a ``GuardAdapter`` built from a guard spec.

Input: a ``spec.GuardSpec`` and, for ``[prompt] template = "profile"``, the
run profile's verified ``GuardTemplate``. Output: an object satisfying
``guards.base.GuardAdapter``; its name is the spec's (the file's stem).

- prompt: ``template`` renders the row as the upstream TS-Guard evaluator
  does (``base.render_ts_guard_prompt``) into the only message;
  ``conversation = "agent-step"`` is ``base.agent_step_conversation``;
  ``[[prompt.messages]]`` fills row fields into the declared messages
  (``conversation.field_messages``); ``rule`` renders the rule's inputs
  (``guards.rule.rules``, imported on first use). ``render`` is the prompt
  text (one-message guards) or the JSON of the messages.
- parser: ``parsers.SpecParser``; ``scoring`` is ``logit`` for the logits
  kind, ``rule`` for a rule guard, else ``parse``; ``score_tokens`` are the
  logits kind's labels.
- special tokens: the spec's ``[special_tokens]`` (empty: the checkpoint's
  own, nothing to check); ``default_system_expected`` when the spec says a
  default system prompt is part of the upstream setup.
- decoding: the spec's token budget; with ``[decoding.sampled]`` the
  guard's own sampled mode (and a full greedy setting), else only the budget.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from guardrepro.guards.base import (
    ChatTemplatePin,
    ExpectedTokens,
    GuardTemplate,
    Messages,
    ParseResult,
    agent_step_conversation,
    messages_text,
    own_decoding,
    render_ts_guard_prompt,
)
from guardrepro.guards.conversation import BUILDER_TEMPLATE, field_messages, messages_template
from guardrepro.guards.parsers import SpecParser
from guardrepro.guards.spec import GuardSpec


def expected_of(spec: GuardSpec) -> ExpectedTokens:
    """The spec's ``[special_tokens]`` as ``ExpectedTokens``."""
    t = spec.tokens
    return ExpectedTokens(eos=t.eos, exact_eos=t.exact_eos, pad=t.pad,
                          upstream_eos_ids=t.eos_ids, upstream_pad_id=t.pad_id)


def _template(spec: GuardSpec, given: GuardTemplate | None) -> GuardTemplate:
    prompt = spec.prompt
    if prompt.kind == "template":
        assert given is not None, "a template guard is built with the profile's template"
        return given
    if prompt.kind == "conversation":
        return BUILDER_TEMPLATE
    if prompt.kind == "messages":
        return messages_template([(m.role, m.content) for m in prompt.messages])
    from guardrepro.guards.rule.rules import rule_template

    return rule_template(prompt.value)


class SpecGuard:
    """A guard adapter declared by a spec (module docstring)."""

    def __init__(self, spec: GuardSpec, template: GuardTemplate | None = None) -> None:
        self.spec = spec
        self.name = spec.name
        self.parser = SpecParser(spec.parser)
        self.parser_version = self.parser.version
        self.template = _template(spec, template)
        self.special_tokens = expected_of(spec)
        self.max_new_tokens = spec.max_new_tokens
        self.scoring = spec.scoring
        self.score_tokens: tuple[str, ...] = (
            tuple(spec.parser.label_map) if spec.parser.kind == "logits" else ())
        self.system_prompt = spec.prompt.default_system_prompt
        self.default_system_expected = self.system_prompt == "expected"
        self.decision_labels: Mapping[str, float] = dict(spec.decision_labels)
        if not self.decision_labels and spec.parser.kind == "tagged" and spec.needs_model:
            from guardrepro.guards.ts_guard.parser import RATING_LABELS

            self.decision_labels = dict(RATING_LABELS)
        self.chat_template_pins = tuple(
            ChatTemplatePin(p.repo, p.revision, p.tokenizer_config_sha256, p.template_sha256,
                            p.generation_suffix, p.score_token_ids) for p in spec.pins)
        self._messages = [(m.role, m.content) for m in spec.prompt.messages]

    def __repr__(self) -> str:
        return f"SpecGuard(name={self.name!r}, spec={str(self.spec.path)!r})"

    def _one_message(self) -> bool:
        return self.spec.prompt.kind in ("template", "rule")

    def render(self, sample: Mapping[str, Any]) -> str:
        kind = self.spec.prompt.kind
        if kind == "template":
            return render_ts_guard_prompt(self.template.text, sample)
        if kind == "rule":
            from guardrepro.guards.rule.rules import render_rule_input

            return render_rule_input(self.spec.prompt.value, sample)
        return messages_text(self.messages(sample))

    def rendered(self, sample: Mapping[str, Any]) -> tuple[str, Messages]:
        """``(render(sample), messages(sample))``, a one-message prompt rendered once."""
        if self._one_message():
            text = self.render(sample)
            return text, [{"role": "user", "content": text}]
        return self.render(sample), self.messages(sample)

    def messages(self, sample: Mapping[str, Any]) -> Messages:
        if self._one_message():
            return [{"role": "user", "content": self.render(sample)}]
        if self.spec.prompt.kind == "conversation":
            return agent_step_conversation(sample)
        return field_messages(self._messages, sample)

    def parse(self, text: str) -> ParseResult:
        return self.parser.parse(text)

    def parse_scored(self, text: str, score_logits: Sequence[float] | None) -> ParseResult:
        return self.parser.parse_scored(text, score_logits)

    def decision_char_offset(self, text: str) -> int | None:
        return self.parser.decision_char_offset(text)

    def label_scores(self, text: str) -> Mapping[str, float]:
        """The score each decision label would give ``text`` (the generated text
        before the decision position): TS-Guard's composite with the flags
        generated so far for the tagged parser, else the declared scores."""
        if self.spec.parser.kind == "tagged" and self.decision_labels:
            from guardrepro.guards.ts_guard.parser import label_scores

            return label_scores(text, self.decision_labels)
        return dict(self.decision_labels)

    def decoding_defaults(self, mode: str) -> dict[str, Any]:
        """The spec's decoding for ``mode`` (``GuardAdapter.decoding_defaults``)."""
        sampled = self.spec.sampled
        if sampled is None:
            return own_decoding(mode, self.max_new_tokens)
        from guardrepro.decoding import DecodingParams

        if mode == "sampled":
            params = DecodingParams(mode="sampled", max_new_tokens=self.max_new_tokens,
                                    temperature=sampled["temperature"], top_p=sampled["top_p"],
                                    max_attempts=sampled["max_attempts"])
        else:
            params = DecodingParams(mode="greedy", max_new_tokens=self.max_new_tokens)
        return {k: v for k, v in params.to_dict().items() if k != "seed"}
