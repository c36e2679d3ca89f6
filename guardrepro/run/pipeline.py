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
  -- for a locked checkpoint ``treehash.cached_tree_hash`` in the same home, so
  the bytes ``materialize`` just verified are not read again --
  model revision or ``"unpinned"``, template and chat-template hashes, parser
  version, decoding, package versions) is computed before generating. A run
  directory is resumed only when its manifest has the same provenance hash,
  cohort hash and shard; otherwise ``ProvenanceError`` lists every
  difference. Existing records must carry the same provenance hash, belong
  to the selected rows and have the same ``input_sha256``.
- Memory does not grow with the rows' text: the cohort is checked and hashed
  in one pass and read again a block at a time (``rundir.cohort_stream``); every
  row is prepared once up front and kept as nothing (``prepare.check_rows``),
  then prepared again a chunk at a time for generation (``prepare.rows_to_do``);
  the writer keeps an index of what is recorded, not the records
  (``rundir.record_index``). What grows is about 300 bytes a row: the row ids
  and that index. A profile with ``sort_by_length`` holds the prepared rows
  to do (they are sorted as a whole).
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
from collections.abc import Callable, Collection, Container, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import guardrepro
from guardrepro.artifacts.nofollow import read_in, resolved_beneath
from guardrepro.artifacts.store import read_hashed
from guardrepro.errors import InputError, ProvenanceError
from guardrepro.guards.registry import record_parser
from guardrepro.run.attempts import PreparedRow, generate_into
from guardrepro.run.guard_facts import guard_facts
from guardrepro.run.prepare import (  # noqa: F401 (prepare_rows re-exported)
    check_rows,
    prepare_rows,
    rows_to_do,
    system_prompt_inserted,
)
from guardrepro.run.profile import RunProfile
from guardrepro.run.resolve import (  # noqa: F401 (re-exported)
    UNPINNED,
    NoModelTokenizer,
    ResolvedProfile,
    resolve_profile,
)
from guardrepro.run.runners.base import Runner
from guardrepro.run.runners.registry import chunk_size, create_runner
from guardrepro.rundir.cohort_stream import CohortScan, scan_cohort
from guardrepro.rundir.manifest import (
    MANIFEST_FILE,
    RunManifest,
    check_resumable,
    parse_manifest,
    write_manifest,
)
from guardrepro.rundir.records import RecordWriter, utc_now
from guardrepro.rundir.shard import parse_shard, shard_of
from guardrepro.schema import (
    CohortRow,
    Provenance,
)
from guardrepro.serde.fields import JsonValue
from guardrepro.versions import git_commit, package_versions

# Packages every backend's outputs depend on (prompt rendering and tokenization);
# backend-specific versions are in runner.describe().
PROMPT_PACKAGES = ("tokenizers", "transformers", "jinja2")


@dataclass(frozen=True)
class RunSummary(JsonValue):
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


# ---------------------------------------------------------------------------
# resolution


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
            resolved.runner_options,
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
    only: Collection[str] | None = None,
) -> RunSummary:
    """Run (or resume) ``cohort_path`` with the profile into ``run_dir``.

    ``on_ready`` is called once the runner is loaded and the run directory
    checked, right before the first row is generated (``run --workers``
    lines its workers up there). ``on_rows(n)`` is told of every ``n`` rows
    done: first those already recorded, then each generated chunk (``run
    --workers`` sums them into one bar in the parent). ``only``: the rows to
    make (a worker of ``run --workers``); rows recorded before stay, checked.

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
    # one checking pass (rows and hash); the rows are read again a block at a time
    with scan_cohort(cohort_path, shard) as cohort, RecordWriter(
            run_dir, refused_leaves=(MANIFEST_FILE,), parsers=record_parser,
            trusted=trusted) as writer:
        existing_manifest = _existing_manifest(writer, run_dir)
        resolved = given if given is not None else resolve_profile(profile, home=home)
        stream = _RowStream(resolved, cohort, limit, writer, cohort_path, only)
        scope, todo_rows, mismatched = stream.check()  # every row prepared: bad ones refused
        runner = _create_runner(profile, resolved)
        try:
            provenance = build_provenance(resolved, runner, resolved.tree_sha256)
            manifest = _settle_manifest(existing_manifest, run_dir, provenance, profile,
                                        cohort_path, cohort.rows_in_cohort, cohort.shard,
                                        cohort.rows_selected, cohort.sha256, trusted,
                                        guard_facts(resolved, list(cohort.rows(1))))
            _check_existing(writer, cohort.ids, cohort.shard, mismatched, provenance.sha256)
            already = scope - todo_rows
            todo = stream.todo(sorted_by_length=profile.sort_by_length)
            if on_ready is not None:
                on_ready()
            if on_rows is not None:
                on_rows(already)
            generation_started = time.time()
            generate_into(writer, todo, runner, resolved.guard, profile.decoding,
                          resolved.tokenizer.decode,
                          chunk_size=chunk_size(profile.descriptor, profile.backend_options),
                          run_id=manifest.run_id, provenance=provenance, progress=progress,
                          on_rows=on_rows, total=todo_rows)
            generation_finished = time.time()
            if profile.sort_by_length:
                writer.rewrite_in_order([r.row_id for r in cohort.rows()])
        finally:
            runner.close()
        counts = dict(writer.records.status_counts)  # every record is of a selected row
        return RunSummary(
            run_dir=run_dir, run_id=manifest.run_id, rows_in_cohort=cohort.rows_in_cohort,
            rows_selected=cohort.rows_selected, already_done=already, generated=todo_rows,
            remaining=cohort.rows_selected - sum(counts.values()), counts=counts,
            elapsed_s=time.perf_counter() - started,
            generation_started=generation_started, generation_finished=generation_finished,
        )


class _RowStream:
    """The run's rows (the first ``limit`` of the shard; with ``only``, those
    rows and the ones already recorded), read from the cohort scan in two
    passes: ``check`` prepares each and keeps nothing, ``todo`` prepares again,
    a chunk at a time, those without a record."""

    def __init__(self, resolved: ResolvedProfile, cohort: CohortScan, limit: int | None,
                 writer: RecordWriter, cohort_path: Path,
                 only: Collection[str] | None = None) -> None:
        self.resolved, self.cohort, self.limit = resolved, cohort, limit
        self.done, self.cohort_path = writer.records, cohort_path
        self.max_new_tokens = resolved.profile.decoding.max_new_tokens
        self.only = only

    def _rows(self) -> Iterable[CohortRow]:
        rows = self.cohort.rows(self.limit)
        if self.only is None:
            return rows
        return (r for r in rows if r.row_id in self.only or r.row_id in self.done)

    def check(self) -> tuple[int, int, dict[str, str]]:
        return check_rows(self.resolved.guard, self.resolved.tokenizer, self._rows(),
                          self.max_new_tokens, cohort_path=self.cohort_path, done=self.done)

    def todo(self, *, sorted_by_length: bool) -> Iterable[PreparedRow]:
        rows = rows_to_do(self.resolved.guard, self.resolved.tokenizer, self._rows(),
                          self.max_new_tokens, cohort_path=self.cohort_path, done=self.done)
        if not sorted_by_length:
            return rows
        # the one case that holds every prepared row to do (stable sort by length)
        return sorted(rows, key=lambda p: len(p.token_ids))


def _profile_of(profile: str | Path | RunProfile | ResolvedProfile) -> RunProfile:
    if isinstance(profile, ResolvedProfile):
        return profile.profile
    return profile if isinstance(profile, RunProfile) else RunProfile.load(profile)


def _check_existing(writer: RecordWriter, ids: Container[str], shard: str | None,
                    mismatched: Mapping[str, str], provenance_sha256: str) -> None:
    """Existing records must share this run's provenance, be rows of the cohort
    (``ids``) and ``shard``, and have this run's prompts (``mismatched``: this
    run's prompt hash of each recorded row whose record has another,
    ``prepare.check_rows``); the first record in file order that fails is named."""
    records = writer.records
    foreign = min((at for digest, at in records.provenances.items()
                   if digest != provenance_sha256), default=None)
    k, n = parse_shard(shard) if shard is not None else (1, 1)
    for line, row_id in enumerate(records):
        if foreign is not None and line == foreign[0]:
            digest = next(d for d, at in records.provenances.items() if at == foreign)
            raise ProvenanceError(
                f"{writer.path}: record {row_id!r} has provenance "
                f"{digest[:12]}..., this run {provenance_sha256[:12]}...; "
                "refusing to mix provenance"
            )
        if row_id not in ids or (n > 1 and shard_of(row_id, n) != k):
            raise ProvenanceError(
                f"{writer.path}: record {row_id!r} is not a row of this cohort/shard"
            )
        expected = mismatched.get(row_id)
        if expected is not None:
            raise ProvenanceError(
                f"{writer.path}: record {row_id!r} was made from a different prompt "
                f"(input_sha256 {records.input_sha256(row_id)[:12]}... != {expected[:12]}...)"
            )
