"""Guard specs: a guard declared in a TOML file (``kind = "guard"``).

Input: a guard name (a shipped spec ``guards/<name>.toml``, or a local one in
``./guards/<name>.toml``) or the path of a spec file. Output: a frozen
``GuardSpec``. The guard's name is the file's stem, written nowhere else.

Format (docs/GUARDS.md, "Guard specs")::

    kind = "guard"
    description = "..."                  # one line, shown by `guardrepro guards`
    source = "..."                       # where the behaviour comes from
    scores = "..."                       # optional one-line score mapping

    [prompt]                             # exactly one of template / conversation /
    template = "profile"                 #   messages / rule
    # conversation = "agent-step"        # the built-in two-turn agent step
    # rule = "nuisance"                  # model-free rule inputs (rule backend)
    # [[prompt.messages]]                # chat messages from named row fields,
    # role = "user"                      # rendered by the checkpoint's chat template
    # content = "{instruction}"
    default_system_prompt = "forbid"     # "forbid" | "allow" | "expected"

    [parser]
    kind = "first_line"                  # first_line | json_field | tagged | regex | logits
    label_map = { safe = 0.0, unsafe = 1.0 }
    # field = "verdict.label"            # json_field
    # pattern = '...(?P<label>...)...'   # regex (group "label" unless `group` says)
    # threshold = 0.5                    # logits
    # ignore_case = false                # first_line, json_field, regex
    # rules = "llama-guard-3"            # upstream evaluator rules, reached by name
    # version = "..."                    # default: the kind + the parser table's hash

    [decision]                           # optional
    labels = { safe = 0.0, unsafe = 1.0 }   # label -> score (default: label_map)

    [special_tokens]                     # optional: default, the checkpoint's own
    eos = ["<|im_end|>"]                 # token strings among the EOS ids
    exact_eos = false
    pad = "<|endoftext|>"
    eos_ids = [151645, 151643]           # upstream id pins
    pad_id = 151643

    [decoding]
    max_new_tokens = 64
    # [decoding.sampled]                 # the guard's published sampled mode
    # temperature = 0.1; top_p = 0.9; max_attempts = 3

    [[chat_template_pins]]               # what is published about a checkpoint's template
    repo = "Qwen/Qwen3Guard-Gen-0.6B"; revision = "<40 hex>"
    # tokenizer_config_sha256, template_sha256, generation_suffix, score_token_ids

Invariants: every key is checked strictly (``spec.Table``); a problem is an
``InputError`` naming the spec file and the dotted field. Scores in
``label_map`` and ``decision.labels`` are 0, 0.5 or 1. A ``messages``
placeholder must be a TS-Bench row field. ``sha256`` is the hash of the file's
bytes, recorded in each run's manifest.
"""

from __future__ import annotations

import hashlib
import re
import string
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from guardrepro.errors import InputError
from guardrepro.spec import HEX40, HEX64, REQUIRED, Table, expect_kind, parse_toml
from guardrepro.spec_dirs import spec_root

PARSER_KINDS = ("first_line", "json_field", "tagged", "regex", "logits")
PROMPT_KINDS = ("template", "conversation", "messages", "rule")
SYSTEM_POLICIES = ("forbid", "allow", "expected")
ROW_FIELDS = ("instruction", "history", "current_action", "env_info")
CONVERSATIONS = ("agent-step",)
RULES = ("nuisance", "tool-lookup")
SCORES = (0.0, 0.5, 1.0)
FOLDER = "guards"


@dataclass(frozen=True)
class Message:
    role: str
    content: str


@dataclass(frozen=True)
class PromptSpec:
    kind: str  # PROMPT_KINDS
    value: str = ""  # "profile", the conversation or rule name
    messages: tuple[Message, ...] = ()
    default_system_prompt: str = "forbid"


@dataclass(frozen=True)
class ParserSpec:
    kind: str
    label_map: Mapping[str, float] = field(default_factory=dict)
    field_path: tuple[str, ...] = ()
    pattern: str | None = None
    group: str = "label"
    threshold: float = 0.5
    ignore_case: bool = False
    rules: str | None = None
    version: str | None = None


@dataclass(frozen=True)
class TokenSpec:
    eos: tuple[str, ...] = ()
    exact_eos: bool = False
    pad: str | None = None
    eos_ids: frozenset[int] | None = None
    pad_id: int | None = None


@dataclass(frozen=True)
class PinSpec:
    repo: str
    revision: str
    tokenizer_config_sha256: str | None = None
    template_sha256: str | None = None
    generation_suffix: str | None = None
    score_token_ids: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class GuardSpec:
    name: str
    path: Path
    sha256: str
    origin: str  # "shipped" | "local" | "path"
    description: str
    source: str
    scores: str
    prompt: PromptSpec
    parser: ParserSpec
    decision_labels: Mapping[str, float]
    tokens: TokenSpec
    max_new_tokens: int
    sampled: Mapping[str, Any] | None
    pins: tuple[PinSpec, ...] = ()

    @property
    def needs_template(self) -> bool:
        return self.prompt.kind == "template"

    @property
    def needs_model(self) -> bool:
        return self.prompt.kind != "rule"

    @property
    def scoring(self) -> str:
        if self.prompt.kind == "rule":
            return "rule"
        return "logit" if self.parser.kind == "logits" else "parse"


def _score(table: Table, key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value not in SCORES:
        raise table.fail(key, f"expected a score 0, 0.5 or 1, got {value!r}")
    return float(value)


def _label_map(table: Table, key: str, default: Any = None) -> dict[str, float]:
    sub = table.take(key, dict, default)
    if sub is None:
        return {}
    inner = Table(sub, table.file, table.path(key))
    out = {label: _score(inner, label, value) for label, value in sub.items()}
    if not out:
        raise table.fail(key, "expected at least one label")
    return out


def _messages(table: Table) -> tuple[Message, ...]:
    items = table.take("messages", list)
    if not items:
        raise table.fail("messages", "expected at least one message")
    out = []
    for index, item in enumerate(items):
        row = Table(item, table.file, f"{table.path('messages')}[{index}]")
        role = row.take("role", str)
        if role not in ("system", "user", "assistant"):
            raise row.fail("role", f"expected system, user or assistant, got {role!r}")
        content = row.take("content", str)
        row.done()
        try:
            names = {n for _t, n, _f, _c in string.Formatter().parse(content) if n is not None}
        except ValueError as exc:
            raise row.fail("content", f"invalid placeholder: {exc}") from None
        unknown = sorted(names - set(ROW_FIELDS))
        if unknown:
            raise row.fail("content", f"unknown row field {{{unknown[0]}}} (row fields: "
                           f"{', '.join(ROW_FIELDS)})")
        out.append(Message(role, content))
    return tuple(out)


def _prompt(top: Table) -> PromptSpec:
    table = top.sub("prompt")
    table.only(*PROMPT_KINDS, "default_system_prompt")
    given = [k for k in PROMPT_KINDS if k in table.data]
    if len(given) != 1:
        raise table.fail(None, f"give exactly one of {', '.join(PROMPT_KINDS)} "
                         f"(found: {', '.join(given) or 'none'})")
    policy = table.take("default_system_prompt", str, "forbid")
    if policy not in SYSTEM_POLICIES:
        raise table.fail("default_system_prompt",
                         f"expected one of {', '.join(SYSTEM_POLICIES)}, got {policy!r}")
    kind = given[0]
    if kind == "messages":
        return PromptSpec(kind, "", _messages(table), policy)
    value = table.take(kind, str)
    allowed = {"template": ("profile",), "conversation": CONVERSATIONS, "rule": RULES}[kind]
    if value not in allowed:
        raise table.fail(kind, f"expected one of {', '.join(allowed)}, got {value!r}")
    table.done()
    return PromptSpec(kind, value, (), policy)


def _parser_options(table: Table, kind: str) -> dict[str, Any]:
    """The kind's own keys, checked."""
    out: dict[str, Any] = {}
    if kind == "json_field":
        path = table.take("field", str)
        if not path or any(not part for part in path.split(".")):
            raise table.fail("field", f"expected a dotted field path, got {path!r}")
        out["field_path"] = tuple(path.split("."))
    if kind == "regex":
        pattern = table.take("pattern", str)
        group = table.take("group", str, "label")
        try:
            compiled = re.compile(pattern)
        except re.error as exc:
            raise table.fail("pattern", f"invalid regular expression: {exc}") from None
        if group not in compiled.groupindex:
            raise table.fail("pattern", f"has no named group {group!r} (write (?P<{group}>...))")
        out.update(pattern=pattern, group=group)
    if kind == "logits":
        threshold = table.take("threshold", (int, float), 0.5)
        if not 0.0 < float(threshold) <= 1.0:
            raise table.fail("threshold", f"expected a number in (0, 1], got {threshold!r}")
        out["threshold"] = float(threshold)
    if kind in ("first_line", "json_field", "regex"):
        out["ignore_case"] = table.take("ignore_case", bool, False)
    return out


def _parser(top: Table) -> ParserSpec:
    table = top.sub("parser")
    kind = table.take("kind", str)
    if kind not in PARSER_KINDS:
        raise table.fail("kind", f"expected one of {', '.join(PARSER_KINDS)}, got {kind!r}")
    label_map = _label_map(table, "label_map", None if kind == "tagged" else REQUIRED)
    if kind == "tagged" and label_map:
        raise table.fail("label_map", "the tagged parser scores TS-Guard's tag triple itself")
    if kind == "logits":
        unsafe = [label for label, score in label_map.items() if score == 1.0]
        if len(label_map) < 2 or len(unsafe) != 1 or any(
                s not in (0.0, 1.0) for s in label_map.values()):
            raise table.fail("label_map", "a logits parser needs two or more labels, exactly "
                             "one of them unsafe (1) and the others safe (0)")
    options = _parser_options(table, kind)
    rules = table.take("rules", str, None)
    version = table.take("version", str, None)
    table.done()
    return ParserSpec(kind, label_map, rules=rules, version=version, **options)



def _tokens(top: Table) -> TokenSpec:
    table = top.sub("special_tokens", None)
    eos = table.take("eos", list, [])
    if not all(isinstance(t, str) and t for t in eos):
        raise table.fail("eos", "expected a list of token strings")
    exact = table.take("exact_eos", bool, False)
    pad = table.take("pad", str, None)
    ids = table.take("eos_ids", list, None)
    if ids is not None and (not ids or not all(
            isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids)):
        raise table.fail("eos_ids", "expected a non-empty list of token ids")
    pad_id = table.take("pad_id", int, None)
    table.done()
    if exact and not eos:
        raise table.fail("exact_eos", "needs eos")
    return TokenSpec(tuple(eos), exact, pad, None if ids is None else frozenset(ids), pad_id)


def _decoding(top: Table) -> tuple[int, dict[str, Any] | None]:
    table = top.sub("decoding")
    budget = table.take("max_new_tokens", int)
    if budget < 1:
        raise table.fail("max_new_tokens", f"expected an integer >= 1, got {budget}")
    sampled = None
    if "sampled" in table.data:
        sub = table.sub("sampled")
        sampled = {"temperature": float(sub.take("temperature", (int, float))),
                   "top_p": float(sub.take("top_p", (int, float))),
                   "max_attempts": sub.take("max_attempts", int, 1)}
        sub.done()
    table.done()
    return budget, sampled


def _pins(top: Table) -> tuple[PinSpec, ...]:
    items = top.take("chat_template_pins", list, [])
    out = []
    for index, item in enumerate(items):
        table = Table(item, top.file, f"chat_template_pins[{index}]")
        repo = table.take("repo", str)
        revision = table.pattern("revision", HEX40, "a 40-hex revision")
        config = table.pattern("tokenizer_config_sha256", HEX64, "a sha256", None)
        template = table.pattern("template_sha256", HEX64, "a sha256", None)
        suffix = table.take("generation_suffix", str, None)
        ids = table.take("score_token_ids", dict, {})
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in ids.values()):
            raise table.fail("score_token_ids", "expected token -> id")
        table.done()
        out.append(PinSpec(repo, revision, config, template, suffix, tuple(ids.items())))
    return tuple(out)


def _default_scores(parser: ParserSpec) -> str:
    if parser.kind == "tagged":
        return "tags -> composite: 0 / 0.5 / 1 (docs/PROTOCOL.md)"
    labels = " / ".join(f"{k} {v:g}" for k, v in parser.label_map.items())
    if parser.kind == "logits":
        return f"P(unsafe label) >= {parser.threshold:g} -> 1 else 0 ({labels})"
    return labels


def _given(data: Mapping[str, Any]) -> bool:
    decision = data.get("decision")
    return isinstance(decision, Mapping) and "labels" in decision


def parse_spec(raw: bytes, path: Path, origin: str) -> GuardSpec:
    """A guard spec from its file's bytes (errors name ``path`` and the field)."""
    file = str(path)
    data, _text = parse_toml(raw, file)
    expect_kind(data, "guard", file=file)
    top = Table(data, file)
    if top.take("kind", str) != "guard":
        raise top.fail("kind", 'expected "guard"')
    description = top.take("description", str)
    source = top.take("source", str)
    scores = top.take("scores", str, None)
    prompt = _prompt(top)
    parser = _parser(top)
    decision = top.sub("decision", None)
    labels = _label_map(decision, "labels", None)
    decision.done()
    if not labels and prompt.kind != "rule" and parser.kind != "tagged":
        labels = dict(parser.label_map)
    if labels:
        from guardrepro.guards.base import check_decision_labels

        try:
            labels = check_decision_labels(labels, what="labels")
        except ValueError as exc:
            where = "decision.labels" if _given(data) else "parser.label_map"
            raise InputError(str(exc).removeprefix("labels: "), file=file, field=where) from None
    tokens = _tokens(top)
    budget, sampled = _decoding(top)
    pins = _pins(top)
    top.done()
    if parser.kind == "logits" and prompt.kind == "rule":
        raise InputError("a rule guard has no logits", file=file, field="parser.kind")
    return GuardSpec(path.stem, path, hashlib.sha256(raw).hexdigest(), origin, description, source,
                     scores or _default_scores(parser), prompt, parser, labels, tokens,
                     budget, sampled, pins)


def load_spec(path: str | Path, origin: str = "path") -> GuardSpec:
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise InputError("guard spec not found", file=str(path)) from None
    except OSError as exc:
        raise InputError(f"cannot read guard spec: {exc.strerror or exc}", file=str(path)) from None
    return parse_spec(raw, path, origin)


def shipped_dir() -> Path:
    return spec_root() / FOLDER


def local_dir() -> Path:
    return Path.cwd() / FOLDER


def _names(folder: Path) -> list[str]:
    return sorted(p.stem for p in folder.glob("*.toml")) if folder.is_dir() else []


def shipped_names() -> list[str]:
    return _names(shipped_dir())


def local_names() -> list[str]:
    """Specs in ``./guards/`` (not the shipped folder itself)."""
    if local_dir().resolve() == shipped_dir().resolve():
        return []
    return _names(local_dir())


def looks_like_path(value: str) -> bool:
    return "/" in value or value.endswith(".toml")


def find_spec(value: str | Path) -> GuardSpec:
    """The spec a guard argument names: a path, a shipped name, or a local name
    (a shipped name wins; an unknown name lists the known ones)."""
    import difflib

    text = str(value)
    if looks_like_path(text):
        return _cached(str(Path(text).resolve()), "path")
    shipped = shipped_dir() / f"{text}.toml"
    if text and shipped.is_file():
        return _cached(str(shipped), "shipped")
    local = local_dir() / f"{text}.toml"
    if text and local.is_file() and text in local_names():
        return _cached(str(local), "local")
    known = shipped_names() + [n for n in local_names() if n not in shipped_names()]
    close = difflib.get_close_matches(text, known, n=1, cutoff=0.5)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise InputError(f"unknown guard {text!r} (known: {', '.join(known)}; or the path of a "
                     f"guard spec){hint}", field="guard")


_CACHE: dict[tuple[str, str], tuple[float, GuardSpec]] = {}


def _cached(path: str, origin: str) -> GuardSpec:
    """One parse per file and modification time."""
    try:
        mtime = Path(path).stat().st_mtime
    except OSError:
        return load_spec(path, origin)
    hit = _CACHE.get((path, origin))
    if hit is None or hit[0] != mtime:
        hit = (mtime, load_spec(path, origin))
        _CACHE[(path, origin)] = hit
    return hit[1]
