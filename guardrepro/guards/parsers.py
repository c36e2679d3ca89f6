"""The parser kinds a guard spec names: total functions from raw text to a score.

Input: a ``spec.ParserSpec`` (kind, ``label_map`` onto 0 / 0.5 / 1, the
kind's options). Output: a ``SpecParser`` whose ``parse(text)`` and
``parse_scored(text, score_logits)`` return a ``ParseResult`` and never raise
on any ``str``, and whose ``decision_char_offset(text)`` says where the
verdict starts.

Kinds (each looks its label up in ``label_map``, exactly, or case-folded
with ``ignore_case``):

- ``first_line``: the text stripped of surrounding whitespace; its first
  line, stripped, is the label (empty: ``empty_output``; not a label:
  ``missing_verdict``).
- ``json_field``: the first JSON object in the text (from its first ``{``,
  ``json.JSONDecoder.raw_decode``), then the dotted field path (a list index
  where the value is a list); the field's value, a string, or a number or
  boolean written as JSON, is the label (``no_json``, ``missing_field``,
  ``unknown_label``).
- ``regex``: the first match of ``pattern`` anywhere; its named group is
  the label (``empty_output``, ``no_match``, ``unknown_label``).
- ``tagged``: TS-Guard's exact tag-triple parser and composite score
  (``guards.ts_guard.parser``).
- ``logits``: the label tokens' logits at the first generated position
  (``score_logits``, in ``label_map`` order): the softmax over them gives
  the unsafe label's probability, 1 when it reaches ``threshold``, else 0;
  components ``p_<unsafe>`` and ``logit_<label>`` (lower case) and
  ``threshold``; missing or non-finite logits: ``missing_score_logits``.
  From text alone (``parse``): a leading label word (``missing_<labels>``).

``rules`` names upstream evaluator code that replaces the kind's function
(``RULES``: the Llama Guard 3 and Qwen3Guard evaluators' rules, the rule
guards' output); it is imported only when a parser is built.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from guardrepro.guards.base import ParseResult
from guardrepro.guards.spec import ParserSpec

KIND_VERSION = "v1"
RULES: Mapping[str, str] = {
    "llama-guard-3": "guardrepro.guards.llama_guard.rules:parse_llama_guard",
    "qwen3guard": "guardrepro.guards.qwen3guard.rules:parse_qwen3guard",
    "rule": "guardrepro.guards.rule.rules:parse_rule_output",
}
_TAGGED = "guardrepro.guards.ts_guard.parser"


def _load(target: str) -> Any:
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def _error(kind: str, components: dict[str, Any]) -> ParseResult:
    return ParseResult("error", None, kind, components)


def _first_non_space(text: str) -> int | None:
    stripped = len(text) - len(text.lstrip())
    return stripped if stripped < len(text) else None


class SpecParser:
    """The parser a spec declares (see the module docstring)."""

    def __init__(self, spec: ParserSpec) -> None:
        self.spec = spec
        self.kind = spec.kind
        fold = spec.ignore_case
        self._labels = {(k.casefold() if fold else k): v for k, v in spec.label_map.items()}
        self._fold = fold
        self._pattern = (re.compile(spec.pattern, re.IGNORECASE if fold else 0)
                       if spec.pattern is not None else None)
        if spec.kind == "logits":
            words = "|".join(re.escape(k) for k in spec.label_map)
            self._leading = re.compile(rf"\s*({words})\b")
        self._rules: Callable[[str], ParseResult] | None = None
        if spec.rules is not None:
            if spec.rules not in RULES:
                raise KeyError(spec.rules)
            self._rules = _load(RULES[spec.rules])
        elif spec.kind == "tagged":
            self._rules = _load(f"{_TAGGED}:parse_ts_guard")

    @property
    def version(self) -> str:
        """The declared version, else the kind and the hash of its declaration."""
        if self.spec.version is not None:
            return self.spec.version
        if self.kind == "tagged":
            return str(_load(f"{_TAGGED}:PARSER_VERSION"))
        table = json.dumps({"kind": self.kind, "label_map": dict(self.spec.label_map),
                            "field": list(self.spec.field_path), "pattern": self.spec.pattern,
                            "group": self.spec.group, "threshold": self.spec.threshold,
                            "ignore_case": self.spec.ignore_case, "rules": self.spec.rules},
                           sort_keys=True)
        return f"{self.kind}-{KIND_VERSION}:{hashlib.sha256(table.encode()).hexdigest()[:16]}"

    def _score(self, label: str, components: dict[str, Any]) -> ParseResult:
        key = label.casefold() if self._fold else label
        components["label"] = label
        if key not in self._labels:
            return _error("unknown_label", components)
        return ParseResult("ok", self._labels[key], None, components)

    def parse(self, text: str) -> ParseResult:
        if self._rules is not None:
            return self._rules(text)
        return getattr(self, f"_{self.kind}")(text)

    def parse_scored(self, text: str, score_logits: Sequence[float] | None) -> ParseResult:
        if self.kind == "logits":
            return self.score_logits(score_logits)
        return self.parse(text)

    def _first_line(self, text: str) -> ParseResult:
        first = text.strip().split("\n")[0].strip()
        components: dict[str, Any] = {"label": None}
        if not first:
            return _error("empty_output", components)
        key = first.casefold() if self._fold else first
        if key not in self._labels:
            return _error("missing_verdict", components)
        return self._score(first, components)

    def _json_field(self, text: str) -> ParseResult:
        components: dict[str, Any] = {"label": None}
        start = text.find("{")
        try:
            value, _end = json.JSONDecoder().raw_decode(text[start:]) if start >= 0 else (None, 0)
        except json.JSONDecodeError:
            value = None
        if not isinstance(value, dict):
            return _error("no_json", components)
        for part in self.spec.field_path:
            if isinstance(value, dict) and part in value:
                value = value[part]
            elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
                value = value[int(part)]
            else:
                return _error("missing_field", components)
        if isinstance(value, dict | list) or value is None:
            return _error("missing_field", components)
        return self._score(value if isinstance(value, str) else json.dumps(value), components)

    def _regex(self, text: str) -> ParseResult:
        components: dict[str, Any] = {"label": None}
        if not text.strip():
            return _error("empty_output", components)
        assert self._pattern is not None
        match = self._pattern.search(text)
        if match is None or match.group(self.spec.group) is None:
            return _error("no_match", components)
        return self._score(match.group(self.spec.group), components)

    def _logits(self, text: str) -> ParseResult:
        """Text alone: a leading label word."""
        match = self._leading.match(text)
        components = {"answer": match.group(1) if match else None}
        if match is None:
            labels = "_".join(k.lower() for k in self.spec.label_map)
            return _error(f"missing_{labels}", components)
        return ParseResult("ok", self.spec.label_map[match.group(1)], None, components)

    def score_logits(self, score_logits: Sequence[float] | None) -> ParseResult:
        labels = list(self.spec.label_map)
        unsafe = next(k for k, v in self.spec.label_map.items() if v == 1.0)
        components: dict[str, Any] = {f"p_{unsafe.lower()}": None}
        components.update({f"logit_{k.lower()}": None for k in labels})
        components["threshold"] = self.spec.threshold
        if score_logits is None or len(score_logits) != len(labels) or not all(
                math.isfinite(float(v)) for v in score_logits):
            return _error("missing_score_logits", components)
        values = [float(v) for v in score_logits]
        top = max(values)
        exps = [math.exp(v - top) for v in values]
        p_unsafe = exps[labels.index(unsafe)] / sum(exps)
        components[f"p_{unsafe.lower()}"] = p_unsafe
        components.update({f"logit_{k.lower()}": v for k, v in zip(labels, values, strict=True)})
        return ParseResult("ok", 1.0 if p_unsafe >= self.spec.threshold else 0.0, None,
                           components)

    def decision_char_offset(self, text: str) -> int | None:
        """Where the verdict starts: the rating value (tagged), the label group
        (regex), else the first non-whitespace character."""
        if self.kind == "tagged":
            offset: int | None = _load(f"{_TAGGED}:decision_char_offset")(text)
            return offset
        if self.kind == "regex" and self._pattern is not None:
            match = self._pattern.search(text)
            return match.start(self.spec.group) if match and match.group(self.spec.group) \
                is not None else None
        if self.spec.rules == "rule":
            return 0 if text else None
        return _first_non_space(text)
