"""The ReAct step parser: which tool a TS-Bench ``current_action`` calls.

Input: one text (a row's stringified ``current_action``). Output: a frozen
:class:`ReactStep` with a status, the tool name and the arguments. It is the
single parser behind the cohort builder (candidate tool of a base) and the
tool-name lookup audit (the lookup key). The rules are the published
parser's, numbered as in ``docs/PROTOCOL.md``, "Step parser":

1. Line starts: a marker may begin only at offset 0 or right after ``\\n``
   (a lone ``\\r``, ``\\v``, ``\\f``, ``\\x1c``-``\\x1e``, ``\\x85``, U+2028 or
   U+2029 does not start a line).
2. Marker, at a line start: spaces/tabs; optionally a step number ``(D)``,
   ``D.`` or ``D)`` and spaces/tabs, D one or more Unicode decimal digits
   (``str.isdecimal``, which is what ``\\d`` matches in a ``str`` pattern);
   zero to two ``*``; the word (``thought``, ``action``, ``action`` + one or
   more of space/tab/underscore + ``input``); zero to two ``*``;
   spaces/tabs; ``:``. At most one marker a line.
3. Case: ``re.IGNORECASE``; the marker's kind is the word group that
   matched (``ACTİON:`` is an Action marker), never the lower-cased text.
4. The first Action Input marker; the last Action marker starting before it,
   else (none before it, or no Action Input marker) the first Action marker.
5. Tool name: from the Action colon to the first ``str.splitlines()`` break,
   ``str.strip()``ped; ``""`` without an Action marker.
6. Arguments: everything after the Action Input colon, ``str.strip()``ped.
7. JSON classification of non-empty arguments: a fence (starts with three
   backticks, holds a ``\\n``, its last three backticks begin after the first
   ``\\n``) is JSON only when ``json.loads`` of its stripped body succeeds;
   any other text is JSON when ``json.JSONDecoder().raw_decode`` reads a
   value at offset 0, whatever follows it.
8. Status, first that applies: ``missing_action``, ``missing_action_input``,
   ``out_of_order_markers``, ``empty_tool_name``, ``empty_arguments``, then
   ``ok_json_object`` / ``ok_json_value`` / ``ok_text_arguments``.
9. Arguments the published code crashes on (JSON nested past the recursion
   limit, an integer literal past Python's digit limit) raise
   :class:`StepParseError`, an ``InputError``; ``parse_step_at`` names the
   file, row and field.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from guardrepro.errors import InputError, StepParseError

__all__ = ["OK_STATUSES", "STATUSES", "Marker", "ReactStep", "StepParseError", "classify",
           "fence_body", "line_rest", "markers", "parse_step", "parse_step_at"]

OK_STATUSES = ("ok_json_object", "ok_json_value", "ok_text_arguments")
STATUSES = (
    "missing_action",
    "missing_action_input",
    "out_of_order_markers",
    "empty_tool_name",
    "empty_arguments",
    *OK_STATUSES,
)

# Rules 1-3: ``^`` under re.MULTILINE matches at offset 0 and after "\n" only;
# nothing in the pattern crosses a "\n", so a line holds at most one marker.
_MARKER = re.compile(
    r"^[ \t]*(?:(?:\(\d+\)|\d+[.)])[ \t]*)?\*{0,2}"
    r"(?:(?P<action_input>action[ \t_]+input)|(?P<thought>thought)|(?P<action>action))"
    r"\*{0,2}[ \t]*:",
    re.MULTILINE | re.IGNORECASE,
)
KINDS = ("action_input", "thought", "action")
# Rule 5: the characters at which str.splitlines() breaks ("\r\n" breaks at "\r").
_LINE_BREAK = re.compile("[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]")
_FENCE = "```"
_DECODER = json.JSONDecoder()


@dataclass(frozen=True)
class Marker:
    """One marker: its kind, where it starts in the text and where its colon ends."""

    kind: str  # "thought" | "action" | "action_input"
    start: int
    end: int


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
    """Every marker of ``text`` in order of position (rules 1-3)."""
    out = []
    for match in _MARKER.finditer(text):
        kind = next(k for k in KINDS if match.group(k) is not None)
        out.append(Marker(kind, match.start(), match.end()))
    return out


def line_rest(text: str, start: int) -> str:
    """``text[start:]`` up to its first ``str.splitlines()`` break (rule 5)."""
    found = _LINE_BREAK.search(text, start)
    return text[start:found.start() if found is not None else len(text)]


def fence_body(arguments: str) -> str | None:
    """The stripped body of a fenced block (rule 7), or None when
    ``arguments`` is not one."""
    if not arguments.startswith(_FENCE):
        return None
    newline = arguments.find("\n")
    last = arguments.rfind(_FENCE)
    if newline < 0 or last <= newline:
        return None
    return arguments[newline + 1:last].strip()


def classify(arguments: str) -> tuple[str, object]:
    """(ok status, JSON value or None) of non-empty arguments (rule 7);
    ``StepParseError`` for input the published code crashes on (rule 9)."""
    body = fence_body(arguments)
    try:
        value = json.loads(body) if body is not None else _DECODER.raw_decode(arguments)[0]
    except json.JSONDecodeError:
        return "ok_text_arguments", None
    except RecursionError:
        raise StepParseError("the Action Input holds JSON nested deeper than Python's "
                             "recursion limit (the published parser crashes on it)",
                             field="current_action") from None
    except ValueError as exc:  # e.g. an integer literal past sys.get_int_max_str_digits()
        raise StepParseError(f"the Action Input's JSON cannot be decoded: {exc} (the "
                             "published parser crashes on it)", field="current_action") from None
    return ("ok_json_object" if isinstance(value, dict) else "ok_json_value"), value


def parse_step(text: str) -> ReactStep:
    """Parse one ReAct step (module docstring); ``StepParseError`` by rule 9."""
    found = markers(text)
    inputs = [m for m in found if m.kind == "action_input"]
    actions = [m for m in found if m.kind == "action"]
    first_input = inputs[0] if inputs else None
    before = [m for m in actions if first_input is not None and m.start < first_input.start]
    action = before[-1] if before else (actions[0] if actions else None)
    tool = line_rest(text, action.end).strip() if action is not None else ""
    arguments = text[first_input.end:].strip() if first_input is not None else ""
    kind, value = classify(arguments) if arguments else ("", None)
    if action is None:
        status = "missing_action"
    elif first_input is None:
        status = "missing_action_input"
    elif action.start > first_input.start:
        status = "out_of_order_markers"
    elif not tool:
        status = "empty_tool_name"
    elif not arguments:
        status = "empty_arguments"
    else:
        status = kind
    return ReactStep(status, tool, arguments, action, first_input,
                     value if status in OK_STATUSES else None)


def parse_step_at(text: str, *, file: str | None, row: int | None,
                  field: str = "current_action") -> ReactStep:
    """``parse_step``, a rule-9 failure named by ``file``, ``row`` and ``field``."""
    try:
        return parse_step(text)
    except StepParseError as exc:
        raise InputError(exc.message, file=file, row=row, field=field) from None
