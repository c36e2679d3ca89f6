"""The guard prompt: template extraction, rendering, chat template, token ids.

Input: the pinned upstream prompt module (a Python file, never imported or
executed: the template is read with ``ast``), a TS-Bench row, and a
checkpoint directory holding the tokenizer. Output: a verified
``GuardTemplate``, the rendered prompt text and its ``input_sha256``, and the
prompt token ids every backend feeds to the model (so no backend can render
different prompt bytes).

Invariants:

- A template is used only after its sha256 (of the UTF-8 text) matched its
  pin; a mismatch is a ``PromptError`` naming file, expected and observed.
- The template's placeholders are exactly ``{user_request}``,
  ``{agent_action}`` and ``{env_info}``.
- The rendered text is the only message (role user, no system message); the
  checkpoint's chat template is applied with the generation prompt and
  without truncation. A prompt whose token count plus ``max_new_tokens``
  exceeds the context is refused.
- The tokenizer is loaded from local files only, without remote code.
- The EOS ids come from ``generation_config.json`` (else ``config.json``),
  the pad id from the same files (else the tokenizer's pad token);
  ``special_token_mismatch`` compares the token strings those ids name with
  the guard's ``ExpectedTokens`` (and any upstream id pin).
- A conversation guard's messages go to the chat template as they are
  (``encode_messages``); a one-message guard's rendered text is the only
  message.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from guardrepro.artifacts.fetch import materialize_lock
from guardrepro.artifacts.locks import Lock, load_lock
from guardrepro.artifacts.store import read_hashed
from guardrepro.artifacts.template import check_placeholders, extract_template
from guardrepro.errors import InputError, PromptError
from guardrepro.guards.base import (
    ExpectedTokens,
    GuardTemplate,
)
from guardrepro.run.render_budget import render_budget
from guardrepro.schema import sha256_text


def load_template(
    lock_path: str | Path, file_path: str, home: str | Path | None = None
) -> GuardTemplate:
    """The verified template pinned as ``file_path`` in the lock at ``lock_path``.

    The file comes from ``guardrepro.artifacts.fetch.materialize`` (the verified cache;
    run ``guardrepro fetch`` first). A lock entry with ``extract`` and
    ``extract_sha256`` names a string variable inside a Python module
    (``extract_template``); otherwise the whole file is the template and its
    pinned file sha256 is the template hash.
    """
    lock = load_lock(Path(lock_path))
    return template_from_lock(lock, file_path, lambda pinned: materialize_lock(pinned, home))


def template_from_lock(
    lock: Lock, file_path: str, materialized: Callable[[Lock], Path]
) -> GuardTemplate:
    """``load_template`` for a lock already read; ``materialized(lock)`` gives its
    verified directory (called once the entry is known to be pinned)."""
    lock_path = lock.path
    try:
        entry = lock.file(file_path)
    except KeyError:
        known = sorted(e.path for e in lock.files)
        raise InputError(
            f"{file_path!r} is not pinned in this lock (files: {known})",
            file=str(lock_path),
            field=file_path,
        ) from None
    target = materialized(lock) / file_path
    if entry.extract:
        if not entry.extract_sha256:
            raise InputError(
                "entry has 'extract' but no 'extract_sha256'", file=str(lock_path), field=file_path
            )
        return extract_template(target, entry.extract, entry.extract_sha256)
    if entry.sha256 is None:
        raise PromptError(
            f"{lock_path}: {file_path} has no recorded sha256 yet (pending first download); "
            "run guardrepro fetch"
        )
    data, observed = read_hashed(target)
    if observed != entry.sha256:
        raise PromptError(
            f"{target}: template file sha256 mismatch: expected {entry.sha256}, observed {observed}"
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PromptError(f"{target}: template is not UTF-8: {exc}") from exc
    check_placeholders(text, source=str(target))
    return GuardTemplate(text=text, sha256=observed)


def _read_json(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise PromptError(f"{path}: invalid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise PromptError(f"{path}: expected a JSON object")
    return data


def _id_list(value: Any, *, file: Path) -> list[int] | None:
    """An ``eos_token_id`` value (an id or a list of ids) as a list; None when
    absent; a ``PromptError`` naming the file when present but malformed."""
    if value is None:
        return None
    values = value if isinstance(value, list) else [value]
    if not values or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise PromptError(f"{file}: eos_token_id must be an id or a non-empty list of ids, "
                          f"got {value!r}")
    return list(values)


# How many characters of the input one character after each normalizer may
# stand for. NFC and NFKC compose a character from at most 4 code points
# (the longest canonical decomposition, e.g. U+1F85); decompositions,
# lowercasing and prepending only lengthen the text. A normalizer missing here
# (StripAccents, a SentencePiece charsmap, ...) can shrink it without bound:
# no check by length, the prompt is tokenized and measured as before.
_SHRINK = {"NFC": 4, "NFKC": 4, "NFD": 1, "NFKD": 1, "Lowercase": 1, "Prepend": 1}


def normalizer_shrink(normalizer: Any) -> int | None:
    """The most input characters one normalized character can come from, for a
    ``tokenizer.json`` ``normalizer`` (None: no normalizer); None when unknown."""
    if normalizer is None:
        return 1
    if not isinstance(normalizer, Mapping):
        return None
    kind = normalizer.get("type")
    if kind == "Sequence":
        factor = 1
        for part in normalizer.get("normalizers") or []:
            shrink = normalizer_shrink(part)
            if shrink is None:
                return None
            factor *= shrink
        return factor
    if kind == "Replace":
        pattern, content = normalizer.get("pattern"), normalizer.get("content")
        literal = pattern.get("String") if isinstance(pattern, Mapping) else None
        if not isinstance(literal, str) or not isinstance(content, str) or not content:
            return None
        return max(1, -(-len(literal) // len(content)))
    return _SHRINK.get(str(kind))


class PromptTokenizer:
    """The checkpoint's tokenizer and chat template, loaded from local files."""

    def __init__(self, checkpoint_dir: str | Path, *, pinned: bool = False) -> None:
        """``pinned``: the directory is a lock's verified checkpoint, so its chat
        template is trusted by hash; otherwise rendering runs under a time budget
        (``guardrepro.run.render_budget``)."""
        from transformers import AutoTokenizer

        self.checkpoint_dir = Path(checkpoint_dir)
        self.pinned = pinned
        if not self.checkpoint_dir.is_dir():
            raise PromptError(f"{self.checkpoint_dir}: checkpoint directory not found")
        try:
            self._tok = AutoTokenizer.from_pretrained(
                str(self.checkpoint_dir), local_files_only=True, trust_remote_code=False
            )
        except (OSError, ValueError) as exc:
            raise PromptError(f"{self.checkpoint_dir}: cannot load the tokenizer: {exc}") from exc
        template = getattr(self._tok, "chat_template", None)
        if not isinstance(template, str) or not template:
            raise PromptError(f"{self.checkpoint_dir}: the tokenizer has no chat template")
        self.chat_template = template
        self.chat_template_sha256 = sha256_text(template)

        config_path = self.checkpoint_dir / "config.json"
        generation_path = self.checkpoint_dir / "generation_config.json"
        config = _read_json(config_path) or {}
        generation = _read_json(generation_path) or {}
        eos = _id_list(generation.get("eos_token_id"), file=generation_path)
        self.eos_source = str(generation_path)
        if eos is None:
            eos = _id_list(config.get("eos_token_id"), file=config_path)
            self.eos_source = str(config_path)
        if eos is None:
            raise PromptError(
                f"{self.checkpoint_dir}: no eos_token_id in generation_config.json or config.json"
            )
        self.eos_token_ids: list[int] = eos
        pad = generation.get("pad_token_id")
        self.pad_source = str(generation_path)
        if pad is None:
            pad = config.get("pad_token_id")
            self.pad_source = str(config_path)
        if pad is None:
            pad = self._tok.pad_token_id
            self.pad_source = f"{self.checkpoint_dir} (tokenizer pad token)"
        self.pad_token_id: int | None = pad if isinstance(pad, int) else None
        max_context = config.get("max_position_embeddings")
        if not isinstance(max_context, int) or isinstance(max_context, bool) or max_context < 1:
            raise PromptError(f"{self.checkpoint_dir}: config.json lacks max_position_embeddings")
        self.max_context: int = max_context
        self._max_token_chars: int | None = None
        raw = _read_json(self.checkpoint_dir / "tokenizer.json") or {}
        self._normalizer: Any = raw.get("normalizer")

    def token_name(self, token_id: int | None) -> str | None:
        """The token string of ``token_id`` (None for None or an unknown id)."""
        if token_id is None:
            return None
        name = self._tok.convert_ids_to_tokens(int(token_id))
        return name if isinstance(name, str) else None

    def single_token_id(self, text: str) -> int:
        """The id of ``text`` when it is exactly one token (no special tokens added)."""
        ids = self._tok.encode(text, add_special_tokens=False)
        if len(ids) != 1:
            raise PromptError(f"{self.checkpoint_dir}: {text!r} is {len(ids)} tokens, "
                              "expected exactly one")
        return int(ids[0])

    def plain_ids(self, text: str) -> tuple[int, ...]:
        """``text`` encoded without special tokens (a decision label's ids)."""
        return tuple(int(i) for i in self._tok.encode(text, add_special_tokens=False))

    def special_token_mismatch(self, expected: ExpectedTokens, *, guard: str,
                               spec: str | None = None) -> str | None:
        """None when the checkpoint's EOS ids and pad id name the guard's
        expected tokens (and match any upstream id pin), else a message naming
        the checkpoint file(s), the guard spec's field (``spec``: its path),
        expected and observed, and how to use the checkpoint's own instead."""
        problems: list[str] = []

        def field(key: str) -> str:
            return "" if spec is None else f" ({spec}, field 'special_tokens.{key}')"

        eos_ids = sorted(set(self.eos_token_ids))
        names = {self.token_name(i) for i in eos_ids}
        missing = [t for t in expected.eos if t not in names]
        extra = sorted(str(n) for n in names - set(expected.eos)) if expected.exact_eos else []
        if missing or extra:
            problems.append(f"{self.eos_source}: eos_token_id {eos_ids} names "
                            f"{sorted(str(n) for n in names)}, expected "
                            f"{'exactly ' if expected.exact_eos else 'to include '}"
                            f"{list(expected.eos)}{field('eos')}")
        if expected.pad is not None and self.token_name(self.pad_token_id) != expected.pad:
            problems.append(f"{self.pad_source}: pad_token_id {self.pad_token_id} names "
                            f"{self.token_name(self.pad_token_id)}, expected {expected.pad}"
                            f"{field('pad')}")
        if expected.upstream_eos_ids is not None and set(eos_ids) != expected.upstream_eos_ids:
            problems.append(f"{self.eos_source}: eos_token_id {eos_ids}, expected "
                            f"{sorted(expected.upstream_eos_ids)}{field('eos_ids')}")
        if expected.upstream_pad_id is not None and self.pad_token_id != expected.upstream_pad_id:
            problems.append(f"{self.pad_source}: pad_token_id {self.pad_token_id}, expected "
                            f"{expected.upstream_pad_id}{field('pad_id')}")
        if not problems:
            return None
        message = (f"checkpoint {self.checkpoint_dir} does not declare guard {guard!r}'s "
                   f"special tokens ({expected.describe()}): " + "; ".join(problems))
        if spec is None:
            return message
        return (f"{message}; to use the checkpoint's own eos and pad, run it with a copy of "
                "the spec without [special_tokens] "
                f"(`guardrepro guards new NAME --from {self.checkpoint_dir}` writes one)")

    def check_special_tokens(self, expected: ExpectedTokens, *, guard: str,
                             spec: str | None = None) -> None:
        """``PromptError`` unless the EOS ids and pad id are what the guard expects."""
        message = self.special_token_mismatch(expected, guard=guard, spec=spec)
        if message is not None:
            raise PromptError(message)

    def _apply(self, messages: Sequence[Mapping[str, str]], **options: Any) -> Any:
        """``apply_chat_template`` (+ generation prompt), under the render budget
        unless the checkpoint is pinned."""
        conversation = [dict(m) for m in messages]
        if self.pinned:
            return self._tok.apply_chat_template(conversation, add_generation_prompt=True,
                                                 **options)
        what = (f"{self.checkpoint_dir}: chat template (sha256"
                f" {self.chat_template_sha256[:12]}...)")
        with render_budget(what):
            return self._tok.apply_chat_template(conversation, add_generation_prompt=True,
                                                 **options)

    @staticmethod
    def _messages(text: str) -> list[dict[str, str]]:
        return [{"role": "user", "content": text}]

    def render_messages(self, messages: Sequence[Mapping[str, str]]) -> str:
        """The chat-templated prompt string of a conversation + generation prompt."""
        rendered = self._apply(messages, tokenize=False)
        if not isinstance(rendered, str):
            raise PromptError(f"chat template rendered {type(rendered).__name__}, not a string")
        return rendered

    def injected_system_prompt(self, messages: Sequence[Mapping[str, str]]) -> str | None:
        """The system text the chat template adds on its own when ``messages``
        has no system turn (e.g. a default system prompt), else None.

        Found by rendering once with a sentinel system turn and once without:
        when the second rendering is the first with the sentinel replaced by
        some text, that text was injected. None as well when the template
        refuses a system turn or the conversation already has one.
        """
        if any(m.get("role") == "system" for m in messages):
            return None
        sentinel = "\x00guardrepro-system-sentinel\x00"
        try:
            with_system = self.render_messages([{"role": "system", "content": sentinel},
                                                *messages])
            without = self.render_messages(messages)
        except Exception:  # a template that refuses system turns injects none
            return None
        if with_system.count(sentinel) != 1:
            return None
        prefix, suffix = with_system.split(sentinel)
        if (without.startswith(prefix) and without.endswith(suffix)
                and len(without) > len(prefix) + len(suffix)):
            return without[len(prefix): len(without) - len(suffix)]
        return None

    def encode_chat(self, text: str) -> tuple[int, ...]:
        """Token ids of the chat-templated prompt (no truncation)."""
        return self.encode_messages(self._messages(text))

    def encode_messages(self, messages: Sequence[Mapping[str, str]]) -> tuple[int, ...]:
        """Token ids of a chat-templated conversation + generation prompt (no truncation)."""
        try:
            out = self._apply(messages, tokenize=True, truncation=False)
        except Exception as exc:  # jinja's TemplateError (raise_exception) and friends
            if isinstance(exc, PromptError):
                raise
            raise PromptError(f"{self.checkpoint_dir}: the chat template refused the "
                              f"conversation: {exc}") from exc
        ids: Any = out
        if not isinstance(ids, list):  # transformers 5: a BatchEncoding
            try:
                ids = ids["input_ids"]
            except (KeyError, TypeError) as exc:
                raise PromptError(
                    f"apply_chat_template returned {type(out).__name__} without input_ids"
                ) from exc
        if hasattr(ids, "tolist"):
            ids = ids.tolist()
        if ids and isinstance(ids[0], list):
            if len(ids) != 1:
                raise PromptError(f"expected one tokenized conversation, got {len(ids)}")
            ids = ids[0]
        return tuple(int(i) for i in ids)

    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool = True) -> str:
        """Text of generated ids; special tokens dropped by default (as vLLM
        does for the released outputs), no clean-up of spaces."""
        text = self._tok.decode(
            list(ids),
            skip_special_tokens=skip_special_tokens,
            clean_up_tokenization_spaces=False,
        )
        return str(text)

    def max_token_chars(self) -> int:
        """The most characters one token can stand for: the longest entry of the
        vocabulary, added tokens included (byte-level BPE spells each byte as one
        character, so this is also the most bytes a token covers)."""
        if self._max_token_chars is None:
            self._max_token_chars = max(len(token) for token in self._tok.get_vocab())
        return self._max_token_chars

    def check_chars(self, messages: Sequence[Mapping[str, str]], fields: Mapping[str, str],
                    max_new_tokens: int) -> None:
        """Refuse, before tokenizing, ``messages`` too long for the context by their
        length alone: C characters need at least C / (L x S) tokens, L =
        ``max_token_chars`` and S = ``normalizer_shrink`` (docs/FAULTS.md,
        "Over-long rows"). ``fields``: the row's text fields, the longest named."""
        shrink = normalizer_shrink(self._normalizer)
        if shrink is None:
            return
        budget = max(self.max_context - max_new_tokens, 0)
        per_token = self.max_token_chars() * shrink
        chars = sum(len(m["content"]) for m in messages)
        if chars <= budget * per_token:
            return
        name = max(fields, key=lambda key: len(fields[key]), default="the prompt")
        size = len(fields[name]) if name in fields else chars
        raise PromptError(
            f"field {name!r} holds {size:,} characters (the prompt {chars:,}): at least"
            f" {-(-chars // per_token):,} tokens, over the {budget:,} that the context of"
            f" {self.max_context:,} leaves beside {max_new_tokens} new tokens (one token of"
            f" this tokenizer stands for at most {per_token} characters); refused before"
            " tokenizing")

    def check_length(self, n_prompt: int, max_new_tokens: int) -> None:
        """Refuse a prompt that cannot fit its full generation budget."""
        if n_prompt + max_new_tokens > self.max_context:
            raise PromptError(
                f"prompt of {n_prompt} tokens + {max_new_tokens} new tokens exceeds the "
                f"context of {self.max_context}"
            )
