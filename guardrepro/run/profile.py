"""Run profiles: the declarative TOML file that says how a cohort is run.

Input: a TOML file (``runners/*.toml``). Output: a frozen ``RunProfile``.
Relative paths in the file are resolved against the file's own directory.
Parsing is strict: keys outside the format, missing keys, wrong types and contradictory
choices raise ``InputError`` naming the file and the field.

Format::

    name = "hf-cpu"                    # required, free text identifier
    backend = "hf"                     # a registered backend: "hf" | "mlx" | "vllm" | "rule"
    description = "..."                # optional
    require_batch_invariance = false   # optional; true: `guardrepro doctor` refuses a
                                       # backend/device that cannot give batch invariance
    workers = 1                        # optional; worker processes `guardrepro run` uses
                                       # (deterministic shards merged in cohort order;
                                       # `run --workers N` overrides it)
    sort_by_length = false             # optional; true: rows go to the runner in order of
                                       # prompt length (less padding); records are still
                                       # written back in cohort order

    [guard]
    name = "ts-guard"                  # a guard spec: a shipped or ./guards/ name, or the
                                       # path of a spec file (relative to this profile)
    # the template, either pinned (a file inside a lock, via prompts.load_template)
    template_lock = "../locks/toolsafe.toml"
    template_file = "src/agent/agent_prompts.py"
    # or unpinned: a local UTF-8 text file used verbatim (its sha256 is recorded)
    # template_path = "my_template.txt"
    # or neither, for a guard that builds its own prompt (a conversation guard
    # such as llama-guard-3, or a rule guard); see `guardrepro guards`

    [checkpoint]                       # absent for a backend that runs no model ("rule")
    lock = "../locks/ts-guard.toml"    # pinned: materialized and verified via fetch
    # or dir = "/path/to/checkpoint"   # unpinned local directory (tree hash recorded,
                                       # model_revision "unpinned")

    [backend_options]                  # the backend's declared options (runners/backends.py):
                                       # undeclared keys, wrong types, choices and ranges are
                                       # refused here, naming this file
    dtype = "float32"
    device = "cpu"
    batch_size = 4

    [decoding]                         # decoding.DecodingParams; every key optional:
                                       # an omitted key takes the guard adapter's own
                                       # value (GuardAdapter.decoding_defaults)
    mode = "greedy"                    # or "sampled" (the authors' mode)
    max_new_tokens = 2048              # ts-guard 2048, toy-guard 256, ...
    # sampled mode only; for ts-guard and toy-guard the authors' values are the
    # defaults: temperature = 0.1, top_p = 0.9, max_attempts = 3 (a guard with no
    # published sampled setting needs temperature and top_p here)
    # seed = 0                         # repeat index of the per-base, per-attempt
                                       # seeds (decoding.sampled_seed; absent or 0 =
                                       # the published seeds)

Invariant: ``RunProfile.text_sha256`` is the sha256 of the file's text, so a
manifest can name exactly which profile produced a run.
Paths are resolved at load time but their existence is checked by
``check_paths`` (called when a run resolves the profile), so a profile may
name an artifact that is built later.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from guardrepro.decoding import DecodingParams
from guardrepro.errors import InputError, MissingArtifactError
from guardrepro.guards.spec import looks_like_path
from guardrepro.limits import parse_toml_text
from guardrepro.run.runners.backends import Backend
from guardrepro.run.runners.options import CheckedOptions
from guardrepro.run.runners.registry import RUNNERS, backend_of
from guardrepro.schema import sha256_text
from guardrepro.spec import check_keys, expect_kind

BACKENDS: Mapping[str, Any] = RUNNERS  # the registered backends' names (runners.registry)

_TOP_KEYS = {
    "name",
    "backend",
    "description",
    "require_batch_invariance",
    "workers",
    "sort_by_length",
    "guard",
    "checkpoint",
    "backend_options",
    "decoding",
}
_TOP_REQUIRED = {"name", "backend", "guard"}
_GUARD_KEYS = {"name", "template_lock", "template_file", "template_path"}
_DECODING_TYPES: Mapping[str, tuple[type, ...]] = {
    "mode": (str,),
    "max_new_tokens": (int,),
    "temperature": (int, float),
    "top_p": (int, float),
    "max_attempts": (int,),
    "seed": (int,),
}


@dataclass(frozen=True)
class GuardSpec:
    """Which guard adapter, and where its template comes from (exactly one source)."""

    name: str
    template_lock: Path | None = None
    template_file: str | None = None
    template_path: Path | None = None


@dataclass(frozen=True)
class CheckpointSpec:
    """A checkpoint pinned by a lock, or an unpinned local directory (exactly one)."""

    lock: Path | None = None
    dir: Path | None = None

    @property
    def pinned(self) -> bool:
        return self.lock is not None


@dataclass(frozen=True)
class RunProfile:
    path: Path
    text_sha256: str
    name: str
    # the backend's descriptor, looked up by its name once, when the profile is
    # read; passed down from here (doctor, resolve, the workers, create_runner)
    descriptor: Backend = field(repr=False)
    guard: GuardSpec
    checkpoint: CheckpointSpec
    # [backend_options] checked against the descriptor's table once, when the
    # profile is read (or an option replaced), and filled with its defaults:
    # doctor, resolve and create_runner take these and check nothing again
    checked_options: CheckedOptions = field(repr=False)
    backend_options: Mapping[str, Any] = field(default_factory=dict)  # as written
    decoding: DecodingParams = field(default_factory=DecodingParams)
    description: str = ""
    require_batch_invariance: bool = False
    workers: int = 1
    sort_by_length: bool = False

    @classmethod
    def load(cls, path: str | Path) -> RunProfile:
        """Read and validate a profile file."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError as exc:
            raise InputError("profile file not found", file=str(path)) from exc
        return cls.from_text(text, path)

    @classmethod
    def from_text(cls, text: str, path: str | Path) -> RunProfile:
        """Validate profile ``text``; relative paths resolve against ``path``'s directory."""
        path = Path(path).resolve()
        file = str(path)
        data = parse_toml_text(text, file=file)
        expect_kind(data, "run_profile", file=file)
        _keys(data, _TOP_KEYS, _TOP_REQUIRED, file=file, where="")
        name = _string(data, "name", file=file)
        backend = _string(data, "backend", file=file)
        descriptor = backend_of(backend, file=file)
        description = data.get("description", "")
        if not isinstance(description, str):
            raise InputError("expected a string", file=file, field="description")
        invariance = data.get("require_batch_invariance", False)
        if not isinstance(invariance, bool):
            raise InputError("expected true or false", file=file, field="require_batch_invariance")
        workers = data.get("workers", 1)
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise InputError(f"expected an integer >= 1, got {workers!r}", file=file,
                             field="workers")
        sort_by_length = data.get("sort_by_length", False)
        if not isinstance(sort_by_length, bool):
            raise InputError("expected true or false", file=file, field="sort_by_length")
        base = path.parent
        options = data.get("backend_options", {})
        if not isinstance(options, dict):
            raise InputError("expected a table", file=file, field="backend_options")
        checked = descriptor.options.check(options, file=file)
        guard = _guard(data["guard"], base, file=file)
        return cls(
            path=path,
            text_sha256=sha256_text(text),
            name=name,
            descriptor=descriptor,
            guard=guard,
            checkpoint=_checkpoint(data.get("checkpoint"), base, file=file,
                                   needs_model=descriptor.needs_model, backend=backend),
            checked_options=checked,
            backend_options=dict(options),
            decoding=_decoding(data.get("decoding", {}), file=file, guard=guard.name),
            description=description,
            require_batch_invariance=invariance,
            workers=workers,
            sort_by_length=sort_by_length,
        )

    @property
    def backend(self) -> str:
        """The backend's name, as the profile gives it (``backend = "hf"``)."""
        return self.descriptor.name

    def check_paths(self) -> None:
        """Every local path the profile names must exist (MissingArtifactError
        naming the profile and the field otherwise)."""
        named = [
            ("guard.template_path", self.guard.template_path, False),
            ("guard.template_lock", self.guard.template_lock, False),
            ("checkpoint.lock", self.checkpoint.lock, False),
            ("checkpoint.dir", self.checkpoint.dir, True),
        ]
        for field_name, path, is_dir in named:
            if path is None or (path.is_dir() if is_dir else path.is_file()):
                continue
            kind = "directory" if is_dir else "file"
            raise MissingArtifactError(
                f"{self.path}: {field_name}: {kind} not found: {path}"
                + (" (build or fetch it first)" if field_name == "checkpoint.lock" else "")
            )

    def with_backend_options(self, **updates: Any) -> RunProfile:
        """A copy with some backend options replaced (e.g. ``batch_size=1``),
        checked against the descriptor's table."""
        options = {**self.backend_options, **updates}
        checked = self.descriptor.options.check(options, file=str(self.path))
        return dataclasses.replace(self, backend_options=options, checked_options=checked)

    def with_workers(self, workers: int) -> RunProfile:
        return dataclasses.replace(self, workers=workers)

    def with_decoding(self, decoding: DecodingParams) -> RunProfile:
        return dataclasses.replace(self, decoding=decoding)

    def with_checkpoint_lock(self, lock: str | Path) -> RunProfile:
        """A copy pinned to another checkpoint lock (e.g. a freshly quantized artifact)."""
        return dataclasses.replace(self, checkpoint=CheckpointSpec(lock=Path(lock).resolve()))


def _keys(data: Any, allowed: set[str], required: set[str], *, file: str, where: str) -> None:
    if not isinstance(data, dict):
        raise InputError("expected a table", file=file, field=where or None)
    check_keys(data, allowed, file=file, where=where, required=required)


def _string(data: Mapping[str, Any], key: str, *, file: str, where: str = "") -> str:
    value = data[key]
    name = f"{where}.{key}" if where else key
    if not isinstance(value, str) or not value:
        raise InputError("expected a non-empty string", file=file, field=name)
    return value


def _resolve(base: Path, value: str) -> Path:
    # Existence is checked when the profile is resolved (``RunProfile.check_paths``),
    # not here: a profile may name an artifact that is built later (a quantized lock).
    return Path(value) if Path(value).is_absolute() else (base / value).resolve()


def _guard(data: Any, base: Path, *, file: str) -> GuardSpec:
    _keys(data, _GUARD_KEYS, {"name"}, file=file, where="guard")
    name = _string(data, "name", file=file, where="guard")
    if looks_like_path(name):  # a guard spec by path, relative to the profile
        name = str(_resolve(base, name))
    has_lock = "template_lock" in data or "template_file" in data
    if has_lock and "template_path" in data:
        raise InputError(
            "give either template_lock + template_file (pinned) or template_path (unpinned)",
            file=file,
            field="guard.template_path",
        )
    if "template_path" in data:
        value = _string(data, "template_path", file=file, where="guard")
        path = _resolve(base, value)
        return GuardSpec(name=name, template_path=path)
    if not has_lock:  # the adapter builds its own prompt (checked when resolved)
        return GuardSpec(name=name)
    for key in ("template_lock", "template_file"):
        if key not in data:
            raise InputError(
                "the template needs template_lock + template_file, or template_path",
                file=file,
                field=f"guard.{key}",
            )
    lock = _resolve(base, _string(data, "template_lock", file=file, where="guard"))
    return GuardSpec(
        name=name,
        template_lock=lock,
        template_file=_string(data, "template_file", file=file, where="guard"),
    )


def _checkpoint(data: Any, base: Path, *, file: str, needs_model: bool,
                backend: str) -> CheckpointSpec:
    if not needs_model:
        if data is not None:
            raise InputError(f"the {backend} backend runs no model: remove [checkpoint]",
                             file=file, field="checkpoint")
        return CheckpointSpec()
    if data is None:
        raise InputError("missing required key", file=file, field="checkpoint")
    _keys(data, {"lock", "dir"}, set(), file=file, where="checkpoint")
    if ("lock" in data) == ("dir" in data):
        raise InputError(
            "give exactly one of lock (pinned) or dir (unpinned local directory)",
            file=file,
            field="checkpoint",
        )
    if "lock" in data:
        value = _string(data, "lock", file=file, where="checkpoint")
        lock = _resolve(base, value)
        return CheckpointSpec(lock=lock)
    value = _string(data, "dir", file=file, where="checkpoint")
    return CheckpointSpec(dir=_resolve(base, value))


def _guard_decoding(guard: Any, mode: Any) -> dict[str, Any]:
    """The guard adapter's own decoding for ``mode``; nothing for a guard name or
    mode that is not known (reported when the profile is resolved, or by
    ``DecodingParams``)."""
    from guardrepro.guards.registry import decoding_defaults

    if not isinstance(guard, str) or mode not in ("greedy", "sampled"):
        return {}
    try:
        return decoding_defaults(guard, mode)
    except InputError:  # an unknown guard: named when the profile is resolved
        return {}


def _decoding(data: Any, *, file: str, guard: Any) -> DecodingParams:
    _keys(data, set(_DECODING_TYPES), set(), file=file, where="decoding")
    for key, value in data.items():
        types = _DECODING_TYPES[key]
        if isinstance(value, bool) or not isinstance(value, types):
            names = " or ".join(t.__name__ for t in types)
            raise InputError(f"expected {names}, got {value!r}", file=file, field=f"decoding.{key}")
    values = {**_guard_decoding(guard, data.get("mode", "greedy")), **data}
    for key in ("temperature", "top_p"):
        if key in values:
            values[key] = float(values[key])
    try:
        return DecodingParams(**values)
    except InputError as exc:
        message = str(exc)
        if exc.field is not None:
            message = message.removeprefix(f"field {exc.field!r}: ")
        raise InputError(message, file=file, field=f"decoding.{exc.field or 'mode'}") from exc
