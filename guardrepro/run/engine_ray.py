"""``guardrepro run --engine ray``: a run's units on a Ray actor pool.

Input: a run profile, a cohort file, a run directory and ``RayOptions``
(workers = actors, units, cluster address, CPUs/GPUs per actor); or, for
``run_many`` (``sweep --engine ray``), several ``RunRequest``s, each with the
artifact tree hash pinned for it. Output: ordinary run directories
(``manifest.json``, ``records.jsonl`` in cohort order) and a
``pipeline.RunSummary`` each. docs/SCALE.md is the user's guide; the pool
itself is ``run.ray_pool``.

Invariants:

- The driver owns the record store: it takes the run directory's lock
  (``records.RecordWriter``), resolves and verifies the profile once, builds
  the provenance (with a runner of its own, closed before Ray starts),
  writes or checks the manifest exactly as ``pipeline.run_cohort`` does
  (shard ``None``), and computes the rows still to do: selected minus
  recorded. Actors never write to the run directory.
- The rows to do are split into ``units`` units by the rule that splits
  ``run --workers``' rows (``run.balance``: balanced on the rows' sizes,
  deterministic; each unit in cohort order) and each unit is one Ray block,
  handed whole to one actor (``map_batches(batch_size=None)`` over an
  ``ActorPoolStrategy`` of ``workers`` actors, at most one unit in flight per
  actor). Batch composition therefore depends only on the row set and the
  unit count: with ``units == workers`` the records are those of ``run
  --workers N``.
- hf threads ``"auto"`` become ``cpus_per_worker`` (as ``--workers`` makes
  them cores / N); each actor sets them from its own CPU allotment and
  refuses (``ProvenanceError`` in its constructor) when its provenance is
  not the driver's (``run.ray_actor``).
- ``run_many`` plans every run first (each its own writer, lock and
  manifest, all held at once; a pinned hash that the driver's own verified
  artifact does not match is a ``ProvenanceError``), then feeds all their
  units to one pool in one Ray job (``ray_pool.dispatch``); every run is
  rewritten in cohort order at the end, even after a failure. A run refused
  before its first record leaves nothing (``RecordWriter(refused_leaves=)``).
- Each returned record is checked (provenance hash, a row of this run, the
  driver's ``input_sha256``) and appended, one line each, with the
  writer. A row that arrives again (a retried unit) is compared on its
  deterministic fields (everything but ``timings``, ``created_at`` and
  ``peak_memory_bytes``): identical, it is dropped; different, the run stops
  with ``NondeterminismError`` and nothing is written twice. Once every
  selected row has a record the file is rewritten in cohort order.
- Ray's failures: a killed actor or node is restarted and its unit retried
  by Ray; an exception in a unit is not retried and fails the run, with the
  guardrepro error the actor raised (it names the row) re-raised here. What
  was appended stays; the same command (either engine) resumes.
- Every actor of a job registers its handle with a per-job
  ``ray_actor.PoolRegistry``; when the job ends the driver kills them all
  (``ray.kill``) and, after a failure, waits (bounded) for their CPUs, so a
  Ray that outlives the run is never left with a busy actor of a failed job.
- Without ``address`` and without a Ray already initialised in this
  process, the driver starts a local Ray with ``workers * cpus_per_worker``
  CPUs and its own temporary directory (``<run>/.ray`` when Unix socket
  paths under it fit in 107 bytes, else a fresh ``guardrepro-ray-*``
  directory in the system temp dir; never the shared ``/tmp/ray``), and
  shuts it down at the end; that directory is removed after a run that
  completes. A Ray it did not start is left running.
"""

from __future__ import annotations

import logging
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from guardrepro import errors
from guardrepro.artifacts.nofollow import make_dirs
from guardrepro.errors import InputError, ProvenanceError
from guardrepro.guards.registry import record_parser
from guardrepro.run.profile import RunProfile
from guardrepro.run.ray_actor import adopt_transformers
from guardrepro.run.ray_pool import PoolJob, PoolShape, dispatch
from guardrepro.rundir.cohort import read_cohort
from guardrepro.rundir.manifest import MANIFEST_FILE, RunManifest
from guardrepro.rundir.records import RECORDS_FILE, RecordWriter
from guardrepro.schema import CohortRow

log = logging.getLogger(__name__)

SOCKET_ROOM = 75  # bytes Ray appends to its temp dir for a socket path
UNIX_PATH_MAX = 107


@dataclass(frozen=True)
class RayOptions:
    """How to run on Ray: ``workers`` actors, ``units`` units (default: workers),
    ``address`` (``ray.init(address=...)``; None: a local Ray), CPUs and GPUs per
    actor (CPUs default: physical cores / workers, as ``--workers``)."""

    workers: int
    units: int | None = None
    address: str | None = None
    cpus_per_worker: float | None = None
    gpus_per_worker: float = 0.0

    def checked(self) -> RayOptions:
        from guardrepro.run.workers import physical_cores

        if self.workers < 1:
            raise InputError(f"workers must be >= 1, got {self.workers}", field="workers")
        units = self.workers if self.units is None else self.units
        if units < 1:
            raise InputError(f"units must be >= 1, got {units}", field="units")
        cpus = self.cpus_per_worker
        if cpus is None:
            cpus = float(max(1, physical_cores() // self.workers))
        if cpus <= 0 or self.gpus_per_worker < 0:
            raise InputError("CPUs per worker must be > 0 and GPUs per worker >= 0",
                             field="cpus_per_worker")
        return RayOptions(self.workers, units, self.address, cpus, self.gpus_per_worker)


def ray_profile(profile: RunProfile, cpus_per_worker: float) -> tuple[RunProfile, bool]:
    """(the profile the actors run, whether their threads come from their CPU
    allotment; a backend that declares the option ``threads``: hf): threads
    ``"auto"``/unset become the CPUs per worker."""
    if "threads" not in profile.descriptor.options.names:
        return profile, False
    threads = profile.backend_options.get("threads")
    if threads is None or threads == "auto":
        return profile.with_backend_options(threads=max(1, int(cpus_per_worker))), True
    return profile, False


def _temp_dir(run_dir: Path) -> tuple[Path, bool]:
    """(Ray's temporary directory for this run, whether it lies inside the run)."""
    inside = run_dir / ".ray"
    if len(str(inside)) + SOCKET_ROOM <= UNIX_PATH_MAX:
        make_dirs(inside, trusted=run_dir)  # a planted symlink there is refused
        return inside, True
    return Path(tempfile.mkdtemp(prefix="guardrepro-ray-")), False


@contextmanager
def _handlers_kept() -> Iterator[None]:
    """The SIGTERM and SIGHUP handlers as they were before the block (``ray.init``
    installs its own, which exits with status 15): a signal to the driver stays an
    interruption (``cli.interrupts``: exit 143 or 129, the local Ray shut down)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    kept = {n: signal.getsignal(n) for n in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for number, handler in kept.items():
            if handler is not None:
                signal.signal(number, handler)


@contextmanager
def ray_session(options: RayOptions, run_dir: Path) -> Iterator[Any]:
    """``ray`` connected (see the module docstring); shut down when started here."""
    try:
        import ray
    except ImportError as exc:
        raise errors.missing_extra("run --engine ray", "ray", "ray") from exc
    if ray.is_initialized():
        yield ray
        return
    common: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                              "logging_level": "WARNING"}
    temp: Path | None = None
    with _handlers_kept():  # ray.init's SIGTERM handler would exit 15, skipping ours
        if options.address is not None:
            ray.init(address=options.address, **common)
        else:
            temp, _ = _temp_dir(run_dir)
            cpus = options.workers * float(options.cpus_per_worker or 1)
            ray.init(num_cpus=max(1, int(cpus)), num_gpus=int(options.workers *
                     options.gpus_per_worker), object_store_memory=256 * 1024**2,
                     _temp_dir=str(temp), **common)
    completed = False
    try:
        yield ray
        completed = True
    finally:
        ray.shutdown()
        if temp is not None and completed:
            shutil.rmtree(temp, ignore_errors=True)


@dataclass(frozen=True)
class _Plan:
    profile: RunProfile
    threads_from_allotment: bool
    manifest: RunManifest
    provenance: Any
    rows: list[CohortRow]
    rows_all: int
    todo: list[Any]
    already: int


@dataclass(frozen=True)
class RunRequest:
    """One run for ``run_many``: its profile, cohort and directory, the artifact
    tree hash pinned for it (``None``: whatever its lock verifies to) and the
    row limit."""

    profile: RunProfile
    cohort: Path
    run_dir: Path
    pinned_tree_sha256: str | None = None
    limit: int | None = None


def _plan(writer: RecordWriter, profile: RunProfile, threads_from_allotment: bool,
          request: RunRequest, home: str | Path | None) -> _Plan:
    """Resolve once, build the provenance, settle the manifest, list the rows to do."""
    from guardrepro.run.pipeline import (
        _check_existing,
        _create_runner,
        _existing_manifest,
        _settle_manifest,
        build_provenance,
        prepare_rows,
    )
    from guardrepro.run.prepare import mismatched_prompts
    from guardrepro.run.resolve import resolve_profile

    cohort, run_dir, limit = request.cohort, request.run_dir, request.limit
    adopt_transformers([profile])  # its records from the loads below reach run.log
    rows = read_cohort(cohort)
    scope = rows if limit is None else rows[:limit]
    existing = _existing_manifest(writer, run_dir)
    resolved = resolve_profile(profile, home=home)  # read and verified once, here
    pinned = request.pinned_tree_sha256
    if pinned is not None and resolved.tree_sha256 != pinned:
        raise ProvenanceError(f"run {run_dir}: the artifact of {profile.path} hashes to "
                              f"{resolved.tree_sha256[:12]}..., not the pinned "
                              f"{pinned[:12]}...")
    prepared = prepare_rows(resolved.guard, resolved.tokenizer, scope,
                            profile.decoding.max_new_tokens, cohort_path=cohort)
    runner = _create_runner(profile, resolved)
    try:
        provenance = build_provenance(resolved, runner, resolved.tree_sha256)
    finally:
        runner.close()
    from guardrepro.run.guard_facts import guard_facts

    facts = guard_facts(resolved, scope[:1])
    manifest = _settle_manifest(existing, run_dir, provenance, profile, cohort, len(rows),
                                None, len(rows), guard_spec=facts)
    _check_existing(writer, {r.row_id for r in rows}, None,
                    mismatched_prompts(writer.records, prepared), provenance.sha256)
    todo = [p for p in prepared if p.row.row_id not in writer.records]
    return _Plan(profile, threads_from_allotment, manifest, provenance, rows, len(rows), todo,
                 len(prepared) - len(todo))


def _pool_job(writer: RecordWriter, plan: _Plan, request: RunRequest) -> PoolJob:
    return PoolJob(writer, plan.todo, plan.manifest.provenance_sha256, {
        "profile": plan.profile, "provenance": plan.provenance.to_dict(),
        "run_id": plan.manifest.run_id, "cohort_path": str(request.cohort),
        "run_dir": str(request.run_dir), "threads_from_allotment": plan.threads_from_allotment,
        "pinned_tree_sha256": request.pinned_tree_sha256})


def run_many(requests: Sequence[RunRequest], *, options: RayOptions, progress: bool = True,
             home: str | Path | None = None, session_dir: Path | None = None,
             label: str | None = None) -> list[Any]:
    """Run (or resume) every request in one actor pool of one Ray job (see the
    module docstring and ``ray_pool``); a ``RunSummary`` per request, in order.
    Ray's temporary directory goes under ``session_dir`` (default: the first
    run's directory); ``label`` names the progress bar and the job in errors."""
    from guardrepro.run.doctor import preflight
    from guardrepro.run.pipeline import RunSummary

    started = time.perf_counter()
    opts = options.checked()
    assert opts.cpus_per_worker is not None and opts.units is not None
    with ExitStack() as stack:
        plans: list[tuple[RecordWriter, _Plan]] = []
        for request in requests:
            if request.limit is not None and request.limit < 0:
                raise InputError(f"limit must be >= 0, got {request.limit}", field="limit")
            shared, from_allotment = ray_profile(request.profile, opts.cpus_per_worker)
            preflight(shared)
            writer = stack.enter_context(  # refused before a record: nothing left behind
                RecordWriter(request.run_dir, refused_leaves=(MANIFEST_FILE,),
                             parsers=record_parser))
            plans.append((writer, _plan(writer, shared, from_allotment, request, home)))
        jobs = [_pool_job(w, p, r) for (w, p), r in zip(plans, requests, strict=True) if p.todo]
        bar = label or f"run {plans[0][1].manifest.run_id} (ray)"
        shape = PoolShape(opts.workers, opts.units, opts.cpus_per_worker, opts.gpus_per_worker)
        generation_started = time.time()
        try:
            if jobs:
                with ray_session(opts, session_dir or requests[0].run_dir) as ray:
                    generation_started = time.time()  # Ray up; actors start within the span
                    dispatch(ray, jobs, shape, home, progress, bar,
                             label or f"run {requests[0].run_dir}")
        finally:  # cohort order even for a partial run, so either engine resumes it
            for writer, plan in plans:
                writer.rewrite_in_order([r.row_id for r in plan.rows])
        generation_finished = time.time()
        summaries = []
        for writer, plan in plans:
            counts = dict(writer.records.status_counts)  # all of selected rows (checked)
            summaries.append(RunSummary(
                run_dir=writer.run_dir, run_id=plan.manifest.run_id,
                rows_in_cohort=plan.rows_all, rows_selected=len(plan.rows),
                already_done=plan.already, generated=len(plan.todo),
                remaining=len(plan.rows) - sum(counts.values()), counts=counts,
                elapsed_s=time.perf_counter() - started, generation_started=generation_started,
                generation_finished=generation_finished))
        return summaries


def run_on_ray(
    profile: RunProfile,
    cohort_path: str | Path,
    run_dir: str | Path,
    *,
    options: RayOptions,
    limit: int | None = None,
    progress: bool = True,
    home: str | Path | None = None,
) -> Any:
    """Run (or resume) the cohort on Ray (see the module docstring); a ``RunSummary``.
    Its start, progress lines, every actor's log records and its summary go to
    ``<run_dir>/run.log``, as for ``--engine local`` (a run refused before its
    first record leaves no run.log)."""
    from guardrepro.logs import run_log
    from guardrepro.run.workers import LOG_FILE, log_summary
    from guardrepro.rundir.leftovers import refused_leaves_nothing

    request = RunRequest(profile, Path(cohort_path).resolve(), Path(run_dir).resolve(),
                         limit=limit)
    out, shape = request.run_dir, options.checked()
    with refused_leaves_nothing(out, LOG_FILE, records=[out / RECORDS_FILE]), run_log(
            out / LOG_FILE):
        log.info("run %s: profile %s, cohort %s, ray engine, %d worker(s), %d unit(s)%s",
                 out, profile.name, request.cohort, shape.workers, shape.units,
                 "" if limit is None else f", first {limit} rows")
        summary = run_many([request], options=options, progress=progress, home=home)[0]
        log_summary(summary)
    return summary
