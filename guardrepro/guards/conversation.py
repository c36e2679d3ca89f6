"""How a guard spec's prompt becomes messages: the built-in agent-step
conversation, and chat messages built from named row fields.

Input: a TS-Bench row. Output: the conversation handed to the checkpoint's
chat template, and the ``GuardTemplate`` that stands for the rendering in a
run's provenance (``template_sha256``): for ``conversation = "agent-step"``
the builder's version string (``BUILDER_TEMPLATE``), for ``[[prompt.messages]]``
the canonical JSON of the declared messages, so a change in how steps become
conversations changes every run's provenance.

A message's ``content`` is a ``str.format`` template whose placeholders are
row fields (``instruction``, ``history``, ``current_action``, ``env_info``);
a field that is not a string is written as JSON (``base._text``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from guardrepro.guards.base import GuardTemplate, Messages, field_text
from guardrepro.schema import sha256_text

CONVERSATION_BUILDER = (
    "guardrepro agent-step conversation v1: user = instruction; "
    "assistant = history + blank line + current_action; env_info not shown"
)
BUILDER_TEMPLATE = GuardTemplate(CONVERSATION_BUILDER, sha256_text(CONVERSATION_BUILDER))
MESSAGES_BUILDER = "guardrepro row-field messages v1: "


def messages_template(messages: Sequence[tuple[str, str]]) -> GuardTemplate:
    """The provenance template of declared ``(role, content)`` messages."""
    text = MESSAGES_BUILDER + json.dumps([{"role": r, "content": c} for r, c in messages],
                                         ensure_ascii=False, sort_keys=True)
    return GuardTemplate(text, sha256_text(text))


def field_messages(messages: Sequence[tuple[str, str]], sample: Mapping[str, Any]) -> Messages:
    """The declared messages with each placeholder replaced by its row field
    (a missing field is a ``KeyError`` naming it)."""
    values = {name: field_text(sample[name]) for name in _names(messages)}
    return [{"role": role, "content": content.format_map(values)} for role, content in messages]


def _names(messages: Sequence[tuple[str, str]]) -> list[str]:
    import string

    return sorted({name for _r, content in messages
                   for _t, name, _f, _c in string.Formatter().parse(content) if name})
