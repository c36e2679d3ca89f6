"""The TS-Guard adapter: its template, its parser and its decoding defaults.

Input: a verified ``GuardTemplate`` (see ``guardrepro.run.prompts``). Output: an
object satisfying ``guards.base.GuardAdapter``. Rendering is the shared
TS-Guard-family renderer (Python ``str()`` of a dict agent_action); parsing is
``guardrepro.guards.ts_guard.parser.parse_ts_guard``; the decision position is where the
harmfulness rating value starts.

Decoding defaults (docs/PROTOCOL.md): greedy, one attempt, 2048 new tokens;
the authors' sampled mode is temperature 0.1, top_p 0.9, up to 3 attempts
until one parses, 2048 new tokens. These are the only copy: a run profile's
omitted ``[decoding]`` keys are filled from ``decoding_defaults``. The same
class serves the toy guard, which shares the output format and parser but has
its own template, name and a shorter generation budget.

Special tokens: the checkpoint's EOS ids must name exactly ``<|im_end|>`` and
``<|endoftext|>`` and its pad id ``<|endoftext|>`` (``ExpectedTokens``; the
ids are read from the checkpoint's own config). TS-Guard additionally pins
the ids documented upstream (docs/PROTOCOL.md): EOS {151645, 151643}, pad
151643. ``run.resolve.resolve_profile`` refuses a locked checkpoint that
declares anything else, before any row is generated.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from guardrepro.guards.base import (
    ExpectedTokens,
    GuardTemplate,
    Messages,
    ParseResult,
    render_ts_guard_prompt,
)
from guardrepro.guards.ts_guard.parser import (
    PARSER_VERSION,
    RATING_LABELS,
    decision_char_offset,
    label_scores,
    parse_ts_guard,
)
from guardrepro.schema import DecodingParams

TS_GUARD_MAX_NEW_TOKENS = 2048
TS_GUARD_TEMPERATURE = 0.1
TS_GUARD_TOP_P = 0.9
TS_GUARD_MAX_ATTEMPTS = 3
# The toy guard's generation budget (its outputs are short; see its TRAINING.md).
TOY_GUARD_MAX_NEW_TOKENS = 256


@dataclass(frozen=True)
class SpecialTokens:
    """The EOS id set and pad id a guard's checkpoint must declare."""

    eos_token_ids: frozenset[int]
    pad_token_id: int

    @classmethod
    def of(cls, eos: Iterable[int], pad: int) -> SpecialTokens:
        return cls(frozenset(eos), pad)

    def describe(self) -> str:
        return f"eos {sorted(self.eos_token_ids)}, pad {self.pad_token_id}"


TS_GUARD_SPECIAL_TOKENS = SpecialTokens.of((151645, 151643), 151643)
CHATML_TOKENS = ExpectedTokens(eos=("<|im_end|>", "<|endoftext|>"), exact_eos=True,
                               pad="<|endoftext|>")
TS_GUARD_EXPECTED = ExpectedTokens(
    eos=CHATML_TOKENS.eos, exact_eos=True, pad=CHATML_TOKENS.pad,
    upstream_eos_ids=TS_GUARD_SPECIAL_TOKENS.eos_token_ids,
    upstream_pad_id=TS_GUARD_SPECIAL_TOKENS.pad_token_id,
)


class TSGuardAdapter:
    """Template + TS-Guard parser + decoding defaults for one guard name."""

    scoring = "parse"
    score_tokens: tuple[str, ...] = ()
    # Qwen2.5's chat template adds its default system prompt; the upstream
    # evaluator's prompts go through it, so that is part of the reproduction.
    default_system_expected = True
    # The harmfulness rating values as written, with their own score.
    decision_labels: Mapping[str, float] = RATING_LABELS

    def __init__(
        self,
        template: GuardTemplate,
        *,
        name: str = "ts-guard",
        max_new_tokens: int = TS_GUARD_MAX_NEW_TOKENS,
        special_tokens: ExpectedTokens = TS_GUARD_EXPECTED,
    ) -> None:
        self.name = name
        self.parser_version = PARSER_VERSION
        self.template = template
        self.max_new_tokens = max_new_tokens
        self.special_tokens = special_tokens

    def __repr__(self) -> str:
        return f"TSGuardAdapter(name={self.name!r}, template_sha256={self.template.sha256[:12]}...)"

    def render(self, sample: Mapping[str, Any]) -> str:
        return render_ts_guard_prompt(self.template.text, sample)

    def messages(self, sample: Mapping[str, Any]) -> Messages:
        """The rendered prompt as the only message (role user, no system message)."""
        return [{"role": "user", "content": self.render(sample)}]

    def parse(self, text: str) -> ParseResult:
        return parse_ts_guard(text)

    def parse_scored(self, text: str, score_logits: Sequence[float] | None) -> ParseResult:
        return parse_ts_guard(text)

    def decision_char_offset(self, text: str) -> int | None:
        return decision_char_offset(text)

    def label_scores(self, text: str) -> Mapping[str, float]:
        return label_scores(text, self.decision_labels)

    def decoding_defaults(self, mode: str) -> dict[str, Any]:
        """Greedy (one attempt, temperature 0, no top-k/top-p/repetition
        penalty) or the authors' sampled mode (temperature 0.1, top_p 0.9, up
        to 3 attempts), with this guard's token budget
        (``guards.base.GuardAdapter.decoding_defaults``)."""
        if mode == "sampled":
            params = DecodingParams(mode="sampled", max_new_tokens=self.max_new_tokens,
                                    temperature=TS_GUARD_TEMPERATURE, top_p=TS_GUARD_TOP_P,
                                    max_attempts=TS_GUARD_MAX_ATTEMPTS)
        else:
            params = DecodingParams(mode="greedy", max_new_tokens=self.max_new_tokens)
        return {k: v for k, v in params.to_dict().items() if k != "seed"}
