"""The actor of ``guardrepro run --engine ray``: one runner per Ray actor.

Input (constructor): the run profile the driver resolved (hf threads already
fixed), the cache home, the driver's provenance (``Provenance.to_dict()``),
the run id, the cohort path (for messages) and whether the hf thread count
comes from the actor's CPU allotment. Input (per call): one Ray block = one
unit, a ``pyarrow.Table`` with columns ``unit`` (1-based), ``row`` (the
cohort row's JSON object) and ``input_sha256`` (the driver's hash of the
rendered prompt). Output (per call): a table with columns ``row_id`` and
``record`` (the record's ``records.jsonl`` line).

Invariants:

- The actor resolves the profile itself (``run.resolve.resolve_profile``):
  every lock is read, materialised and verified on the actor's own node;
  nothing is trusted from the driver's paths.
- The hf thread count is the actor's own CPU allotment
  (``ray.get_runtime_context().get_assigned_resources()["CPU"]``, rounded
  down, at least 1) when the profile said ``"auto"``; it is part of the
  provenance, so an allotment that differs from the driver's plan is refused.
- Before taking work it builds its runner and provenance (``describe()``,
  package versions, artifact tree hash, ...) and compares it with the
  driver's: any difference raises ``ProvenanceError`` in ``__init__``, naming
  the node and every differing field.
- A unit is processed exactly as one ``--workers`` shard is by
  ``pipeline.run_cohort``: rows rendered and tokenized, sorted by prompt
  length when the profile says so, generated in chunks of the backend's
  chunk size (``attempts.generate_chunk``), one record per row
  (``attempts.make_record``). The actor never writes to the run directory.
- Its first act is to register its own handle with the driver's
  ``PoolRegistry`` (when given one), so the driver can kill it when the job
  fails.
- A prompt that renders differently from the driver's is a ``ProvenanceError``
  naming the row. Any other exception in a unit fails it with the row named:
  a chunk that raises is generated again one row at a time to find the row.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Mapping, Sequence
from typing import Any

from guardrepro.errors import GuardreproError, InferenceError, ProvenanceError
from guardrepro.run.attempts import PreparedRow, generate_chunk, make_record
from guardrepro.run.profile import RunProfile
from guardrepro.run.records import provenance_differences, record_line
from guardrepro.schema import CohortRow


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
    """The profile this actor runs: hf threads from its own CPU allotment."""
    if threads_from_allotment and profile.backend == "hf":
        return profile.with_backend_options(threads=allotted_threads())
    return profile


class PoolRegistry:
    """A zero-CPU Ray actor the driver starts per job: every pool actor hands it
    its own handle first thing in its constructor, so that the driver can kill
    the job's actors itself (``ray.kill``) when the job fails, rather than
    relying on Ray Data to release an actor that was busy with another unit."""

    def __init__(self) -> None:
        self.handles: list[Any] = []

    def add(self, handle: Any) -> None:
        self.handles.append(handle)

    def take(self) -> list[Any]:
        handles, self.handles = self.handles, []
        return handles


class UnitActor:
    """Runs units for the driver (see the module docstring)."""

    def __init__(self, profile: RunProfile, home: str | None, provenance: Mapping[str, Any],
                 run_id: str, cohort_path: str, threads_from_allotment: bool,
                 registry: Any = None) -> None:
        from guardrepro.run.pipeline import _create_runner, build_provenance
        from guardrepro.run.resolve import resolve_profile
        from guardrepro.run.runners.registry import chunk_size

        if registry is not None:  # before anything that can fail or take long
            import ray

            ray.get(registry.add.remote(ray.get_runtime_context().current_actor))
        self.profile = actor_profile(profile, threads_from_allotment)
        self.resolved = resolve_profile(self.profile, home=home)  # verified on this node
        self.runner = _create_runner(self.profile, self.resolved)
        own = build_provenance(self.resolved, self.runner, self.resolved.tree_sha256)
        diffs = provenance_differences(dict(provenance), own.to_dict())
        if diffs:
            self.runner.close()
            listing = "; ".join(diffs)
            raise ProvenanceError(
                f"Ray actor on node {node_name()} (pid {os.getpid()}) refuses to run: its "
                f"provenance differs from the driver's (driver != actor): {listing}")
        self.provenance = own
        self.run_id = run_id
        self.cohort_path = cohort_path
        self.chunk = chunk_size(self.profile.backend, self.profile.backend_options)

    def _prepare(self, rows: Sequence[CohortRow], expected: Sequence[str]) -> list[PreparedRow]:
        from guardrepro.run.pipeline import prepare_rows

        prepared = prepare_rows(self.resolved.guard, self.resolved.tokenizer, rows,
                                self.profile.decoding.max_new_tokens,
                                cohort_path=self.cohort_path)
        for p, want in zip(prepared, expected, strict=True):
            if p.input_sha256 != want:
                raise ProvenanceError(
                    f"{self.cohort_path}: row {p.row.row_id!r}: the prompt rendered on node "
                    f"{node_name()} (input_sha256 {p.input_sha256[:12]}...) is not the "
                    f"driver's ({want[:12]}...)")
        return prepared

    def _generate(self, chunk: Sequence[PreparedRow], unit: int) -> dict[str, Any]:
        """``generate_chunk``; an exception names the row it came from."""
        decode = self.resolved.tokenizer.decode
        guard, params = self.resolved.guard, self.profile.decoding
        try:
            return generate_chunk(self.runner, guard, chunk, params, decode)
        except GuardreproError:
            raise
        except Exception as exc:
            culprit = [p.row.row_id for p in chunk]
            if len(chunk) > 1:  # find the row: one at a time (the unit fails anyway)
                for p in chunk:
                    try:
                        generate_chunk(self.runner, guard, [p], params, decode)
                    except Exception:
                        culprit = [p.row.row_id]
                        break
            raise InferenceError(
                f"{self.cohort_path}: unit {unit}: row {culprit[0]!r}"
                f"{' (or another of its chunk)' if len(culprit) > 1 else ''} failed on "
                f"node {node_name()}: {type(exc).__name__}: {exc}") from exc

    def __call__(self, batch: Any) -> Any:
        import pyarrow as pa

        units = sorted(set(batch.column("unit").to_pylist()))
        if len(units) != 1:
            raise InferenceError(f"a Ray block holds units {units}; one block must be one "
                                 "unit (batch_size=None over one block per unit)")
        rows = [CohortRow.from_dict(json.loads(text), file=self.cohort_path)
                for text in batch.column("row").to_pylist()]
        todo = self._prepare(rows, batch.column("input_sha256").to_pylist())
        if self.profile.sort_by_length:
            todo.sort(key=lambda p: len(p.token_ids))
        ids: list[str] = []
        lines: list[str] = []
        for start in range(0, len(todo), self.chunk):
            chunk = todo[start : start + self.chunk]
            history = self._generate(chunk, units[0])
            for p in chunk:
                record = make_record(self.run_id, p, history[p.row.row_id], self.provenance,
                                     self.provenance.sha256)
                ids.append(p.row.row_id)
                lines.append(record_line(record))
        return pa.table({"row_id": pa.array(ids, pa.string()),
                         "record": pa.array(lines, pa.string())})
