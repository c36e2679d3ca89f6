"""The actor of ``--engine ray``: runs units of one or more runs, one runner at a time.

Input (constructor): one ``JobSpec`` per run of the pool (the profile the
driver resolved, hf threads already fixed; the driver's provenance,
``Provenance.to_dict()``; the run id; the cohort path and run directory, for
messages; whether the hf thread count comes from the actor's CPU allotment;
the artifact tree hash the driver pinned, if any) and the cache home. Input
(per call): one Ray block = one unit, a ``pyarrow.Table`` with columns
``job`` (the run's index), ``unit`` (1-based), ``row`` (the cohort row's
JSON object) and ``input_sha256`` (the driver's hash of the rendered
prompt). Output (per call): a table with columns ``row_id``, ``job`` and
``record`` (the record's ``records.jsonl`` line).

Invariants:

- The actor resolves every run's profile itself, in its constructor
  (``run.resolve.resolve_profile``): every lock is read, materialised and
  verified on the actor's own node; nothing is trusted from the driver's
  paths. A run whose artifact tree hash is not the one the driver pinned is
  refused there (``ProvenanceError`` naming the node and the run).
- The hf thread count is the actor's own CPU allotment
  (``ray.get_runtime_context().get_assigned_resources()["CPU"]``, rounded
  down, at least 1) when the profile said ``"auto"``; it is part of the
  provenance, so an allotment that differs from the driver's plan is refused.
- Before taking work of a run it builds that run's runner and provenance
  (``describe()``, package versions, artifact tree hash, ...) and compares it
  with the driver's: any difference raises ``ProvenanceError`` naming the
  node and every differing field (for a single run, in ``__init__``; for
  the runs of a sweep, when the actor's first unit of that run arrives; the
  previous runner is closed first, so an actor holds one model at a time
  and loads only the models of the runs it is given units of).
- A unit is processed exactly as one ``--workers`` shard is by
  ``pipeline.run_cohort``: rows rendered and tokenized, sorted by prompt
  length when the profile says so, generated in chunks of the backend's
  chunk size (``attempts.generate_chunk``), one record per row
  (``attempts.make_record``). The actor never writes to the run directory.
- Its first act is to register its own handle with the driver's
  ``PoolRegistry`` (when given one), so the driver can kill it when the job
  fails. With a ``log_level`` (the driver's root level) its log records
  (ours and the libraries', one INFO line per unit) are also kept and sent
  through the registry at the end of the constructor and of every unit,
  failed or not; the driver replays them into its stderr and ``run.log``.
- A prompt that renders differently from the driver's is a ``ProvenanceError``
  naming the row. Any other exception in a unit fails it with the row named:
  a chunk that raises is generated again one row at a time to find the row.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from guardrepro import logs
from guardrepro.errors import GuardreproError, InferenceError, ProvenanceError
from guardrepro.run.attempts import PreparedRow, generate_chunk, make_record
from guardrepro.run.profile import RunProfile
from guardrepro.rundir.manifest import provenance_differences
from guardrepro.rundir.records import record_line
from guardrepro.schema import CohortRow

log = logging.getLogger(__name__)


def node_name() -> str:
    """This process's Ray node id and host name (for messages)."""
    import ray

    return f"{ray.get_runtime_context().get_node_id()[:12]} ({socket.gethostname()})"


def allotted_threads() -> int:
    """The CPUs Ray assigned to this actor, rounded down, at least 1."""
    import ray

    cpus = ray.get_runtime_context().get_assigned_resources().get("CPU", 1.0)
    return max(1, int(cpus))


def actor_profile(profile: RunProfile, threads_from_allotment: bool) -> RunProfile:
    """The profile this actor runs: threads (a backend that declares the option:
    hf) from its own CPU allotment."""
    if threads_from_allotment and "threads" in profile.descriptor.options.names:
        return profile.with_backend_options(threads=allotted_threads())
    return profile


class PoolRegistry:
    """A zero-CPU Ray actor the driver starts per job: every pool actor hands it
    its own handle first thing in its constructor, so that the driver can kill
    the job's actors itself (``ray.kill``) when the job fails, rather than
    relying on Ray Data to release an actor that was busy with another unit.
    It also holds the log records the actors send (``logs.as_entry`` dicts)
    until the driver takes them for its stderr and ``run.log``."""

    def __init__(self) -> None:
        self.handles: list[Any] = []
        self.entries: list[dict[str, Any]] = []

    def add(self, handle: Any) -> None:
        self.handles.append(handle)

    def take(self) -> list[Any]:
        handles, self.handles = self.handles, []
        return handles

    def log(self, entries: list[dict[str, Any]]) -> None:
        self.entries.extend(entries)

    def take_logs(self) -> list[dict[str, Any]]:
        entries, self.entries = self.entries, []
        return entries


@dataclass(frozen=True)
class JobSpec:
    """What an actor knows of one run of the pool (``ray_pool.PoolJob.spec``)."""

    profile: RunProfile
    provenance: Mapping[str, Any]
    run_id: str
    cohort_path: str
    run_dir: str
    threads_from_allotment: bool
    pinned_tree_sha256: str | None = None


class _Job:
    """One run as this actor sees it: its spec, its profile resolved (its
    artifact materialised and verified) on this node, its backend's chunk size."""

    def __init__(self, spec: JobSpec, home: str | None) -> None:
        from guardrepro.run.resolve import resolve_profile
        from guardrepro.run.runners.registry import chunk_size

        self.spec = spec
        self.profile = actor_profile(spec.profile, spec.threads_from_allotment)
        self.resolved = resolve_profile(self.profile, home=home)  # verified on this node
        pinned = spec.pinned_tree_sha256
        if pinned is not None and self.resolved.tree_sha256 != pinned:
            raise ProvenanceError(
                f"Ray actor on node {node_name()} (pid {os.getpid()}) refuses run "
                f"{spec.run_dir}: its artifact hashes to {self.resolved.tree_sha256[:12]}... "
                f"here, not the pinned {pinned[:12]}...")
        self.chunk = chunk_size(self.profile.descriptor, self.profile.backend_options)

    def open(self) -> tuple[Any, Any]:
        """(runner, provenance) of this run on this node; ``ProvenanceError``
        (runner closed) when the provenance is not the driver's."""
        from guardrepro.run.pipeline import _create_runner, build_provenance

        runner = _create_runner(self.profile, self.resolved)
        own = build_provenance(self.resolved, runner, self.resolved.tree_sha256)
        diffs = provenance_differences(dict(self.spec.provenance), own.to_dict())
        if diffs:
            runner.close()
            raise ProvenanceError(
                f"Ray actor on node {node_name()} (pid {os.getpid()}) refuses to run "
                f"{self.spec.run_dir}: its provenance differs from the driver's "
                f"(driver != actor): {'; '.join(diffs)}")
        return runner, own

    def prepare(self, rows: Sequence[CohortRow], expected: Sequence[str]) -> list[PreparedRow]:
        from guardrepro.run.pipeline import prepare_rows

        cohort = self.spec.cohort_path
        prepared = prepare_rows(self.resolved.guard, self.resolved.tokenizer, rows,
                                self.profile.decoding.max_new_tokens, cohort_path=cohort)
        for p, want in zip(prepared, expected, strict=True):
            if p.input_sha256 != want:
                raise ProvenanceError(
                    f"{cohort}: row {p.row.row_id!r}: the prompt rendered on node "
                    f"{node_name()} (input_sha256 {p.input_sha256[:12]}...) is not the "
                    f"driver's ({want[:12]}...)")
        return prepared

    def generate(self, runner: Any, chunk: Sequence[PreparedRow], unit: int) -> dict[str, Any]:
        """``generate_chunk``; an exception names the row it came from."""
        decode = self.resolved.tokenizer.decode
        guard, params = self.resolved.guard, self.profile.decoding
        try:
            return generate_chunk(runner, guard, chunk, params, decode)
        except GuardreproError:
            raise
        except Exception as exc:
            culprit = [p.row.row_id for p in chunk]
            if len(chunk) > 1:  # find the row: one at a time (the unit fails anyway)
                for p in chunk:
                    try:
                        generate_chunk(runner, guard, [p], params, decode)
                    except Exception:
                        culprit = [p.row.row_id]
                        break
            raise InferenceError(
                f"{self.spec.cohort_path}: unit {unit}: row {culprit[0]!r}"
                f"{' (or another of its chunk)' if len(culprit) > 1 else ''} failed on "
                f"node {node_name()} (run {self.spec.run_dir}): {type(exc).__name__}: "
                f"{exc}") from exc


def adopt_transformers(profiles: Sequence[RunProfile]) -> None:
    """When a run loads a checkpoint's tokenizer (every backend with a model),
    import transformers' logging now and route it to the root logger, so that
    its records from the tokenizer and model loads reach this process's
    handlers (the actor's buffer; the driver's stderr and run.log)."""
    if any(profile.descriptor.needs_model for profile in profiles):
        import transformers.utils.logging  # noqa: F401

        logs.adopt_libraries()


class UnitActor:
    """Runs units for the driver (see the module docstring)."""

    def __init__(self, jobs: Sequence[Mapping[str, Any]], home: str | None,
                 registry: Any = None, log_level: int | None = None) -> None:
        self.registry = registry
        self.logs: logs.BufferHandler | None = None
        if registry is not None:  # before anything that can fail or take long
            import ray

            ray.get(registry.add.remote(ray.get_runtime_context().current_actor))
            if log_level is not None:  # records go to the driver's run.log too
                self.logs = logs.to_buffer(log_level)
                adopt_transformers([spec["profile"] for spec in jobs])
        self.current: int | None = None
        self.runner: Any = None
        self.provenance: Any = None
        try:
            self.jobs = [_Job(JobSpec(**spec), home) for spec in jobs]  # every artifact first
            if len(self.jobs) == 1:  # one run: its provenance is checked here, before a unit
                self._switch(0)
        finally:
            self._send_logs()

    def _send_logs(self) -> None:
        """The records logged here since the last call, to the driver (through
        the registry; waited for, so they arrive before this unit's records)."""
        if self.logs is None:
            return
        entries = self.logs.take()
        if entries:
            import ray

            # a registry already killed (the job is over) has no one to pass them
            # to, and the unit's own outcome must not be masked by that
            with contextlib.suppress(ray.exceptions.RayError):
                ray.get(self.registry.log.remote(entries))

    def _switch(self, index: int) -> _Job:
        """Job ``index``, its runner held (one runner at a time)."""
        if index != self.current:
            if self.runner is not None:
                self.runner.close()
                self.runner = None
            self.runner, self.provenance = self.jobs[index].open()
            self.current = index
        return self.jobs[index]

    def __call__(self, batch: Any) -> Any:
        try:
            return self._unit(batch)
        finally:
            self._send_logs()

    def _unit(self, batch: Any) -> Any:
        import pyarrow as pa

        tags = sorted(set(zip(batch.column("job").to_pylist(),
                              batch.column("unit").to_pylist(), strict=True)))
        if len(tags) != 1:
            raise InferenceError(f"a Ray block holds (job, unit) {tags}; one block must be "
                                 "one unit (batch_size=None over one block per unit)")
        index, unit = tags[0]
        job = self._switch(index)
        rows = [CohortRow.from_dict(json.loads(text), file=job.spec.cohort_path)
                for text in batch.column("row").to_pylist()]
        todo = job.prepare(rows, batch.column("input_sha256").to_pylist())
        if job.profile.sort_by_length:
            todo.sort(key=lambda p: len(p.token_ids))
        ids: list[str] = []
        lines: list[str] = []
        for start in range(0, len(todo), job.chunk):
            chunk = todo[start : start + job.chunk]
            history = job.generate(self.runner, chunk, unit)
            for p in chunk:
                record = make_record(job.spec.run_id, p, history[p.row.row_id],
                                     self.provenance, self.provenance.sha256)
                ids.append(p.row.row_id)
                lines.append(record_line(record))
        log.info("unit %d of run %s: %d row(s) generated on node %s", unit, job.spec.run_dir,
                 len(ids), node_name())
        return pa.table({"row_id": pa.array(ids, pa.string()),
                         "job": pa.array([index] * len(ids), pa.int64()),
                         "record": pa.array(lines, pa.string())})
