"""The ReAct step parser: every status and every marker form, by hand."""

from __future__ import annotations

import pytest

from guardrepro.bench.react import OK_STATUSES, STATUSES, markers, parse_step, unwrap_fence


@pytest.mark.parametrize(
    ("text", "status", "tool", "arguments"),
    [
        # plain ReAct
        ('Thought: pay\nAction: send_money\nAction Input: {"to": "x"}',
         "ok_json_object", "send_money", '{"to": "x"}'),
        # numbered markers, three forms, with spaces and tabs after the number
        ("(1) Thought: a\n2.\tAction: get_iban\n3)  Action Input: []",
         "ok_json_value", "get_iban", "[]"),
        # leading spaces/tabs, one and two asterisks around the word
        (" \t*Thought*: a\n**Action**: read_file\n  **Action Input**:  \"f.txt\" ",
         "ok_json_value", "read_file", '"f.txt"'),
        # Action_Input and Action + space/tab/underscore mix + input, any case
        ("ACTION: x_tool\naction \t_ INPUT: 7", "ok_json_value", "x_tool", "7"),
        ("Action: x_tool\nAction_Input: plain words", "ok_text_arguments", "x_tool",
         "plain words"),
        # asterisks after the colon stay in the name (and in the arguments)
        ("**Action:** send_money\n**Action Input:** {}", "ok_text_arguments", "** send_money",
         "** {}"),
        # spaces/tabs between the closing asterisks and the colon
        ("Action** \t: t1\nAction Input: {}", "ok_json_object", "t1", "{}"),
        # U+2028 ends the tool name's line, and a marker may start after it
        ("Action: tool_a\u2028Action Input: {}", "ok_json_object", "tool_a", "{}"),
        # \r\n, \r, \x85 and U+2029 too
        ("Action: tool_b\r\nAction Input: {}", "ok_json_object", "tool_b", "{}"),
        ("Action: tool_c\rAction Input: {}", "ok_json_object", "tool_c", "{}"),
        ("Action: tool_d\x85Action Input: {}", "ok_json_object", "tool_d", "{}"),
        ("Action: tool_e\u2029Action Input: {}", "ok_json_object", "tool_e", "{}"),
        # last Action before the first Action Input; later markers ignored
        ("Action: first\nAction: second\nAction Input: {}\nAction: third\nAction Input: 5",
         "ok_text_arguments", "second", "{}\nAction: third\nAction Input: 5"),
        # a fenced code block is unwrapped before the JSON parse
        ('Action: t\nAction Input: ```json\n{"a": 1}\n```', "ok_json_object", "t",
         '```json\n{"a": 1}\n```'),
        ("Action: t\nAction Input: ```\n[1, 2]\n```\ntrailing", "ok_json_value", "t",
         "```\n[1, 2]\n```\ntrailing"),
        # statuses that exclude
        ("Thought: nothing to do", "missing_action", "", ""),
        ("Action Input: {}", "missing_action", "", "{}"),
        ("Action: lonely_tool", "missing_action_input", "lonely_tool", ""),
        ("Action Input: {}\nAction: late_tool", "out_of_order_markers", "late_tool",
         "{}\nAction: late_tool"),
        ("Action:   \nAction Input: {}", "empty_tool_name", "", "{}"),
        ("Action: t\nAction Input:  \n\t ", "empty_arguments", "t", ""),
    ],
)
def test_parse_step(text: str, status: str, tool: str, arguments: str) -> None:
    step = parse_step(text)
    assert (step.status, step.tool_name, step.arguments) == (status, tool, arguments)
    assert step.ok == (status in OK_STATUSES)
    assert status in STATUSES


@pytest.mark.parametrize(
    "text",
    [
        "x Action: t\nAction Input: {}",  # not at a line start
        "***Action: t\nAction Input: {}",  # three asterisks
        "1 Action: t\nAction Input: {}",  # a number without . or )
        "* Action: t\nAction Input: {}",  # space between asterisk and word
        "Action :t\nAction Input: {}",  # fine: space before the colon is allowed
        "Actions: t\nAction Input: {}",  # another word
        "Action - Input: {}\nAction: t",  # '-' does not join action and input
    ],
)
def test_not_a_marker(text: str) -> None:
    kinds = [m.kind for m in markers(text)]
    first_line_is_marker = bool(markers(text)) and markers(text)[0].start == 0
    if text.startswith("Action :"):
        assert first_line_is_marker and kinds == ["action", "action_input"]
    elif text.startswith("Action - Input"):
        assert kinds == ["action"]
    else:
        assert kinds == ["action_input"]


def test_vertical_tab_and_form_feed_are_line_ends() -> None:
    # str.splitlines() breaks at \v and \f: a marker can start right after them
    for sep in ("\v", "\f", "\x1c", "\x1d", "\x1e"):
        step = parse_step(f"Action: t{sep}Action Input: 1")
        assert (step.status, step.tool_name, step.arguments) == ("ok_json_value", "t", "1")


def test_marker_offsets() -> None:
    text = "Thought: a\u2028  (12) **action input**: {}"
    found = markers(text)
    assert [(m.kind, m.start) for m in found] == [("thought", 0), ("action_input", 11)]
    assert text[found[1].end:] == " {}"


def test_unwrap_fence() -> None:
    assert unwrap_fence('```json\n{"a": 1}\n```') == '{"a": 1}'
    assert unwrap_fence("```{}```") == "{}"
    assert unwrap_fence("text ```{}```") == "text ```{}```"  # not leading


def test_json_value_kept() -> None:
    assert parse_step('Action: t\nAction Input: {"k": [1]}').parsed_arguments == {"k": [1]}
    assert parse_step("Action: t\nAction Input: null").status == "ok_json_value"
