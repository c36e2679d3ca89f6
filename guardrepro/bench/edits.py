"""Counterfactual edits of one cohort base, on stringified texts only.

Input: the four texts of a TS-Bench row after ``tsbench.field_text`` (instruction,
history, current_action, env_info are ``str``). Output: edited strings; an
edit never sees a list or an object, so what it changes is exactly what a
reader of the cohort file sees. Rules (``docs/PROTOCOL.md``, "Edits"):

- ``tsbench.field_text``: None -> ``""``, a string as is, anything else
  ``json.dumps(value, ensure_ascii=False, sort_keys=True)`` with the default
  separators (``", "`` and ``": "``).
- Marker replacement: plain substring replacement of each marker, in order.
- Tool alias: ``"tool_" + sha256("<salt>:<sample_id>:<tool>")[:12]``, put in
  place of every occurrence of the tool name that is not adjacent to
  ``[A-Za-z0-9_]`` (the start and end of the text count as boundaries).
- Placebo (:func:`placebo_history`, off in the published cohort): a
  whitespace-only re-layout of the history. A text that holds a JSON array
  or object is re-encoded with two-space indentation (or on one line when it
  already was indented that way); any other text has each single space or
  tab between two non-whitespace characters doubled. Line breaks and
  non-whitespace characters never change.

The candidate tool itself comes from ``guardrepro.bench.react.parse_step``.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

TEXT_FIELDS = ("instruction", "history", "current_action", "env_info")
_WORD = "A-Za-z0-9_"
# A single space or tab between two non-whitespace characters.
_SINGLE_GAP = re.compile(r"(?<=\S)[ \t](?=\S)")


def tool_alias(salt: str, base_sample_id: str, tool: str) -> str:
    digest = hashlib.sha256(f"{salt}:{base_sample_id}:{tool}".encode()).hexdigest()
    return "tool_" + digest[:12]


def _tool_pattern(tool: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![{_WORD}]){re.escape(tool)}(?![{_WORD}])")


def replace_tool(text: str, tool: str, alias: str) -> str:
    """``text`` with each occurrence of ``tool`` not adjacent to
    ``[A-Za-z0-9_]`` replaced by ``alias``."""
    return _tool_pattern(tool).sub(lambda _m: alias, text)


def replace_markers(text: str, pairs: list[tuple[str, str]]) -> str:
    """``text`` with each ``old`` -> ``new`` of ``pairs`` replaced, in order."""
    for old, new in pairs:
        text = text.replace(old, new)
    return text


def _json_container(text: str) -> Any | None:
    stripped = text.strip()
    if not stripped or stripped[0] not in "[{":
        return None
    try:
        value = json.loads(stripped)
    except ValueError:
        return None
    return value if isinstance(value, list | dict) else None


def placebo_history(history: str) -> str:
    """The history re-laid out in whitespace only (see the module docstring)."""
    decoded = _json_container(history)
    if decoded is not None:
        indented = json.dumps(decoded, ensure_ascii=False, indent=2)
        if indented != history:
            return indented
        return json.dumps(decoded, ensure_ascii=False)
    return _SINGLE_GAP.sub("  ", history)
