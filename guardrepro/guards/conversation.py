"""Shared behaviour of the conversation guards (Llama Guard 3, Qwen3Guard, ShieldGemma).

Input: a TS-Bench row. Output: the two-turn conversation of
``base.agent_step_conversation`` (the checkpoint's chat template builds the
guard's own prompt from it), its canonical text, and greedy decoding with
the adapter's token budget.

The adapter's ``template`` is the conversation builder's version string and
its sha256, so a change in how steps become conversations changes every
run's provenance. Each adapter also ships the chat template this project
wrote for it from the public model card (``chat_template``, used to build
test checkpoints) and ``chat_template_pins``: what is published about the
real checkpoints' chat templates, by hub repo and revision
(``base.ChatTemplatePin``), checked by ``run.chat_pins`` before a run of
that checkpoint. The real checkpoint's ``tokenizer_config.json`` is pinned
by its lock too, and the template's sha256 is recorded in each run's
provenance.
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
)
from guardrepro.schema import sha256_text

CONVERSATION_BUILDER = (
    "guardrepro agent-step conversation v1: user = instruction; "
    "assistant = history + blank line + current_action; env_info not shown"
)
BUILDER_TEMPLATE = GuardTemplate(CONVERSATION_BUILDER, sha256_text(CONVERSATION_BUILDER))


class ConversationAdapter:
    """Base for guards prompted through their chat template from a conversation."""

    name = ""
    parser_version = ""
    max_new_tokens = 32
    scoring = "parse"
    score_tokens: tuple[str, ...] = ()
    default_system_expected = False
    special_tokens = ExpectedTokens(eos=())
    chat_template = ""
    chat_template_pins: tuple[ChatTemplatePin, ...] = ()
    decision_labels: Mapping[str, float] = {}

    def __init__(self, template: GuardTemplate | None = None) -> None:
        self.template = template if template is not None else BUILDER_TEMPLATE

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"

    def messages(self, sample: Mapping[str, Any]) -> Messages:
        return agent_step_conversation(sample)

    def render(self, sample: Mapping[str, Any]) -> str:
        return messages_text(self.messages(sample))

    def parse(self, text: str) -> ParseResult:  # pragma: no cover - overridden
        raise NotImplementedError

    def parse_scored(self, text: str, score_logits: Sequence[float] | None) -> ParseResult:
        return self.parse(text)

    def decision_char_offset(self, text: str) -> int | None:
        """The first non-whitespace character: every conversation guard here
        states its verdict first."""
        stripped = len(text) - len(text.lstrip())
        return stripped if stripped < len(text) else None

    def label_scores(self, text: str) -> Mapping[str, float]:
        """Each label's declared score: nothing before the verdict changes it."""
        return dict(self.decision_labels)

    def decoding_defaults(self, mode: str) -> dict[str, Any]:
        """Only the token budget: no sampled setting is published for these guards."""
        return own_decoding(mode, self.max_new_tokens)
