"""Rule guards: the frozen nuisance rule and the tool-lookup predictor.

The guards are declared in ``guards/rule-nuisance.toml`` and
``guards/rule-tool-lookup.toml`` (``[prompt] rule = ...``). Input: a TS-Bench
row. ``render_rule_input`` turns it into a JSON object naming the rule and
exactly the inputs the rule reads; the ``rule`` backend
(``guardrepro.run.runners.rule_runner``) evaluates it with ``evaluate_rule`` and
returns a text output; ``parse_rule_output`` parses that text. So rule
baselines go through ``run`` and produce records like a model guard.

Rules (frozen; changing one changes ``RULE_VERSION``):

- ``rule-nuisance``: unsafe (1.0) when the history contains
  ``<information>`` (case-insensitive) AND the tool key starts with one of
  ``SIDE_EFFECT_PREFIXES``; else safe (0.0). The tool key is
  ``guardrepro.checks.audits.benchmark.tool_key(current_action)`` (the candidate tool,
  stripped and casefolded; None when unparsable, which never matches).
- ``rule-tool-lookup``: the tool key's label in a lookup table fitted on
  labelled rows (``guards.rule.lookup``; per key the majority strict gold
  label, ties unsafe), or the table's fallback (the global majority) for a
  key it never saw. The table file is the backend option ``lookup_table``.

Output text: first line ``safe`` or ``unsafe``, second line the evidence
as ``key=value`` pairs. Parser: first line exactly ``safe``/``unsafe``
(else ``missing_verdict``), evidence pairs into ``components``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from guardrepro.bench.shortcuts import (
    MARKER,
    SIDE_EFFECT_PREFIXES,
    has_marker,
    side_effect_prefix,
    tool_key,
)
from guardrepro.guards.base import GuardTemplate, ParseResult
from guardrepro.schema import sha256_text

RULE_VERSION = "rule-v1"
RULES = ("nuisance", "tool-lookup")


def nuisance_decision(history: Any, key: str | None) -> tuple[int, dict[str, Any]]:
    """(decision, evidence) of the nuisance rule."""
    marker = has_marker(history)
    prefix = None if key is None else side_effect_prefix(key)
    return int(marker and prefix is not None), {"marker": marker, "tool_key": key,
                                                 "prefix": prefix}


def evaluate_rule(rendered: str, lookup: Mapping[str, Any] | None = None) -> str:
    """The rule's output text for one rendered input (``render_rule_input``)."""
    data = json.loads(rendered)
    rule = data["rule"]
    if rule == "nuisance":
        decision, evidence = nuisance_decision(data["history"], data["tool_key"])
    elif rule == "tool-lookup":
        if lookup is None:
            raise ValueError("the tool-lookup rule needs the backend option lookup_table")
        key = data["tool_key"]
        table = lookup["table"]
        found = key if key is not None else "<none>"
        decision = int(table[found]) if found in table else int(lookup["fallback"])
        evidence = {"tool_key": key, "source": "table" if found in table else "fallback"}
    else:
        raise ValueError(f"unknown rule {rule!r} (known: {', '.join(RULES)})")
    pairs = " ".join(f"{k}={json.dumps(v)}" for k, v in evidence.items())
    return ("unsafe" if decision else "safe") + "\n" + pairs


def parse_rule_output(text: str) -> ParseResult:
    """Parse a rule guard's output (first line safe/unsafe, then evidence)."""
    lines = text.split("\n")
    verdict = lines[0].strip()
    components: dict[str, Any] = {"verdict": verdict if verdict in ("safe", "unsafe") else None}
    if components["verdict"] is None:
        return ParseResult("error", None, "missing_verdict", components)
    for pair in (lines[1].split(" ") if len(lines) > 1 and lines[1].strip() else []):
        key, _, value = pair.partition("=")
        try:
            components[key] = json.loads(value)
        except json.JSONDecodeError:
            return ParseResult("error", None, "malformed_evidence", components)
    return ParseResult("ok", 1.0 if verdict == "unsafe" else 0.0, None, components)



def rule_template(rule: str) -> GuardTemplate:
    """The rule's version and constants as its template (the run's ``template_sha256``)."""
    if rule not in RULES:
        raise ValueError(f"unknown rule {rule!r}")
    text = f"{RULE_VERSION} {rule}: prefixes {','.join(SIDE_EFFECT_PREFIXES)}; marker {MARKER}"
    return GuardTemplate(text, sha256_text(text))


def render_rule_input(rule: str, sample: Mapping[str, Any]) -> str:
    """The JSON object of the inputs ``rule`` reads (what ``evaluate_rule`` takes)."""
    data: dict[str, Any] = {"rule": rule, "tool_key": tool_key(sample["current_action"])}
    if rule == "nuisance":
        data["history"] = sample["history"]
    return json.dumps(data, ensure_ascii=False, sort_keys=True)
