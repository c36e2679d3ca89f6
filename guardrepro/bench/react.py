"""The ReAct step parser: which tool a TS-Bench ``current_action`` calls.

Input: one text (a row's stringified ``current_action``). Output: a frozen
:class:`ReactStep` with a status, the tool name and the arguments. The
parser never raises on any string. It is the single parser behind the
cohort builder (candidate tool of a base) and the tool-name lookup audit
(the lookup key); the rules are those of ``docs/PROTOCOL.md``, "Step parser".

Lines. The text is cut into lines exactly as ``str.splitlines()`` cuts it
(``\\n``, ``\\r\\n``, ``\\r``, ``\\v``, ``\\f``, ``\\x1c``-``\\x1e``, ``\\x85``,
U+2028, U+2029). A marker may only start at the start of one of these
lines, and a tool name ends at the end of the line its marker is on, so
both "start of a line" and "end of a line" follow the same rule.

Markers. At a line start: spaces/tabs, an optional step number (``(N)``,
``N.`` or ``N)``, then spaces/tabs), zero to two ``*``, the word, zero to two
``*``, spaces/tabs, ``:``. Words, case-insensitive: ``thought``, ``action``,
and ``action`` + one or more of space/tab/underscore + ``input``. The
``Action Input`` marker used is the first; the ``Action`` marker used is the
last one starting before it, or the first one when there is no Action Input
marker.

Results. ``tool_name``: the text after the Action marker's colon to the end
of its line, stripped (asterisks after the colon stay); ``""`` when there is
no Action marker. ``arguments``: everything after the Action Input marker's
colon (line breaks included), stripped; ``""`` without that marker. Status,
the first that applies: ``missing_action``, ``missing_action_input``,
``out_of_order_markers``, ``empty_tool_name``, ``empty_arguments``, then
``ok_json_object`` / ``ok_json_value`` / ``ok_text_arguments`` (the
arguments, after unwrapping a leading fenced code block, parse as a JSON
object, as another JSON value, or not at all).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

OK_STATUSES = ("ok_json_object", "ok_json_value", "ok_text_arguments")
STATUSES = (
    "missing_action",
    "missing_action_input",
    "out_of_order_markers",
    "empty_tool_name",
    "empty_arguments",
    *OK_STATUSES,
)

# Anchored at a line start by ``match`` (each line is matched on its own).
_MARKER = re.compile(
    r"[ \t]*(?:(?:\([0-9]+\)|[0-9]+[.)])[ \t]*)?"
    r"\*{0,2}(?P<word>action[ \t_]+input|thought|action)\*{0,2}[ \t]*:",
    re.IGNORECASE,
)
# A leading fenced code block: ```, an optional info word (``json``), an
# optional line break, the body, the closing ```.
_FENCE = re.compile(r"```[A-Za-z0-9_+-]*[ \t]*(?:\r\n|\n)?(?P<body>.*?)```", re.DOTALL)


@dataclass(frozen=True)
class Marker:
    """One marker: its kind, where it starts in the text, where its colon ends,
    and where its line ends (before the line break)."""

    kind: str  # "thought" | "action" | "action_input"
    start: int
    end: int
    line_end: int


@dataclass(frozen=True)
class ReactStep:
    """The parse of one ReAct step (see the module docstring)."""

    status: str
    tool_name: str
    arguments: str
    action_marker: Marker | None
    input_marker: Marker | None
    parsed_arguments: object = None  # the JSON value for ok_json_*, else None

    @property
    def ok(self) -> bool:
        return self.status in OK_STATUSES


def markers(text: str) -> list[Marker]:
    """Every marker of ``text`` in order of position."""
    out: list[Marker] = []
    offset = 0
    for line in text.splitlines(keepends=True):
        body = line.splitlines()[0]  # the line without its line break
        match = _MARKER.match(body)
        if match is not None:
            out.append(Marker(_kind(match.group("word")), offset + match.start(),
                              offset + match.end(),
                              offset + len(body)))
        offset += len(line)
    return out


def _kind(word: str) -> str:
    return "action_input" if word.lower().endswith("input") else word.lower()


def unwrap_fence(arguments: str) -> str:
    """The body of a fenced code block at the very start of ``arguments``
    (stripped), else ``arguments`` unchanged."""
    match = _FENCE.match(arguments)
    return match.group("body").strip() if match is not None else arguments


def _classify(arguments: str) -> tuple[str, object]:
    try:
        value = json.loads(unwrap_fence(arguments))
    except ValueError:
        return "ok_text_arguments", None
    if isinstance(value, dict):
        return "ok_json_object", value
    return "ok_json_value", value


def parse_step(text: str) -> ReactStep:
    """Parse one ReAct step (see the module docstring)."""
    found = markers(text)
    inputs = [m for m in found if m.kind == "action_input"]
    actions = [m for m in found if m.kind == "action"]
    first_input = inputs[0] if inputs else None
    if first_input is None:
        action = actions[0] if actions else None
    else:
        before = [m for m in actions if m.start < first_input.start]
        action = before[-1] if before else (actions[0] if actions else None)
    tool = text[action.end:action.line_end].strip() if action is not None else ""
    arguments = text[first_input.end:].strip() if first_input is not None else ""
    status: str
    value: object = None
    if action is None:
        status = "missing_action"
    elif first_input is None:
        status = "missing_action_input"
    elif not action.start < first_input.start:
        status = "out_of_order_markers"
    elif not tool:
        status = "empty_tool_name"
    elif not arguments:
        status = "empty_arguments"
    else:
        status, value = _classify(arguments)
    return ReactStep(status, tool, arguments, action, first_input, value)
