"""Run a cohort through a guard: render, tokenize, generate, parse, record.

Input: a run profile (``runners/*.toml``, a parsed ``RunProfile``, or a
``run.resolve.ResolvedProfile`` already resolved), a cohort JSONL file and a run
directory. Output: ``manifest.json`` and one ``schema.Record`` per selected
cohort row appended to ``records.jsonl`` (see ``guardrepro.rundir.records``), and a
``RunSummary`` with the counts.

Invariants:

- The profile is resolved once (``run.resolve.resolve_profile``: each lock read
  and verified once) and the resulting object is passed down; nothing below
  re-opens the profile, the locks or the checkpoint's files. A caller holding
  a ``ResolvedProfile`` passes it in and nothing is resolved again.
- Every row's prompt is rendered by the guard adapter, chat-templated and
  tokenized once by ``prompts.PromptTokenizer``; the runner receives token
  ids only. ``input_sha256`` is the sha256 of the rendered text (before the
  chat template). A row whose prompt plus ``max_new_tokens`` exceeds the
  model's context is refused up front, before anything is generated.
- A checkpoint pinned by a lock must declare the guard's special tokens: its
  EOS and pad ids, read from its own (lock-verified) config, must name the
  token strings the adapter expects (``GuardAdapter.special_tokens``);
  otherwise ``PromptError`` before anything is generated. An unpinned
  checkpoint directory (development and tests, provenance ``"unpinned"``)
  that differs only gets a warning, so test checkpoints may carry extra stop
  ids.
- A conversation guard's messages go through the checkpoint's chat
  template; a system prompt the template adds on its own is reported (a
  warning naming its text) before anything runs, except for the TS-Guard
  family, whose upstream setup includes Qwen2.5's default system prompt. A
  logit guard's score tokens must each be one token. A rule guard runs on
  the ``rule`` backend with no checkpoint and no tokenizer.
- The provenance (guard, backend, ``runner.describe()``, artifact tree hash
  -- for a locked checkpoint ``verify.cached_tree_hash`` in the same home, so
  the bytes ``materialize`` just verified are not read again --
  model revision or ``"unpinned"``, template and chat-template hashes, parser
  version, decoding, package versions) is computed before generating. A run
  directory is resumed only when its manifest has the same provenance hash,
  cohort hash and shard; otherwise ``ProvenanceError`` lists every
  difference. Existing records must carry the same provenance hash, belong
  to the selected rows and have the same ``input_sha256``.
- The run directory's lock is taken before anything else, so a concurrent
  second run on it fails at once. Rows already recorded are skipped; the
  others go to the runner ``batch_size`` requests per ``generate`` call and
  each chunk's records are appended as soon as it returns (attempts, retries,
  inference errors and decision margins: ``guardrepro.run.attempts``). Any
  exception other than ``InferenceError`` stops the run; the records already
  appended stay valid and a rerun resumes.
- A profile with ``sort_by_length = true`` hands the rows to the runner
  ordered by prompt length (stable; less padding per batch). Records are
  appended as chunks finish and, once every selected row has one, the
  records file is rewritten atomically in cohort order, so the file's order
  never depends on the batching.
"""

from __future__ import annotations

import platform
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import guardrepro
from guardrepro.artifacts.nofollow import read_in, resolved_beneath
from guardrepro.artifacts.store import read_hashed
from guardrepro.errors import InputError, PromptError, ProvenanceError
from guardrepro.guards.base import GuardAdapter
from guardrepro.guards.decision import label_union
from guardrepro.guards.registry import record_parser
from guardrepro.run.attempts import PreparedRow, generate_into, label_table
from guardrepro.run.guard_facts import guard_facts
from guardrepro.run.profile import RunProfile
from guardrepro.run.resolve import (  # noqa: F401 (re-exported)
    UNPINNED,
    NoModelTokenizer,
    ResolvedProfile,
    resolve_profile,
)
from guardrepro.run.runners.base import Runner
from guardrepro.run.runners.registry import chunk_size, create_runner
from guardrepro.rundir.cohort import read_cohort_hashed
from guardrepro.rundir.manifest import (
    MANIFEST_FILE,
    RunManifest,
    check_resumable,
    parse_manifest,
    write_manifest,
)
from guardrepro.rundir.records import RecordWriter, utc_now
from guardrepro.rundir.shard import select_rows
from guardrepro.schema import (
    RECORD_STATUSES,
    CohortRow,
    Provenance,
    sha256_text,
)
from guardrepro.versions import git_commit, package_versions

# Packages every backend's outputs depend on (prompt rendering and tokenization);
# backend-specific versions are in runner.describe().
PROMPT_PACKAGES = ("tokenizers", "transformers", "jinja2")


@dataclass(frozen=True)
class RunSummary:
    run_dir: Path
    run_id: str
    rows_in_cohort: int
    rows_selected: int
    already_done: int
    generated: int
    remaining: int
    counts: Mapping[str, int] = field(default_factory=dict)
    elapsed_s: float = 0.0
    # wall-clock (time.time) span of generation: runner loaded -> last record
    generation_started: float = 0.0
    generation_finished: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["run_dir"] = str(self.run_dir)
        out["counts"] = dict(self.counts)
        return out


# ---------------------------------------------------------------------------
# resolution


def prepare_rows(
    guard: GuardAdapter,
    tokenizer: Any,
    rows: Sequence[CohortRow],
    max_new_tokens: int,
    *,
    cohort_path: str | Path | None = None,
) -> list[PreparedRow]:
    """Render, hash, tokenize and length-check each row (PromptError names the row)."""
    prepared = []
    score_ids = tuple(tokenizer.single_token_id(t) for t in guard.score_tokens)
    labels = label_table(guard, tokenizer)
    if rows:
        system_prompt_inserted(guard, tokenizer, rows[0].sample)
    for index, row in enumerate(rows):
        try:
            text = guard.render(row.sample)
            messages = guard.messages(row.sample)
            fields = {f"sample.{k}": v for k, v in row.sample.items() if isinstance(v, str)}
            tokenizer.check_chars(messages, fields, max_new_tokens)  # fail fast: no tokens
            ids = tuple(tokenizer.encode_messages(messages))
            tokenizer.check_length(len(ids), max_new_tokens)
        except (PromptError, KeyError, ValueError) as exc:
            where = f"{cohort_path}: " if cohort_path is not None else ""
            raise PromptError(f"{where}row {index} ({row.row_id}): {exc}") from exc
        pairs = tuple((m["role"], m["content"]) for m in messages)
        prepared.append(PreparedRow(row, text, sha256_text(text), ids, pairs, score_ids,
                                    labels, label_union(labels)))
    return prepared


def system_prompt_inserted(guard: GuardAdapter, tokenizer: Any,
                           sample: Mapping[str, Any]) -> str | None:
    """The system prompt the chat template adds on its own to ``sample``'s
    messages (None: none), checked against the guard spec's
    ``default_system_prompt``: ``expected`` (part of the upstream setup, as
    Qwen2.5's for the TS-Guard family) passes, ``allow`` warns, ``forbid`` is
    a ``PromptError`` naming the text, the spec and how to allow it."""
    if not hasattr(tokenizer, "injected_system_prompt"):
        return None
    injected: str | None = tokenizer.injected_system_prompt(guard.messages(sample))
    policy = getattr(guard, "system_prompt", "expected" if guard.default_system_expected
                     else "allow")
    if injected is None or policy == "expected":
        return injected
    what = (f"the chat template adds a system prompt of its own to guard {guard.name!r}'s "
            f"prompt: {injected[:200]!r}")
    if policy == "forbid":
        spec = getattr(getattr(guard, "spec", None), "path", "the guard spec")
        raise PromptError(f"{what}; {spec}, field 'prompt.default_system_prompt' is "
                          '"forbid": give the guard a system message of its own in '
                          '[[prompt.messages]], or set it to "allow" (recorded in the manifest)')
    warnings.warn(what, stacklevel=3)
    return injected


def provenance_versions() -> dict[str, str]:
    """guardrepro, Python and the installed prompt packages (``PROMPT_PACKAGES``)."""
    return {"guardrepro": guardrepro.__version__, "python": platform.python_version(),
            **package_versions(PROMPT_PACKAGES)}


def build_provenance(resolved: ResolvedProfile, runner: Runner, tree_sha256: str) -> Provenance:
    profile = resolved.profile
    return Provenance(
        guard=resolved.guard.name,
        backend=profile.backend,
        backend_config=dict(runner.describe()),
        artifact_tree_sha256=tree_sha256,
        model_revision=resolved.model_revision,
        template_sha256=resolved.template.sha256,
        chat_template_sha256=resolved.tokenizer.chat_template_sha256,
        parser_version=resolved.guard.parser_version,
        decoding=profile.decoding.to_dict(),
        package_versions=provenance_versions(),
    )


# ---------------------------------------------------------------------------
# the run


def _create_runner(profile: RunProfile, resolved: ResolvedProfile) -> Runner:
    """The profile's runner with the resolved options; an option error names
    the profile file."""
    try:
        return create_runner(
            profile.descriptor,
            resolved.checkpoint_dir,
            dict(resolved.runner_options),
            eos_token_ids=resolved.tokenizer.eos_token_ids,
            pad_token_id=resolved.tokenizer.pad_token_id,
            decode=resolved.tokenizer.decode,
        )
    except InputError as exc:
        if exc.file is not None:
            raise
        message = str(exc)
        if exc.field is not None:
            message = message.removeprefix(f"field {exc.field!r}: ")
        raise InputError(message, file=str(profile.path), field=exc.field) from exc


def _existing_manifest(writer: RecordWriter, run_dir: Path) -> RunManifest | None:
    """The run directory's manifest (not read through a symlink); records without
    one are refused."""
    assert writer.dir_fd is not None
    data = read_in(writer.dir_fd, run_dir / MANIFEST_FILE)
    existing = None if data is None else parse_manifest(data, file=str(run_dir / MANIFEST_FILE))
    if existing is None and writer.records:
        raise ProvenanceError(
            f"{writer.path} holds records but {run_dir} has no manifest.json; "
            "refusing to append to records of unknown provenance"
        )
    return existing


def _settle_manifest(existing: RunManifest | None, run_dir: Path, provenance: Provenance,
                     profile: RunProfile, cohort_path: Path, cohort_rows: int,
                     shard_spec: str | None, rows_selected: int,
                     cohort_sha256: str | None = None, trusted: Path | None = None,
                     guard_spec: Mapping[str, Any] | None = None) -> RunManifest:
    """This run's manifest: a new run's is written; a resumed run keeps its
    own once ``check_resumable`` accepts the new one. ``cohort_sha256``: the
    cohort file's hash when the caller took it as it read the file;
    ``guard_spec``: what ``run.guard_facts`` records about the guard."""
    if cohort_sha256 is None:
        cohort_sha256 = read_hashed(cohort_path)[1]
    manifest = RunManifest(
        run_id=existing.run_id if existing else run_dir.name,
        created_at=utc_now(),
        provenance=provenance,
        provenance_sha256=provenance.sha256,
        cohort={"path": str(cohort_path), "sha256": cohort_sha256, "rows": cohort_rows},
        profile={"path": str(profile.path), "sha256": profile.text_sha256},
        shard=shard_spec,
        rows_selected=rows_selected,
        guardrepro_version=guardrepro.__version__,
        git_commit=git_commit(),
        guard_spec=guard_spec,
    )
    if existing is not None:
        check_resumable(existing, manifest, run_dir)
        return existing
    write_manifest(run_dir, manifest, trusted=trusted)
    return manifest


def _status_counts(writer: RecordWriter, rows: list[CohortRow]) -> dict[str, int]:
    """Records per status among the selected ``rows``."""
    selected_ids = {r.row_id for r in rows}
    counts = dict.fromkeys(RECORD_STATUSES, 0)
    for record in writer.records.values():
        if record.row_id in selected_ids:
            counts[record.status] += 1
    return counts


def run_cohort(
    profile_path: str | Path | RunProfile | ResolvedProfile,
    cohort_path: str | Path,
    run_dir: str | Path,
    *,
    shard: str | None = None,
    limit: int | None = None,
    progress: bool = True,
    home: str | Path | None = None,
    on_ready: Callable[[], None] | None = None,
    on_rows: Callable[[int], None] | None = None,
    trusted: Path | None = None,
) -> RunSummary:
    """Run (or resume) ``cohort_path`` with the profile into ``run_dir``.

    ``on_ready`` is called once the runner is loaded and the run directory
    checked, right before the first row is generated (``run --workers``
    lines its workers up there). ``on_rows(n)`` is told of every ``n`` rows
    done: first those already recorded, then each generated chunk (``run
    --workers`` sums them into one bar in the parent).

    ``shard`` is ``"k/n"`` (1-based); ``limit`` keeps only the first N selected rows
    for this invocation (a later run without it resumes the rest). ``home`` is the
    guardrepro cache (default: ``$GUARDREPRO_HOME``); no symlink below ``trusted``
    (default ``run_dir``) is followed. A profile that demands batch invariance on a
    backend/device that cannot give it is refused by ``doctor.preflight`` first.
    """
    from guardrepro.run.doctor import preflight

    started = time.perf_counter()
    given = profile_path if isinstance(profile_path, ResolvedProfile) else None
    profile = _profile_of(profile_path)
    preflight(given if given is not None else profile)
    cohort_path, (run_dir, trusted) = Path(cohort_path).resolve(), resolved_beneath(
        Path(run_dir), trusted)
    if limit is not None and limit < 0:
        raise InputError(f"limit must be >= 0, got {limit}", field="limit")
    rows_all, digest = read_cohort_hashed(cohort_path)  # one read: the rows and their hash
    rows, shard_spec = select_rows(rows_all, shard)
    scope = rows if limit is None else rows[:limit]
    with RecordWriter(run_dir, refused_leaves=(MANIFEST_FILE,), parsers=record_parser,
                      trusted=trusted) as writer:
        existing_manifest = _existing_manifest(writer, run_dir)
        resolved = given if given is not None else resolve_profile(profile, home=home)
        prepared = prepare_rows(resolved.guard, resolved.tokenizer, scope,
                                profile.decoding.max_new_tokens, cohort_path=cohort_path)
        runner = _create_runner(profile, resolved)
        try:
            provenance = build_provenance(resolved, runner, resolved.tree_sha256)
            manifest = _settle_manifest(existing_manifest, run_dir, provenance, profile,
                                        cohort_path, len(rows_all), shard_spec, len(rows),
                                        digest, trusted, guard_facts(resolved, scope[:1]))
            _check_existing(writer, rows, prepared, provenance.sha256)
            todo = [p for p in prepared if p.row.row_id not in writer.records]
            already = len(prepared) - len(todo)
            if profile.sort_by_length:
                todo.sort(key=lambda p: len(p.token_ids))
            if on_ready is not None:
                on_ready()
            if on_rows is not None:
                on_rows(already)
            generation_started = time.time()
            generate_into(writer, todo, runner, resolved.guard, profile.decoding,
                          resolved.tokenizer.decode,
                          chunk_size=chunk_size(profile.descriptor, profile.backend_options),
                          run_id=manifest.run_id, provenance=provenance, progress=progress,
                          on_rows=on_rows)
            generation_finished = time.time()
            if profile.sort_by_length:
                writer.rewrite_in_order([r.row_id for r in rows])
        finally:
            runner.close()
        counts = _status_counts(writer, rows)
        return RunSummary(
            run_dir=run_dir, run_id=manifest.run_id, rows_in_cohort=len(rows_all),
            rows_selected=len(rows), already_done=already, generated=len(todo),
            remaining=len(rows) - sum(counts.values()), counts=counts,
            elapsed_s=time.perf_counter() - started,
            generation_started=generation_started, generation_finished=generation_finished,
        )


def _profile_of(profile: str | Path | RunProfile | ResolvedProfile) -> RunProfile:
    if isinstance(profile, ResolvedProfile):
        return profile.profile
    return profile if isinstance(profile, RunProfile) else RunProfile.load(profile)


def _check_existing(
    writer: RecordWriter,
    rows: Sequence[CohortRow],
    prepared: Sequence[PreparedRow],
    provenance_sha256: str,
) -> None:
    """Existing records must share this run's provenance, rows and prompts."""
    selected = {r.row_id for r in rows}
    hashes = {p.row.row_id: p.input_sha256 for p in prepared}
    for record in writer.records.values():
        if record.provenance_sha256 != provenance_sha256:
            raise ProvenanceError(
                f"{writer.path}: record {record.row_id!r} has provenance "
                f"{record.provenance_sha256[:12]}..., this run {provenance_sha256[:12]}...; "
                "refusing to mix provenance"
            )
        if record.row_id not in selected:
            raise ProvenanceError(
                f"{writer.path}: record {record.row_id!r} is not a row of this cohort/shard"
            )
        expected = hashes.get(record.row_id)
        if expected is not None and expected != record.input_sha256:
            raise ProvenanceError(
                f"{writer.path}: record {record.row_id!r} was made from a different prompt "
                f"(input_sha256 {record.input_sha256[:12]}... != {expected[:12]}...)"
            )
