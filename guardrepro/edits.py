"""Counterfactual edits of one TS-Bench row and the ReAct tool parser they need.

Input: the decoded fields of a TS-Bench row (``instruction`` and
``current_action`` are strings; ``history`` and ``env_info`` are a string, a
list, an object or null). Output: edited copies of those fields; the input is
never mutated.

Definitions (UPSTREAM.md, "The frozen 64-step counterfactual cohort"):

- Candidate tool (``parse_candidate_tool``): ``current_action`` is split into
  lines at ``"\\n"``. A marker line starts (after optional spaces or tabs) with
  an optional number ``(1)``, ``1.`` or ``1)``, up to two asterisks, then
  ``Thought``, ``Action`` or ``Action Input`` (``Action_Input``), any case,
  optionally followed by up to two asterisks, then ``:``. The tool is the rest
  of the last ``Action:`` line before the first ``Action Input:`` line,
  stripped of whitespace; up to two asterisks on each side of that rest are
  then removed (they close or wrap Markdown bold, as in ``**Action:** x`` or
  ``Action: **x**``) and whitespace is stripped again. No ``Action Input:``
  line, no ``Action:`` line before it, or an empty rest: unparsable (None).
- Tool alias: ``"tool_" + sha256("<salt>:<sample_id>:<tool>")[:12]``, replacing
  every occurrence of the tool name that is not adjacent to ``[A-Za-z0-9_]``.
- Marker replacement: plain substring replacement of each marker.
- Structured values (list / object, e.g. a JSON history): an edit applies to
  every string inside it, both string leaves and object keys, recursively;
  numbers, booleans and null are kept. The boundary rule of the alias is
  applied per string, so the start and end of a string count as boundaries.
- Placebo (``placebo_history``): a whitespace-only re-serialisation of the
  history that keeps its content. For a string holding a JSON array or object
  the content is the decoded JSON value; it is re-encoded with a different
  layout (two-space indentation, or the one-line layout if it already was
  indented that way). For any other string, and for every string leaf of a
  structured history (keys untouched), the content is the text with each run
  of spaces and tabs collapsed to one space: each single space or tab that
  separates two non-whitespace characters becomes two spaces. Line breaks and
  non-whitespace characters never change.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from typing import Any

from guardrepro.errors import InputError

_WORD = "A-Za-z0-9_"

_MARKER_LINE = re.compile(
    r"^[ \t]*(?:(?:\([0-9]+\)|[0-9]+[.)])[ \t]*)?"  # optional (1) / 1. / 1)
    r"\*{0,2}[ \t]*"  # up to two asterisks
    r"(?P<kind>thought|action[ _]input|action)"
    r"[ \t]*\*{0,2}[ \t]*:"  # optional closing asterisks before the colon
    r"(?P<rest>[^\n]*)",
    re.IGNORECASE | re.MULTILINE,
)

# A single space or tab between two non-whitespace characters.
_SINGLE_GAP = re.compile(r"(?<=\S)[ \t](?=\S)")


def react_markers(text: str) -> list[tuple[str, str]]:
    """Marker lines of a ReAct text in order: (kind, rest of the line), where
    kind is ``"thought"``, ``"action"`` or ``"action_input"``."""
    out = []
    for match in _MARKER_LINE.finditer(text):
        kind = match.group("kind").lower().replace(" ", "_")
        out.append((kind, match.group("rest")))
    return out


def _strip_name(rest: str) -> str:
    name = rest.strip()
    for _ in range(2):
        if name.startswith("*"):
            name = name[1:]
    for _ in range(2):
        if name.endswith("*"):
            name = name[:-1]
    return name.strip()


def parse_candidate_tool(current_action: Any) -> str | None:
    """The tool named by a ReAct ``current_action``, or None when unparsable."""
    if not isinstance(current_action, str):
        return None
    last_action: str | None = None
    for kind, rest in react_markers(current_action):
        if kind == "action_input":
            if last_action is None:
                return None
            name = _strip_name(last_action)
            return name or None
        if kind == "action":
            last_action = rest
    return None


def tool_alias(salt: str, sample_id: str, tool: str) -> str:
    digest = hashlib.sha256(f"{salt}:{sample_id}:{tool}".encode()).hexdigest()
    return "tool_" + digest[:12]


def _tool_pattern(tool: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![{_WORD}]){re.escape(tool)}(?![{_WORD}])")


def map_strings(value: Any, edit: Callable[[str], str], *, keys: bool = True) -> Any:
    """Apply ``edit`` to every string in ``value`` (string leaves and, when
    ``keys``, object keys), recursively; returns a new value."""
    if isinstance(value, str):
        return edit(value)
    if isinstance(value, list):
        return [map_strings(item, edit, keys=keys) for item in value]
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            new_key = edit(key) if keys and isinstance(key, str) else key
            if new_key in out:
                raise InputError(f"edit maps two object keys to {new_key!r}", field=str(key))
            out[new_key] = map_strings(item, edit, keys=keys)
        return out
    return value


def count_tool(value: Any, tool: str) -> int:
    """Occurrences of ``tool`` not adjacent to ``[A-Za-z0-9_]`` in ``value``."""
    pattern = _tool_pattern(tool)
    total = 0

    def count(text: str) -> str:
        nonlocal total
        total += len(pattern.findall(text))
        return text

    map_strings(value, count)
    return total


def replace_tool(value: Any, tool: str, alias: str) -> Any:
    """``value`` with each boundary-delimited occurrence of ``tool`` -> ``alias``."""
    pattern = _tool_pattern(tool)
    return map_strings(value, lambda text: pattern.sub(lambda _m: alias, text))


def count_substring(value: Any, needle: str) -> int:
    total = 0

    def count(text: str) -> str:
        nonlocal total
        total += text.count(needle)
        return text

    map_strings(value, count)
    return total


def replace_markers(value: Any, pairs: list[tuple[str, str]]) -> Any:
    """``value`` with each ``old`` -> ``new`` of ``pairs`` replaced in order."""

    def edit(text: str) -> str:
        for old, new in pairs:
            text = text.replace(old, new)
        return text

    return map_strings(value, edit)


def _json_container(text: str) -> Any | None:
    stripped = text.strip()
    if not stripped or stripped[0] not in "[{":
        return None
    try:
        value = json.loads(stripped)
    except ValueError:
        return None
    return value if isinstance(value, list | dict) else None


def _widen_gaps(text: str) -> str:
    return _SINGLE_GAP.sub("  ", text)


def placebo_history(history: Any) -> Any:
    """The history re-serialised in whitespace only (see the module docstring)."""
    if isinstance(history, str):
        decoded = _json_container(history)
        if decoded is not None:
            indented = json.dumps(decoded, ensure_ascii=False, indent=2)
            if indented != history:
                return indented
            return json.dumps(decoded, ensure_ascii=False)
        return _widen_gaps(history)
    return map_strings(history, _widen_gaps, keys=False)


def placebo_content(history: Any) -> Any:
    """What ``placebo_history`` preserves, for checks: the decoded JSON value
    of a JSON-container string, else strings with space/tab runs collapsed."""
    if isinstance(history, str):
        decoded = _json_container(history)
        if decoded is not None:
            return ("json", decoded)
        return ("text", re.sub(r"[ \t]+", " ", history))
    return ("value", map_strings(history, lambda t: re.sub(r"[ \t]+", " ", t), keys=False))
