"""Resolve a run profile once into the objects a run needs.

Input: a ``RunProfile`` (already parsed) and the guardrepro cache home.
Output: a frozen ``ResolvedProfile``: the guard adapter and its template, the
checkpoint directory (materialized and verified), the checkpoint's lock, the
model revision, the prompt tokenizer, the runner options and, on first use,
the artifact tree hash. ``resolve_handoff`` (or ``ResolvedProfile.handoff()``)
gives a ``Handoff`` instead (paths, hashes and options only) for worker
processes, which rebuild the objects with ``Handoff.resolve()``.

Invariants:

- Each lock file the profile names is read once and materialized (verified)
  once, even when the template and the checkpoint are pinned by the same lock;
  everything below (template load, revision, tree hash) works on those
  objects and never re-opens the lock file.
- A checkpoint pinned by a lock must declare the guard's special tokens
  (``GuardAdapter.special_tokens``); an unpinned directory that differs only
  gets a warning (see ``run.pipeline``). A checkpoint whose model revision
  has published chat-template facts (``chat_template_pins``) must match them
  (``run.chat_pins``, a ``PromptError`` otherwise).
- A logit guard (ShieldGemma) runs only on a backend whose descriptor says it
  returns score logits (``Backend.score_logits``); another backend is an
  ``InputError`` on ``backend`` instead of a run whose every row is invalid.
- A backend that needs no model (``Backend.needs_model`` false: the rule
  backend) gets no checkpoint (directory ``.``, revision ``"none"``) and a
  ``NoModelTokenizer``.
- The tree hash of a locked checkpoint is ``treehash.cached_tree_hash`` (the
  bytes ``materialize`` just verified are not read again); of an unpinned
  directory, ``treehash.tree_hash``; without a model, ``"none"``.
- ``Handoff.resolve()`` reads no lock and verifies nothing: it trusts the
  paths and hashes the resolving process verified. It loads the tokenizer
  from the verified checkpoint directory (checking the guard's special
  tokens, as ``resolve_profile`` does) and the template from the verified
  file it came from, and refuses a template whose sha256 is not the one
  resolved (``PromptError``).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from guardrepro.errors import InputError, PromptError
from guardrepro.guards.base import GuardAdapter, GuardTemplate
from guardrepro.run.profile import RunProfile
from guardrepro.run.runners.options import CheckedOptions
from guardrepro.run.runners.registry import registered
from guardrepro.schema import sha256_text

UNPINNED = "unpinned"


def _needs_model(profile: RunProfile) -> bool:
    return profile.descriptor.needs_model


class NoModelTokenizer:
    """Stands in for ``prompts.PromptTokenizer`` when no model runs (a backend
    whose descriptor has ``needs_model`` false): no chat template, no token
    ids, nothing to decode."""

    def __init__(self) -> None:
        self.chat_template_sha256: str | None = None
        self.eos_token_ids: list[int] = []
        self.pad_token_id: int | None = None

    def single_token_id(self, text: str) -> int:
        raise PromptError(f"score token {text!r}: a backend without a model has no tokenizer")

    def encode_messages(self, messages: Sequence[Mapping[str, str]]) -> tuple[int, ...]:
        return ()

    def check_length(self, n_prompt: int, max_new_tokens: int) -> None:
        return None

    def check_chars(self, messages: Sequence[Mapping[str, str]], fields: Mapping[str, str],
                    max_new_tokens: int) -> None:
        return None

    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool = True) -> str:
        return ""


@dataclass(frozen=True)
class TemplateSource:
    """Where a resolved template came from and its sha256: a pinned file read
    as bytes (``how="bytes"``), a profile's local file read as text
    (``"text"``, newlines translated as ``Path.read_text`` does), or the
    module-level variable ``extract`` of a pinned file (``"extract"``)."""

    path: Path
    how: str
    sha256: str
    extract: str | None = None

    def load(self) -> GuardTemplate:
        """The template read again from ``path``; ``PromptError`` if it changed."""
        from guardrepro.artifacts.template import check_placeholders, extract_template

        if self.how == "extract":
            assert self.extract is not None
            return extract_template(self.path, self.extract, self.sha256)
        try:
            if self.how == "text":
                text = self.path.read_text(encoding="utf-8")
            else:
                text = self.path.read_bytes().decode("utf-8")
        except UnicodeDecodeError as exc:
            raise PromptError(f"{self.path}: template is not UTF-8: {exc}") from exc
        observed = sha256_text(text)
        if observed != self.sha256:
            raise PromptError(f"{self.path}: template sha256 changed since it was resolved: "
                              f"expected {self.sha256}, observed {observed}")
        check_placeholders(text, source=str(self.path))
        return GuardTemplate(text=text, sha256=observed)


@dataclass(frozen=True)
class Handoff:
    """A resolved profile as plain paths, hashes and options (built by
    ``resolve_handoff`` or ``ResolvedProfile.handoff``), for a process that must
    not resolve again."""

    profile: RunProfile
    checkpoint_dir: Path
    model_revision: str
    template: TemplateSource | None  # None: the guard builds its own (rule guards)
    tree_sha256: str
    runner_options: Mapping[str, Any]
    home: Path | None

    def resolve(self) -> ResolvedProfile:
        """The ``ResolvedProfile`` again, without reading a lock or verifying:
        the tokenizer is loaded from the verified directory and checked for the
        guard's special tokens, the template re-read from its verified file."""
        from guardrepro.guards.registry import get_guard

        template = None if self.template is None else self.template.load()
        guard = get_guard(self.profile.guard.name, template)
        if not _needs_model(self.profile):
            tokenizer: Any = NoModelTokenizer()
        else:
            tokenizer = _tokenizer(self.checkpoint_dir, guard,
                                   pinned=self.model_revision != UNPINNED,
                                   revision=self.model_revision)
        return ResolvedProfile(self.profile, self.checkpoint_dir, self.model_revision,
                               guard.template, guard, tokenizer, None,
                               self.runner_options, self.home, self.template,
                               known_tree_sha256=self.tree_sha256)


@dataclass(frozen=True)
class ResolvedProfile:
    """What a profile points at, loaded and verified (built by ``resolve_profile``)."""

    profile: RunProfile
    checkpoint_dir: Path
    model_revision: str
    template: GuardTemplate
    guard: GuardAdapter
    tokenizer: Any  # guardrepro.run.prompts.PromptTokenizer or NoModelTokenizer
    checkpoint_lock: Any = None  # guardrepro.artifacts.locks.Lock for a pinned checkpoint
    runner_options: Mapping[str, Any] = field(default_factory=dict)
    home: Path | None = None
    template_source: TemplateSource | None = None
    known_tree_sha256: str | None = None  # set by Handoff.resolve: hashed by the resolver

    @functools.cached_property
    def tree_sha256(self) -> str:
        """The artifact tree hash recorded in the provenance (computed on first use)."""
        if self.known_tree_sha256 is not None:
            return self.known_tree_sha256
        return _tree_sha256(self.profile, self.checkpoint_dir,
                            pinned=self.checkpoint_lock is not None, home=self.home)

    def handoff(self) -> Handoff:
        """This resolution as paths, hashes and options (the tree hash computed
        now), for ``Handoff.resolve`` in another process."""
        return Handoff(self.profile, self.checkpoint_dir, self.model_revision,
                       self.template_source, self.tree_sha256, self.runner_options,
                       self.home)


class _Locks:
    """Each lock file read once and materialized once (keyed by resolved path)."""

    def __init__(self, home: str | Path | None) -> None:
        self.home = home
        self._locks: dict[Path, Any] = {}
        self._dirs: dict[Path, Path] = {}

    def load(self, path: Path) -> Any:
        from guardrepro.artifacts.locks import load_lock

        key = Path(path).resolve()
        if key not in self._locks:
            self._locks[key] = load_lock(key)
        return self._locks[key]

    def materialized(self, lock: Any) -> Path:
        from guardrepro.artifacts.fetch import materialize_lock

        key = Path(lock.path)
        if key not in self._dirs:
            self._dirs[key] = Path(materialize_lock(lock, self.home))
        return self._dirs[key]


def _model_revision(lock: Any) -> str:
    from guardrepro.artifacts.locks import GithubSource, HfSource

    source = lock.source
    if isinstance(source, HfSource):
        return f"{source.repo}@{source.revision}"
    if isinstance(source, GithubSource):
        return f"{source.repo}@{source.commit}"
    return f"{source.type}:{lock.name}"


def _template(spec: Any, locks: _Locks) -> tuple[GuardTemplate, TemplateSource] | None:
    """The profile's template and where it came from (None: the guard builds its own)."""
    from guardrepro.artifacts.template import check_placeholders
    from guardrepro.run.prompts import template_from_lock

    if spec.template_path is not None:
        text = spec.template_path.read_text(encoding="utf-8")
        check_placeholders(text, source=str(spec.template_path))
        template = GuardTemplate(text=text, sha256=sha256_text(text))
        return template, TemplateSource(Path(spec.template_path).resolve(), "text",
                                        template.sha256)
    if spec.template_lock is not None and spec.template_file is not None:
        lock = locks.load(spec.template_lock)
        template = template_from_lock(lock, spec.template_file, locks.materialized)
        extract = lock.file(spec.template_file).extract
        source = TemplateSource(locks.materialized(lock) / spec.template_file,
                                "bytes" if extract is None else "extract", template.sha256,
                                extract)
        return template, source
    return None


def _guard(profile: RunProfile,
           locks: _Locks) -> tuple[GuardAdapter, GuardTemplate, TemplateSource | None]:
    from guardrepro.guards.registry import adapter_info, get_guard

    spec = profile.guard
    descriptor = profile.descriptor
    try:
        info = adapter_info(spec.name)
        loaded = _template(spec, locks)
        template, source = (None, None) if loaded is None else loaded
        if template is not None and not info.needs_template:
            raise InputError(f"guard {spec.name!r} builds its own prompt; remove the template "
                             "keys from [guard]", field="guard")
        if info.needs_model != descriptor.needs_model:
            what = "needs a model" if info.needs_model else "runs no model"
            raise InputError(f"guard {spec.name!r} {what}: backend {profile.backend!r} does "
                             "not fit", field="backend")
        if info.scoring == "logit" and not descriptor.score_logits:
            logit_backends = [b.name for b in registered() if b.score_logits]
            raise InputError(f"guard {spec.name!r} is scored from the logits of its score "
                             f"tokens, which only backend {' or '.join(logit_backends)} returns; "
                             f"backend {profile.backend!r} would make every row invalid",
                             field="backend")
        guard = get_guard(spec.name, template)
    except InputError as exc:
        if exc.file is not None:  # a problem of the guard spec file itself
            raise
        message = str(exc)
        if exc.field is not None:
            message = message.removeprefix(f"field {exc.field!r}: ")
        field_name = "guard.name" if exc.field == "guard" else exc.field
        raise InputError(message, file=str(profile.path), field=field_name) from exc
    return guard, guard.template, source


def runner_options(profile: RunProfile) -> CheckedOptions:
    """The profile's ``[backend_options]``, as checked when it was read, with
    file paths (the descriptor's ``path_options``) resolved against the
    profile: a path stays a string, so the options stay checked."""
    checked = profile.checked_options
    options = dict(checked)
    for name in profile.descriptor.path_options:
        if isinstance(options.get(name), str):
            options[name] = str(profile.path.parent / options[name])
    return CheckedOptions(checked.backend, options)


def _tree_sha256(profile: RunProfile, checkpoint_dir: Path, *, pinned: bool,
                 home: Path | None) -> str:
    from guardrepro.artifacts.treehash import cached_tree_hash, tree_hash

    if not _needs_model(profile):  # no model, no checkpoint
        return "none"
    if pinned:  # just verified by materialize: no re-read
        return cached_tree_hash(checkpoint_dir, home).sha256
    return tree_hash(checkpoint_dir).sha256


def _tokenizer(checkpoint_dir: Path, guard: GuardAdapter, *, pinned: bool,
               revision: str = UNPINNED) -> Any:
    """The checkpoint's prompt tokenizer, which must declare the guard's special
    tokens (a pinned checkpoint: ``PromptError``; an unpinned one: a warning)
    and match what is published about its chat template (``run.chat_pins``)."""
    from guardrepro.run.chat_pins import check_chat_template
    from guardrepro.run.prompts import PromptTokenizer

    tokenizer = PromptTokenizer(checkpoint_dir, pinned=pinned)
    check_chat_template(guard, checkpoint_dir, revision, tokenizer)
    spec = getattr(getattr(guard, "spec", None), "path", None)
    mismatch = tokenizer.special_token_mismatch(guard.special_tokens, guard=guard.name,
                                                spec=None if spec is None else str(spec))
    if mismatch is not None:
        if pinned:
            raise PromptError(mismatch)
        warnings.warn(f"{mismatch} (unpinned checkpoint directory: not enforced)", stacklevel=3)
    return tokenizer


@dataclass(frozen=True)
class _Files:
    """What resolving reads and verifies: everything but the tokenizer."""

    guard: GuardAdapter
    template: GuardTemplate
    source: TemplateSource | None
    checkpoint_dir: Path
    revision: str
    lock: Any
    options: dict[str, Any]
    home: Path | None


def _resolve_files(profile: RunProfile, home: str | Path | None) -> _Files:
    profile.check_paths()
    locks = _Locks(home)
    guard, template, source = _guard(profile, locks)
    home_path = None if home is None else Path(home)
    options = runner_options(profile)
    if not _needs_model(profile):
        return _Files(guard, template, source, Path("."), "none", None, options, home_path)
    lock = None
    if profile.checkpoint.lock is not None:
        lock = locks.load(profile.checkpoint.lock)
        checkpoint_dir = locks.materialized(lock)
        revision = _model_revision(lock)
    else:
        assert profile.checkpoint.dir is not None
        checkpoint_dir, revision = profile.checkpoint.dir, UNPINNED
    return _Files(guard, template, source, checkpoint_dir, revision, lock, options, home_path)


def resolve_profile(profile: RunProfile, *, home: str | Path | None = None) -> ResolvedProfile:
    """Materialize the checkpoint, load the template, guard adapter and tokenizer."""
    f = _resolve_files(profile, home)
    if not _needs_model(profile):
        tokenizer: Any = NoModelTokenizer()
    else:
        tokenizer = _tokenizer(f.checkpoint_dir, f.guard, pinned=f.lock is not None,
                               revision=f.revision)
    return ResolvedProfile(profile, f.checkpoint_dir, f.revision, f.template, f.guard,
                           tokenizer, f.lock, f.options, f.home, f.source)


def resolve_handoff(profile: RunProfile, *, home: str | Path | None = None) -> Handoff:
    """``resolve_profile`` for a process that hands the result to workers: each
    lock read and verified once and the tree hash taken here; the tokenizer is
    not loaded here (each worker loads it, and checks the guard's special
    tokens, in ``Handoff.resolve``)."""
    f = _resolve_files(profile, home)
    tree = _tree_sha256(profile, f.checkpoint_dir, pinned=f.lock is not None, home=f.home)
    return Handoff(profile, f.checkpoint_dir, f.revision, f.source, tree, f.options, f.home)
