"""What a guard adapter provides.

A guard adapter binds a prompt template (text plus its sha256), a parser that
turns raw generated text into a score or a named error, and the guard's
decoding defaults. Rendering is shared: every guard in the TS-Guard family
formats its template with the Python ``str()`` of a dict agent_action, as the
upstream evaluator does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class ParseResult:
    status: str  # "ok" | "error"
    score: float | None
    error_type: str | None
    components: Mapping[str, Any]


@dataclass(frozen=True)
class GuardTemplate:
    text: str
    sha256: str


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


class GuardAdapter(Protocol):
    name: str
    parser_version: str
    template: GuardTemplate

    def render(self, sample: Mapping[str, Any]) -> str: ...

    def parse(self, text: str) -> ParseResult: ...

    def decision_char_offset(self, text: str) -> int | None:
        """Character offset in ``text`` where the harmfulness rating value
        starts (the decision position), or None when it was never generated."""
        ...
