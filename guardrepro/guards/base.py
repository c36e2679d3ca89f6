"""What a guard adapter provides, and the pieces adapters share.

A guard adapter binds: how a TS-Bench agent step becomes the guard's prompt
(a one-message template, or a conversation the checkpoint's chat template
turns into the prompt), a parser that turns raw generated text into a score
on the common scale or a named error, the special tokens its checkpoint must
declare (named as token strings; the ids are read from the checkpoint's own
config), and its decoding defaults.

Common score scale: 0.0 safe, 0.5 controversial, 1.0 unsafe; the strict
decision is ``score != 0`` (an invalid output counts as 1, fail-closed).

Invariants:

- ``messages(sample)`` is the conversation handed to the chat template, and
  ``render(sample)`` is its canonical text (the run's ``input_sha256`` is
  its hash): for a one-message guard the prompt itself, for a conversation
  guard the JSON of the messages (sorted keys, UTF-8, no ASCII escaping).
- ``parse`` never raises on any ``str``.
- A logit guard (``scoring == "logit"``) is scored from the raw logits of
  ``score_tokens`` at the first generated position (``score_logits``), not
  from its text; its record keeps the probability in ``components``.
- ``decision_labels`` is a plain declarative value: each decision label as the
  guard writes it (the text whose first character ``decision_char_offset``
  points at) -> its score on the common scale (0.0, 0.5, 1.0). A model guard
  declares at least two; a rule guard declares none. ``label_scores(text)``
  is the score each label would give *this* output, given what the guard
  generated before the decision position (TS-Guard: the composite score with
  the generated flags; every other guard: ``decision_labels`` itself). The
  record's ``label_probs`` and ``p_unsafe`` are read from the labels' tokens
  at the decision position (``guards.decision``; docs/PROTOCOL.md,
  "Decision labels and P(unsafe)").
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

# defined with its extraction, one stage down; re-exported for the adapters
from guardrepro.artifacts.template import GuardTemplate as GuardTemplate

Messages = list[dict[str, str]]

# A guard's decision labels: label text -> score on the common scale.
DecisionLabels = Mapping[str, float]
DECISION_SCORES = (0.0, 0.5, 1.0)


def check_decision_labels(labels: Mapping[str, Any], *, what: str) -> dict[str, float]:
    """``labels`` as a ``DecisionLabels`` value, or a ``ValueError`` naming
    ``what`` (the guard or spec field): non-empty distinct label strings, each
    a score in 0.0 / 0.5 / 1.0, at least two labels and both a safe (0.0) and
    an unsafe (non-zero) one."""
    out: dict[str, float] = {}
    for label, score in labels.items():
        if not isinstance(label, str) or not label or label != label.strip():
            raise ValueError(f"{what}: decision label {label!r} must be a non-empty string "
                             "without surrounding whitespace")
        if isinstance(score, bool) or not isinstance(score, (int, float)) or \
                float(score) not in DECISION_SCORES:
            raise ValueError(f"{what}: decision label {label!r} has score {score!r}; "
                             f"expected one of {DECISION_SCORES}")
        out[label] = float(score)
    if len(out) < 2 or 0.0 not in out.values() or not any(v != 0.0 for v in out.values()):
        raise ValueError(f"{what}: decision labels need a safe (0.0) and an unsafe label, "
                         f"got {out}")
    return out


@dataclass(frozen=True)
class ParseResult:
    status: str  # "ok" | "error"
    score: float | None
    error_type: str | None
    components: Mapping[str, Any]


@dataclass(frozen=True)
class ExpectedTokens:
    """The special tokens a guard's checkpoint must declare, by token string.

    ``eos``: token strings whose ids must be among the checkpoint's EOS ids
    (all of them when ``exact_eos``, which also forbids any other EOS id).
    ``pad``: the token string the pad id must name (None: not checked).
    ``upstream_ids``: optional id pins documented upstream for one
    checkpoint (TS-Guard), checked in addition to the names.
    """

    eos: tuple[str, ...]
    exact_eos: bool = False
    pad: str | None = None
    upstream_eos_ids: frozenset[int] | None = None
    upstream_pad_id: int | None = None

    def describe(self) -> str:
        eos = ("exactly " if self.exact_eos else "including ") + ", ".join(self.eos)
        pad = f", pad {self.pad}" if self.pad is not None else ""
        return f"eos {eos}{pad}"


@dataclass(frozen=True)
class ChatTemplatePin:
    """What is published about one checkpoint's chat template, by hub repo and
    revision (``model_revision`` = ``"<repo>@<revision>"``): the sha256 of its
    ``tokenizer_config.json`` bytes, of the chat template string itself, the
    text a rendered prompt must end with after the generation prompt, and the
    ids single score tokens must have. None: nothing published for that item."""

    repo: str
    revision: str
    tokenizer_config_sha256: str | None = None
    template_sha256: str | None = None
    generation_suffix: str | None = None
    score_token_ids: tuple[tuple[str, int], ...] = ()

    @property
    def model_revision(self) -> str:
        return f"{self.repo}@{self.revision}"


def render_ts_guard_prompt(template: str, sample: Mapping[str, Any]) -> str:
    """Render one TS-Bench row exactly as the upstream evaluator does.

    ``agent_action`` is a Python dict, so its ``str()`` (repr quoting,
    escaped newlines) is what lands in the prompt.
    """
    agent_action = {
        "interaction_history": sample["history"],
        "current_action": sample["current_action"],
    }
    return template.format(
        user_request=sample["instruction"],
        agent_action=agent_action,
        env_info=sample["env_info"],
    )


def field_text(value: Any) -> str:
    """A row field as prompt text: a string as written, None as "", else JSON."""
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def agent_step_conversation(sample: Mapping[str, Any]) -> Messages:
    """A TS-Bench agent step as a two-turn conversation (docs/GUARDS.md).

    The user turn is the user's request (``instruction``); the assistant turn
    is the agent's interaction history followed by its proposed action
    (``current_action``), separated by a blank line, each as written in the
    row (a non-string value is JSON). ``env_info`` is not shown. A missing
    field is a ``KeyError`` naming it.
    """
    history = field_text(sample["history"]).strip()
    action = field_text(sample["current_action"]).strip()
    agent = f"{history}\n\n{action}" if history else action
    return [
        {"role": "user", "content": field_text(sample["instruction"])},
        {"role": "assistant", "content": agent},
    ]


def messages_text(messages: Sequence[Mapping[str, str]]) -> str:
    """Canonical text of a conversation (what ``input_sha256`` hashes)."""
    return json.dumps([dict(m) for m in messages], ensure_ascii=False, sort_keys=True)


class GuardAdapter(Protocol):
    name: str
    parser_version: str
    template: GuardTemplate
    special_tokens: ExpectedTokens
    max_new_tokens: int
    scoring: str  # "parse" | "logit" | "rule"
    score_tokens: tuple[str, ...]
    # True when the chat template's own default system prompt is part of the
    # guard's published setup (TS-Guard through Qwen2.5's template); elsewhere a
    # system prompt the template adds is reported as a warning.
    default_system_expected: bool
    # label text -> score (0.0 / 0.5 / 1.0); empty for a rule guard
    decision_labels: DecisionLabels

    def messages(self, sample: Mapping[str, Any]) -> Messages: ...

    def render(self, sample: Mapping[str, Any]) -> str: ...

    def parse(self, text: str) -> ParseResult: ...

    def parse_scored(self, text: str, score_logits: Sequence[float] | None) -> ParseResult: ...

    def decision_char_offset(self, text: str) -> int | None:
        """Character offset in ``text`` where the decision starts (the decision
        position), or None when it was never generated."""
        ...

    def label_scores(self, text: str) -> Mapping[str, float]:
        """The score each decision label would give this output ``text``, given
        what was generated before the decision position (keys: exactly
        ``decision_labels``)."""
        ...

    def decoding_defaults(self, mode: str) -> dict[str, Any]:
        """The guard's own decoding for ``mode`` ("greedy" or "sampled"), as the
        ``DecodingParams`` keys it fixes; a run profile's ``[decoding]`` keys
        override them. A guard with no published sampled setting fixes only
        ``mode`` and ``max_new_tokens`` (the profile must then give the
        temperature and top_p)."""
        ...


def own_decoding(mode: str, max_new_tokens: int) -> dict[str, Any]:
    """``decoding_defaults`` of a guard that publishes only its token budget."""
    return {"mode": mode, "max_new_tokens": max_new_tokens}
