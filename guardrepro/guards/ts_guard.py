"""The TS-Guard adapter: its template, its parser and its decoding defaults.

Input: a verified ``GuardTemplate`` (see ``guardrepro.prompts``). Output: an
object satisfying ``guards.base.GuardAdapter``. Rendering is the shared
TS-Guard-family renderer (Python ``str()`` of a dict agent_action); parsing is
``guardrepro.parse.parse_ts_guard``; the decision position is where the
harmfulness rating value starts.

Decoding defaults (UPSTREAM.md): greedy, one attempt, 2048 new tokens; the
authors' sampled mode is temperature 0.1, top_p 0.9, up to 3 attempts until
one parses, 2048 new tokens. The same class serves the toy guard, which
shares the output format and parser but has its own template, name and a
shorter generation budget.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from guardrepro.guards.base import GuardTemplate, ParseResult, render_ts_guard_prompt
from guardrepro.parse import PARSER_VERSION, decision_char_offset, parse_ts_guard
from guardrepro.schema import DecodingParams

TS_GUARD_MAX_NEW_TOKENS = 2048
TS_GUARD_TEMPERATURE = 0.1
TS_GUARD_TOP_P = 0.9
TS_GUARD_MAX_ATTEMPTS = 3


class TSGuardAdapter:
    """Template + TS-Guard parser + decoding defaults for one guard name."""

    def __init__(
        self,
        template: GuardTemplate,
        *,
        name: str = "ts-guard",
        max_new_tokens: int = TS_GUARD_MAX_NEW_TOKENS,
    ) -> None:
        self.name = name
        self.parser_version = PARSER_VERSION
        self.template = template
        self.max_new_tokens = max_new_tokens

    def __repr__(self) -> str:
        return f"TSGuardAdapter(name={self.name!r}, template_sha256={self.template.sha256[:12]}...)"

    def render(self, sample: Mapping[str, Any]) -> str:
        return render_ts_guard_prompt(self.template.text, sample)

    def parse(self, text: str) -> ParseResult:
        return parse_ts_guard(text)

    def decision_char_offset(self, text: str) -> int | None:
        return decision_char_offset(text)

    def greedy_decoding(self) -> DecodingParams:
        """Greedy: one attempt, temperature 0, no top-k/top-p/repetition penalty."""
        return DecodingParams(mode="greedy", max_new_tokens=self.max_new_tokens)

    def sampled_decoding(self, seed: int | None = None) -> DecodingParams:
        """The authors' mode: temperature 0.1, top_p 0.9, up to 3 attempts."""
        return DecodingParams(
            mode="sampled",
            max_new_tokens=self.max_new_tokens,
            temperature=TS_GUARD_TEMPERATURE,
            top_p=TS_GUARD_TOP_P,
            max_attempts=TS_GUARD_MAX_ATTEMPTS,
            seed=seed,
        )
