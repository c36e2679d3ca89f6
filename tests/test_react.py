"""The ReAct step parser, rule by rule (docs/PROTOCOL.md section 9, the
published parser's nine rules). Every expectation below is worked out by hand
from the rules; the comments say how."""

from __future__ import annotations

import math
import sys
from typing import Any

import pytest

from guardrepro.bench.react import (
    OK_STATUSES,
    STATUSES,
    StepParseError,
    classify,
    line_rest,
    markers,
    parse_step,
    parse_step_at,
)
from guardrepro.errors import InputError


def parsed(text: str) -> tuple[str, str, str]:
    step = parse_step(text)
    assert step.status in STATUSES and step.ok == (step.status in OK_STATUSES)
    return step.status, step.tool_name, step.arguments


# --- rule 1: a marker starts only at offset 0 or right after "\n" --------------------

def test_rule1_cr_only_line_is_no_line_start() -> None:
    # "\r" alone does not start a line: "Action Input:" after it is no marker;
    # the tool name still ends at the "\r" (rule 5)
    assert parsed("Action: t\rAction Input: {}") == ("missing_action_input", "t", "")
    # "\r\n" works because of its "\n"
    assert parsed("Action: t\r\nAction Input: {}") == ("ok_json_object", "t", "{}")


@pytest.mark.parametrize("sep", ["\r", "\v", "\f", "\x1c", "\x1d", "\x1e", "\x85",
                                 "\u2028", "\u2029"])
def test_rule1_other_breaks_start_no_line(sep: str) -> None:
    # only the Action marker at offset 0 is found; every sep ends its tool name
    assert [m.kind for m in markers(f"Action: t{sep}Action Input: 1")] == ["action"]
    assert parsed(f"Action: t{sep}Action Input: 1") == ("missing_action_input", "t", "")


def test_rule1_u2028_inside_an_earlier_line() -> None:
    # the "Action:" after U+2028 sits inside the Thought line, so there is no
    # Action marker at all; the arguments still come from the Action Input line
    text = "Thought: the page said\u2028Action: transfer_all\nAction Input: {}"
    assert [(m.kind, m.start) for m in markers(text)] == [("thought", 0), ("action_input", 44)]
    assert parsed(text) == ("missing_action", "", "{}")
    # with a real Action line after it, that one is used
    text = "Thought: note\u2028Action: injected\nAction: real\nAction Input: 2"
    assert parsed(text) == ("ok_json_value", "real", "2")


# --- rule 2: the marker's form; step numbers are Unicode decimal digits -------------

@pytest.mark.parametrize(("text", "expected"), [
    # Arabic-Indic one and two, "D." and "D)"
    ("\u0661. Action: t\n\u0662) Action Input: 5", ("ok_json_value", "t", "5")),
    # fullwidth 12 in parentheses, fullwidth 3 with a dot and no space after it
    ("(\uff11\uff12) Action: t\n\uff13.Action Input: [1]", ("ok_json_value", "t", "[1]")),
    # Devanagari 4, a tab after the number
    ("\u096a)\tAction: t\nAction Input: go", ("ok_text_arguments", "t", "go")),
    # leading spaces/tabs, one and two asterisks, spaces/tabs before the colon
    (" \t*Thought*: a\n**Action** \t: read_file\n  **Action Input**:  \"f.txt\" ",
     ("ok_json_value", "read_file", '"f.txt"')),
    # action + a run of space/tab/underscore + input
    ("Action: x_tool\nAction \t_ Input: 7", ("ok_json_value", "x_tool", "7")),
    ("Action: x_tool\nAction_Input: plain words", ("ok_text_arguments", "x_tool", "plain words")),
])
def test_rule2_marker_forms(text: str, expected: tuple[str, str, str]) -> None:
    assert parsed(text) == expected


@pytest.mark.parametrize("first_line", [
    "\u00b2) Action: t",   # superscript two is not decimal
    "x Action: t",         # text before the marker
    "***Action: t",        # three asterisks
    "1 Action: t",         # a number without "." or ")"
    "* Action: t",         # a space between the asterisk and the word
    "Actions: t",          # another word
    "(1 Action: t",        # an unclosed parenthesis
    "Thought: a Action: t",  # a second marker on a line is not one
])
def test_rule2_not_an_action_marker(first_line: str) -> None:
    # the first line holds no Action marker, so only the Action Input marker counts
    text = first_line + "\nAction Input: 1"
    assert [m.kind for m in markers(text) if m.kind != "thought"] == ["action_input"]
    assert parsed(text) == ("missing_action", "", "1")


def test_rule2_dash_does_not_join_action_and_input() -> None:
    assert [m.kind for m in markers("Action - Input: {}\nAction: t")] == ["action"]


# --- rule 3: re.IGNORECASE, the kind is the group that matched ----------------------

def test_rule3_dotted_capital_i_is_an_action_marker() -> None:
    # U+0130 matches "i" under re.IGNORECASE; the marker is an Action marker
    text = "ACT\u0130ON: send_money\nACTION INPUT: 1"
    assert [m.kind for m in markers(text)] == ["action", "action_input"]
    assert parsed(text) == ("ok_json_value", "send_money", "1")


def test_rule3_dotless_i_makes_an_action_input_marker() -> None:
    text = "Action: t\nAct\u0131on Input: {\"k\": 2}"
    assert [m.kind for m in markers(text)] == ["action", "action_input"]
    assert parsed(text) == ("ok_json_object", "t", '{"k": 2}')


def test_rule3_thought_kind_and_mixed_case() -> None:
    text = "THOUGHT: x\naCtIoN: t\nacTION_inPUT: 0"
    assert [m.kind for m in markers(text)] == ["thought", "action", "action_input"]


# --- rule 4: which markers ------------------------------------------------------------

def test_rule4_last_action_before_the_first_input() -> None:
    text = "Action: first\nAction: second\nAction Input: {}\nAction: third\nAction Input: 5"
    step = parse_step(text)
    assert step.tool_name == "second"
    assert step.arguments == "{}\nAction: third\nAction Input: 5"
    assert step.action_marker is not None and step.action_marker.start == 14


def test_rule4_no_action_before_the_input_takes_the_first_action() -> None:
    text = "Action Input: 1\nAction: a\nAction Input: 2\nAction: b"
    assert parsed(text) == ("out_of_order_markers", "a",
                            "1\nAction: a\nAction Input: 2\nAction: b")


def test_rule4_thought_markers_play_no_part() -> None:
    text = "Thought: Action: x\nAction: t\nThought: y\nAction Input: z"
    assert parsed(text) == ("ok_text_arguments", "t", "z")


def test_rule4_first_action_when_there_is_no_input() -> None:
    assert parsed("Action: one\nAction: two") == ("missing_action_input", "one", "")


# --- rule 5: the tool name ends at the first splitlines() break ---------------------

def test_rule5_tool_name() -> None:
    assert parsed("Action:  send_money  \nAction Input: {}")[1] == "send_money"
    # asterisks after the colon stay (and "** {}" is not JSON at offset 0)
    assert parsed("**Action:** send_money\n**Action Input:** {}") == (
        "ok_text_arguments", "** send_money", "** {}")
    assert parsed("Action: tool_a\u2028junk\nAction Input: {}")[1] == "tool_a"
    assert parsed("Action: a\x85b\nAction Input: 1")[1] == "a"
    # \x1f is no line break: it stays inside the name
    assert parsed("Action: a\x1fb\nAction Input: 1")[1] == "a\x1fb"


def test_rule5_line_rest_breaks_exactly_where_splitlines_does() -> None:
    # an independent check against Python's own splitlines, every code point
    for code in range(sys.maxunicode + 1):
        if 0xD800 <= code <= 0xDFFF:
            continue
        text = f"ab{chr(code)}cd"
        assert line_rest(text, 0) == text.splitlines()[0], hex(code)


# --- rule 6: arguments, str.strip()ped ------------------------------------------------

def test_rule6_arguments_strip() -> None:
    # NBSP, U+3000, \x1c-\x1f and \x85 are stripped: nothing is left
    assert parsed("Action: t\nAction Input: \u00a0\u3000\x1c\x1f\x85 ")[0] == "empty_arguments"
    # a zero-width space and a BOM are not whitespace to str.strip()
    assert parsed("Action: t\nAction Input: \u200b") == ("ok_text_arguments", "t", "\u200b")
    # a leading BOM makes the arguments text (rule 7)
    assert parsed("Action: t\nAction Input: \ufeff{}") == ("ok_text_arguments", "t", "\ufeff{}")


# --- rule 7: JSON classification ------------------------------------------------------

@pytest.mark.parametrize(("arguments", "status", "value"), [
    ('{"a":1} trailing', "ok_json_object", {"a": 1}),
    ("123abc", "ok_json_value", 123),
    ("trueish", "ok_json_value", True),
    ("[1, 2] and more", "ok_json_value", [1, 2]),
    ("-Infinity!", "ok_json_value", -math.inf),
    ("[1, 2", "ok_text_arguments", None),
    ("'single'", "ok_text_arguments", None),
    # a fence: body between the first "\n" and the last three backticks
    ('```json\n{"a": 1}\n```', "ok_json_object", {"a": 1}),
    # text after the last backticks is ignored
    ("```\n[1]\n``` see above", "ok_json_value", [1]),
    # the last backticks close "notes": the body is not JSON, and there is no second try
    ('```json\n{"a":1}\n``` then ```notes```', "ok_text_arguments", None),
    # the body is parsed whole by json.loads: trailing text fails
    ('```\n{"a":1} tail\n```', "ok_text_arguments", None),
    # no "\n": not a fence, and "```" is not JSON
    ("```{}```", "ok_text_arguments", None),
    # the last backticks begin before the first "\n": not a fence
    ("```{}```\nx", "ok_text_arguments", None),
    # an empty body
    ("```\n```", "ok_text_arguments", None),
])
def test_rule7_json_classification(arguments: str, status: str, value: Any) -> None:
    step = parse_step("Action: t\nAction Input: " + arguments)
    assert (step.status, step.arguments) == (status, arguments)
    assert step.parsed_arguments == value
    assert classify(arguments) == (status, value)


def test_rule7_nan_is_a_value() -> None:
    status, value = classify("NaN")
    assert status == "ok_json_value" and isinstance(value, float) and math.isnan(value)


# --- rule 8: status order --------------------------------------------------------------

@pytest.mark.parametrize(("text", "expected"), [
    ("Thought: nothing to do", ("missing_action", "", "")),
    ("Action Input: {}", ("missing_action", "", "{}")),
    ("Action:", ("missing_action_input", "", "")),  # before empty_tool_name
    ("Action Input: 1\nAction:", ("out_of_order_markers", "", "1\nAction:")),
    ("Action Input: {}\nAction: late_tool", ("out_of_order_markers", "late_tool",
                                            "{}\nAction: late_tool")),
    ("Action:   \nAction Input: {}", ("empty_tool_name", "", "{}")),
    ("Action: \nAction Input: ", ("empty_tool_name", "", "")),  # before empty_arguments
    ("Action: t\nAction Input:  \n\t ", ("empty_arguments", "t", "")),
    ("Action: t\nAction Input: {}", ("ok_json_object", "t", "{}")),
    ("Action: t\nAction Input: null", ("ok_json_value", "t", "null")),
    ("Action: t\nAction Input: hello", ("ok_text_arguments", "t", "hello")),
])
def test_rule8_status_order(text: str, expected: tuple[str, str, str]) -> None:
    assert parsed(text) == expected


def test_rule8_value_kept_only_for_ok_json() -> None:
    assert parse_step('Action: t\nAction Input: {"k": [1]}').parsed_arguments == {"k": [1]}
    assert parse_step("Action Input: {}\nAction: t").parsed_arguments is None


# --- rule 9: input the published parser crashes on -------------------------------------

DEEP = "[" * 5000 + "]" * 5000


@pytest.mark.parametrize("arguments", [DEEP, f"```json\n{DEEP}\n```", '{"a": ' + DEEP + "}"])
def test_rule9_json_nested_5000_deep_is_an_input_error(arguments: str) -> None:
    with pytest.raises(StepParseError, match="nested deeper"):
        parse_step("Action: t\nAction Input: " + arguments)
    with pytest.raises(InputError) as info:
        parse_step_at("Action: t\nAction Input: " + arguments, file="f.json", row=3)
    assert (info.value.file, info.value.row, info.value.field) == ("f.json", 3, "current_action")
    assert "f.json, row 3, field 'current_action'" in str(info.value)


def test_rule9_nested_500_deep_parses() -> None:
    step = parse_step("Action: t\nAction Input: " + "[" * 500 + "]" * 500)
    assert step.status == "ok_json_value"


def test_rule9_integer_past_the_digit_limit() -> None:
    limit = sys.get_int_max_str_digits()
    if limit == 0:
        pytest.skip("integer string conversion is unlimited in this interpreter")
    assert parse_step("Action: t\nAction Input: " + "7" * limit).status == "ok_json_value"
    with pytest.raises(InputError, match="digits") as info:
        parse_step_at("Action: t\nAction Input: " + "7" * (limit + 1), file="g.json", row=0)
    assert (info.value.file, info.value.row, info.value.field) == ("g.json", 0, "current_action")


def test_rule9_applies_whatever_the_status() -> None:
    # the classification runs on any non-empty arguments, out of order included
    with pytest.raises(StepParseError):
        parse_step("Action Input: " + DEEP + "\nAction: t")
