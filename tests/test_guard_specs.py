"""Guard specs (``guards/*.toml``): the reader, each parser kind by hand, the
upstream rules against the generic kinds, lookup by name and path, the
``guards`` listing, and what ``stats``, ``parse`` and ``gate`` import."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from recordsets import grid, write_run

from guardrepro.cli import cli
from guardrepro.errors import InputError
from guardrepro.guards.parsers import SpecParser
from guardrepro.guards.registry import get_guard, get_parser
from guardrepro.guards.spec import ParserSpec, find_spec, load_spec, shipped_names

ROOT = Path(__file__).resolve().parents[1]
SAFE_UNSAFE = {"safe": 0.0, "unsafe": 1.0}

SPEC = """kind = "guard"
description = "a test guard"
source = "this test"

[prompt]
default_system_prompt = "allow"

[[prompt.messages]]
role = "user"
content = "Request: {instruction}\\nAction: {current_action}"

[parser]
kind = "json_field"
field = "verdict.label"
label_map = { SAFE = 0.0, MAYBE = 0.5, UNSAFE = 1.0 }
ignore_case = true

[decoding]
max_new_tokens = 12
"""


def _parser(kind: str, label_map: dict[str, float], **options: object) -> SpecParser:
    return SpecParser(ParserSpec(kind, label_map, **options))  # type: ignore[arg-type]


# ---------------------------------------------------------------- parser kinds, by hand


@pytest.mark.parametrize(("text", "status", "score", "error"), [
    ("safe", "ok", 0.0, None),
    ("\n\n  unsafe  \nbecause it sends money", "ok", 1.0, None),
    ("Unsafe", "error", None, "missing_verdict"),         # exact case unless ignore_case
    ("The action is not safe.", "error", None, "missing_verdict"),
    ("   \n\t", "error", None, "empty_output"),
    ("", "error", None, "empty_output"),
])
def test_first_line(text: str, status: str, score: float | None, error: str | None) -> None:
    result = _parser("first_line", SAFE_UNSAFE).parse(text)
    assert (result.status, result.score, result.error_type) == (status, score, error)


def test_first_line_ignore_case() -> None:
    parse = _parser("first_line", SAFE_UNSAFE, ignore_case=True).parse
    assert parse("UNSAFE\n").score == 1.0 and parse("Safe").components["label"] == "Safe"


@pytest.mark.parametrize(("text", "score", "error"), [
    ('{"verdict": {"label": "unsafe"}}', 1.0, None),
    ('Sure. {"verdict": {"label": "MAYBE", "why": "x"}} done', 0.5, None),
    ('{"verdict": {"label": "no"}}', None, "unknown_label"),
    ('{"verdict": {"other": 1}}', None, "missing_field"),
    ('{"verdict": {"label": {"x": 1}}}', None, "missing_field"),
    ('{"verdict": ', None, "no_json"),
    ("no object here", None, "no_json"),
    ("[1, 2]", None, "no_json"),
])
def test_json_field(text: str, score: float | None, error: str | None) -> None:
    parser = _parser("json_field", {"safe": 0.0, "maybe": 0.5, "unsafe": 1.0},
                     field_path=("verdict", "label"), ignore_case=True)
    result = parser.parse(text)
    assert (result.score, result.error_type) == (score, error)


def test_json_field_list_index_and_numbers() -> None:
    parser = _parser("json_field", {"0": 0.0, "1": 1.0}, field_path=("scores", "1"))
    assert parser.parse('{"scores": [0, 1]}').score == 1.0
    assert parser.parse('{"scores": [1, 0]}').score == 0.0
    assert parser.parse('{"scores": [1]}').error_type == "missing_field"


def test_regex_and_its_decision_position() -> None:
    parser = _parser("regex", {"low": 0.0, "high": 1.0}, pattern=r"risk:\s*(?P<r>\w+)",
                     group="r")
    text = "thinking...\nrisk:  high"
    result = parser.parse(text)
    assert (result.status, result.score) == ("ok", 1.0)
    assert parser.decision_char_offset(text) == text.index("high")
    assert parser.parse("risk: medium").error_type == "unknown_label"
    assert parser.parse("nothing").error_type == "no_match"
    assert parser.parse(" ").error_type == "empty_output"


def test_logits_by_hand() -> None:
    parser = _parser("logits", {"No": 0.0, "Yes": 1.0}, threshold=0.7)
    # softmax over (No, Yes) = (0, ln 3): P(Yes) = 3 / 4
    result = parser.parse_scored("", [0.0, 1.0986122886681098])
    assert result.components["p_yes"] == pytest.approx(0.75)
    assert result.score == 1.0 and list(result.components) == [
        "p_yes", "logit_no", "logit_yes", "threshold"]
    assert parser.parse_scored("", [0.0, 0.5]).score == 0.0    # P = 0.62 < 0.7
    assert parser.parse_scored("", [0.0]).error_type == "missing_score_logits"
    assert parser.parse_scored("", [float("inf"), 0.0]).error_type == "missing_score_logits"
    assert parser.parse("  Yes, it does").score == 1.0
    assert parser.parse("Maybe").error_type == "missing_no_yes"


NASTY = ["", " ", "\x00", "{", "}{", '{"a":', "safe\x85", "Safety:", "Safety: Safe",
         "\u2028unsafe", "unsafe\r\nS1", "<harmfulness_rating>", "[" * 50, "{" * 50 + "}",
         "0" * 500, "Yes", "No", "safe\nunsafe", "\ufeffsafe", "𝓈𝒶𝒻𝑒"]


@pytest.mark.parametrize("kind", ["first_line", "json_field", "regex", "logits", "tagged"])
def test_every_kind_is_total(kind: str) -> None:
    options: dict[str, object] = {
        "first_line": {}, "json_field": {"field_path": ("a",)},
        "regex": {"pattern": r"(?P<label>safe|unsafe)"}, "logits": {}, "tagged": {}}[kind]
    labels = {} if kind == "tagged" else {"safe": 0.0, "unsafe": 1.0}
    parser = _parser(kind, labels, **options)
    for text in NASTY:
        result = parser.parse(text)
        assert result.status in ("ok", "error")
        assert (result.score is None) == (result.status == "error")
        offset = parser.decision_char_offset(text)
        assert offset is None or 0 <= offset <= len(text)


# ---------------------------------------------------------------- upstream rules vs kinds


OUTPUTS = ["safe", "\n\nunsafe\nS1,S2", "unsafe", "Unsafe", " safe \n", "", "  ", "unsure",
           "Safety: Unsafe\nCategories: PII", "Safety:Safe", "Safety: Controversial",
           "Safety: Safety", "x Safety: Unsafe", "Safety: unsafe", "safe\nSafety: Unsafe"]


@pytest.mark.parametrize("name", ["llama-guard-3", "qwen3guard"])
def test_rules_agree_with_their_generic_kind(name: str) -> None:
    """The evaluator's rules (code) and the spec's kind and label_map without
    them (a second implementation) give every output the same status and score."""
    spec = find_spec(name).parser
    generic = SpecParser(ParserSpec(spec.kind, spec.label_map, pattern=spec.pattern,
                                    group=spec.group))
    rules = get_parser(name)
    for text in OUTPUTS:
        a, b = rules(text), generic.parse(text)
        assert (a.status, a.score) == (b.status, b.score), (name, text)


def test_shipped_guards_keep_their_parser_versions() -> None:
    versions = {"ts-guard": "ts-guard-parser-v2.1", "toy-guard": "ts-guard-parser-v2.1",
                "llama-guard-3": "llama-guard-3-parser-v2", "qwen3guard": "qwen3guard-parser-v2",
                "shieldgemma": "shieldgemma-logit-v1", "rule-nuisance": "rule-v1",
                "rule-tool-lookup": "rule-v1"}
    from guardrepro.guards.base import GuardTemplate

    built = {n: get_guard(n, GuardTemplate("t", "0" * 64)) for n in shipped_names()}
    assert {n: g.parser_version for n, g in built.items()} == versions
    assert {n: g.name for n, g in built.items()} == {n: n for n in versions}


# ---------------------------------------------------------------- the reader


def _write(tmp_path: Path, text: str, name: str = "my-guard") -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_spec_by_path_messages_and_hash(tmp_path: Path) -> None:
    path = _write(tmp_path, SPEC)
    guard = get_guard(str(path))
    assert guard.name == "my-guard"
    sample = {"instruction": "Pay", "history": "h", "current_action": {"tool": "send"},
              "env_info": ""}
    assert guard.messages(sample) == [
        {"role": "user", "content": 'Request: Pay\nAction: {"tool": "send"}'}]
    assert guard.parse('{"verdict": {"label": "Unsafe"}}').score == 1.0
    assert dict(guard.decision_labels) == {"SAFE": 0.0, "MAYBE": 0.5, "UNSAFE": 1.0}
    assert guard.parser_version.startswith("json_field-v1:")
    assert guard.decoding_defaults("greedy") == {"mode": "greedy", "max_new_tokens": 12}
    import hashlib

    assert find_spec(str(path)).sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    changed = _write(tmp_path, SPEC.replace("MAYBE = 0.5", "MAYBE = 1.0"), "other")
    assert get_guard(str(changed)).parser_version != guard.parser_version


@pytest.mark.parametrize(("edit", "field", "words"), [
    (("MAYBE = 0.5", "MAYBE = 0.3"), "parser.label_map.MAYBE", "expected a score 0, 0.5 or 1"),
    (('kind = "json_field"', 'kind = "xml"'), "parser.kind", "expected one of first_line"),
    (("{current_action}", "{action}"), "prompt.messages[0].content", "unknown row field"),
    (('field = "verdict.label"', 'field = "a..b"'), "parser.field", "dotted field path"),
    (('"allow"', '"maybe"'), "prompt.default_system_prompt", "expected one of forbid"),
    (("max_new_tokens = 12", "max_new_tokens = 12\nmax_tokens = 3"), "decoding.max_tokens",
     "unknown key"),
])
def test_reader_names_file_and_field(tmp_path: Path, edit: tuple[str, str], field: str,
                                     words: str) -> None:
    path = _write(tmp_path, SPEC.replace(*edit))
    with pytest.raises(InputError) as err:
        load_spec(path)
    assert err.value.file == str(path) and err.value.field == field
    assert words in err.value.message


def test_reader_refuses_two_prompts_and_a_regex_without_its_group(tmp_path: Path) -> None:
    two = SPEC.replace("[prompt]\n", '[prompt]\nconversation = "agent-step"\n')
    with pytest.raises(InputError, match="exactly one of template, conversation, messages"):
        load_spec(_write(tmp_path, two))
    regex = SPEC.replace('kind = "json_field"\nfield = "verdict.label"',
                         'kind = "regex"\npattern = "(safe|unsafe)"')
    with pytest.raises(InputError, match=r"no named group 'label'") as err:
        load_spec(_write(tmp_path, regex))
    assert err.value.field == "parser.pattern"
    with pytest.raises(InputError, match="this is a run profile, not a guard spec"):
        load_spec(ROOT / "runners/toy-hf.toml")


def test_lookup_by_name_local_and_unknown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                          ) -> None:
    assert find_spec("toy-guard").origin == "shipped"
    (tmp_path / "guards").mkdir()
    _write(tmp_path / "guards", SPEC, "house-guard")
    _write(tmp_path / "guards", SPEC, "ts-guard")            # shadowed by the shipped one
    monkeypatch.chdir(tmp_path)
    assert find_spec("house-guard").origin == "local"
    assert find_spec("ts-guard").origin == "shipped"
    with pytest.raises(InputError, match="did you mean 'house-guard'"):
        find_spec("house-gard")
    result = CliRunner().invoke(cli, ["guards", "--json", "--spec",
                                      str(tmp_path / "guards/house-guard.toml")])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    origins = [(r["name"], r["origin"]) for r in rows if r["origin"] != "shipped"]
    assert origins == [("house-guard", "local"),
                       ("ts-guard", "local (shadowed by the shipped spec)"),
                       ("house-guard", "path")]
    assert [r["name"] for r in rows if r["origin"] == "shipped"] == shipped_names()


def test_shipped_folder_holds_one_spec_per_guard() -> None:
    assert sorted(p.stem for p in (ROOT / "guards").glob("*.toml")) == sorted(shipped_names())
    assert {"ts-guard", "toy-guard", "llama-guard-3", "qwen3guard", "shieldgemma"} <= set(
        shipped_names())


# ---------------------------------------------------------------- what verbs import

PROBE = """
import json, sys
from guardrepro.cli import main
code = main(sys.argv[1:])
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""
ADAPTER_CODE = ("guardrepro.guards.adapter", "guardrepro.guards.llama_guard",
                "guardrepro.guards.qwen3guard", "guardrepro.guards.shieldgemma",
                "guardrepro.guards.rule")


def _modules(*args: str, stdin: str = "") -> set[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=300, check=False, input=stdin)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["code"] in (0, 3), done.stderr
    return set(result["modules"])


def _adapters(loaded: set[str]) -> set[str]:
    return {m for m in loaded if m.startswith(ADAPTER_CODE)}


def test_stats_parse_and_gate_import_no_adapter(tmp_path: Path) -> None:
    bases = [("b1", "banking", 0), ("b2", "banking", 1)]
    ref = write_run(tmp_path / "ref", grid(bases, {"original": [0, 1], "tool_alias": [1, 1]}))
    run = write_run(tmp_path / "run", grid(bases, {"original": [0, 0], "tool_alias": [1, 0]}))
    spec = tmp_path / "gate.toml"
    spec.write_text('name = "g"\nrows = "originals"\n[reference]\ntype = "records"\n'
                    f'path = "{(ref / "records.jsonl").as_posix()}"\n[thresholds]\n'
                    "expected_rows = 2\nmin_coverage = 1.0\nmin_strict_agreement = 0.5\n"
                    "min_strict_agreement_gold_safe = 0.5\n"
                    "min_strict_agreement_gold_unsafe = 0.0\n",
                    encoding="utf-8")
    stats = _modules("stats", str(run), "--replicates", "20", "--no-progress")
    gate = _modules("gate", str(run), "--spec", str(spec))
    line = json.dumps({"id": 1, "text": "unsafe\nS1"}) + "\n"
    parse = _modules("parse", "--guard", "llama-guard-3", stdin=line)
    assert "guardrepro.guards.ts_guard.parser" in stats    # the records' own parser
    assert not _adapters(stats) and not _adapters(gate)
    # parse loads the Llama Guard evaluator rules it was asked for, and nothing else
    assert _adapters(parse) == {"guardrepro.guards.llama_guard",
                                "guardrepro.guards.llama_guard.rules"}
