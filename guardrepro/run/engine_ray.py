"""``guardrepro run --engine ray``: one run, its units on a Ray actor pool.

Input: a run profile, a cohort file, a run directory and ``RayOptions``
(workers = actors, units, cluster address, CPUs/GPUs per actor). Output: an
ordinary run directory (``manifest.json``, ``records.jsonl`` in cohort
order) and a ``pipeline.RunSummary``. docs/SCALE.md is the user's guide.

Invariants:

- The driver owns the record store: it takes the run directory's lock
  (``records.RecordWriter``), resolves and verifies the profile once, builds
  the provenance (with a runner of its own, closed before Ray starts),
  writes or checks the manifest exactly as ``pipeline.run_cohort`` does
  (shard ``None``), and computes the rows still to do: selected minus
  recorded. Actors never write to the run directory.
- The rows to do are split into ``units`` units by the project's shard rule
  (unit ``k`` = the rows with ``shard.shard_of(row_id, units) == k``, cohort
  order) and each unit is one Ray block, handed whole to one actor
  (``map_batches(batch_size=None)`` over an ``ActorPoolStrategy`` of
  ``workers`` actors, at most one unit in flight per actor). Batch
  composition therefore depends only on the row set and the unit count:
  with ``units == workers`` the records are those of ``run --workers N``.
- hf threads ``"auto"`` become ``cpus_per_worker`` (as ``--workers`` makes
  them cores / N); each actor sets them from its own CPU allotment and
  refuses (``ProvenanceError`` in its constructor) when its provenance is
  not the driver's (``run.ray_actor``).
- Each returned record is checked (provenance hash, a row of this run, the
  driver's ``input_sha256``) and appended, one fsync'd line, with the
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

import gc
import json
import re
import shutil
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from guardrepro import errors
from guardrepro.errors import GuardreproError, InferenceError, InputError, ProvenanceError
from guardrepro.run.profile import RunProfile
from guardrepro.run.records import RecordWriter, RunManifest
from guardrepro.run.shard import shard_of
from guardrepro.schema import CohortRow, Record, read_cohort

# Fields that may differ between two generations of the same row.
TIMING_FIELDS = ("timings", "created_at", "peak_memory_bytes")
SOCKET_ROOM = 75  # bytes Ray appends to its temp dir for a socket path
UNIX_PATH_MAX = 107


class NondeterminismError(InferenceError):
    """A row generated twice (a retried unit) came back with different outputs."""


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
    """(the profile the actors run, whether their hf threads come from their
    CPU allotment): threads ``"auto"``/unset become the CPUs per worker."""
    if profile.backend != "hf":
        return profile, False
    threads = profile.backend_options.get("threads")
    if threads is None or threads == "auto":
        return profile.with_backend_options(threads=max(1, int(cpus_per_worker))), True
    return profile, False


def deterministic(record: Record) -> dict[str, Any]:
    """The record's fields that a deterministic rerun must reproduce."""
    data = record.to_dict()
    for name in TIMING_FIELDS:
        data.pop(name, None)
    return data


def accept(writer: RecordWriter, record: Record, *, provenance_sha256: str,
           expected: Mapping[str, str]) -> bool:
    """Append ``record`` (True), or drop an identical duplicate (False)."""
    if record.provenance_sha256 != provenance_sha256:
        raise ProvenanceError(f"{writer.path}: a Ray actor returned row {record.row_id!r} "
                              f"with provenance {record.provenance_sha256[:12]}..., this run "
                              f"{provenance_sha256[:12]}...")
    if expected.get(record.row_id) != record.input_sha256:
        raise ProvenanceError(f"{writer.path}: a Ray actor returned row {record.row_id!r}, "
                              "which is not a row to do in this run or has another prompt")
    known = writer.records.get(record.row_id)
    if known is None:
        writer.append(record)
        return True
    old, new = deterministic(known), deterministic(record)
    if old != new:
        fields = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
        raise NondeterminismError(
            f"{writer.path}: row {record.row_id!r} was generated twice (a retried Ray unit) "
            f"with different results in {fields}; the first record is kept, nothing else is "
            "written. The backend is not deterministic under retry: see docs/SCALE.md")
    return False


def split_units(rows: Sequence[Any], units: int) -> list[list[Any]]:
    """Unit ``k`` (index ``k - 1``): the rows with ``shard_of(row_id, units) == k``."""
    out: list[list[Any]] = [[] for _ in range(units)]
    for item in rows:
        out[shard_of(item.row.row_id, units) - 1].append(item)
    return out


def _temp_dir(run_dir: Path) -> tuple[Path, bool]:
    """(Ray's temporary directory for this run, whether it lies inside the run)."""
    inside = run_dir / ".ray"
    if len(str(inside)) + SOCKET_ROOM <= UNIX_PATH_MAX:
        inside.mkdir(parents=True, exist_ok=True)
        return inside, True
    return Path(tempfile.mkdtemp(prefix="guardrepro-ray-")), False


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


def _unit_tables(units: Sequence[Sequence[Any]]) -> list[Any]:
    import pyarrow as pa

    tables = []
    for k, unit in enumerate(units, start=1):
        if unit:
            tables.append(pa.table({
                "unit": pa.array([k] * len(unit), pa.int64()),
                "row": pa.array([json.dumps(p.row.to_dict(), sort_keys=True) for p in unit],
                                pa.string()),
                "input_sha256": pa.array([p.input_sha256 for p in unit], pa.string()),
            }))
    return tables


_RAISED = re.compile(r"^guardrepro\.errors\.(\w+): (.*)$", re.MULTILINE)


def _guardrepro_cause(exc: BaseException) -> GuardreproError | None:
    """The guardrepro error an actor raised, from the Ray exception around it.

    Ray re-raises an actor's exception as a ``RayTaskError`` whose cause does
    not survive (``UserCodeException`` from Ray Data), but whose text holds the
    actor's traceback: its first ``guardrepro.errors.<Class>: <message>`` line
    is the root cause."""
    if isinstance(exc, GuardreproError) and not isinstance(exc, ray_error_types()):
        return exc
    match = _RAISED.search(str(exc))
    if match is None:
        return None
    cls = getattr(errors, match.group(1), None)
    if isinstance(cls, type) and issubclass(cls, GuardreproError):
        try:
            return cls(match.group(2))
        except TypeError:
            pass
    return InferenceError(f"{match.group(1)}: {match.group(2)}")


def ray_error_types() -> tuple[type[BaseException], ...]:
    import ray

    return (ray.exceptions.RayError,)


def _translated(exc: Exception, run_dir: Path) -> GuardreproError:
    """The guardrepro error to raise for a failure of the Ray job (the actor's
    own error when there is one), naming the run."""
    cause = _guardrepro_cause(exc)
    if cause is not None:
        return type(cause)(f"run {run_dir}: ray: {cause}")
    text = str(exc).strip().splitlines()
    return InferenceError(f"run {run_dir}: ray: {type(exc).__name__}: "
                          f"{text[-1] if text else ''}")


RELEASE_WAIT_S = 30.0


def _kill_pool(ray: Any, registry: Any) -> None:
    """Kill every actor of the job (the handles they registered) and the
    registry itself: a Ray that outlives the job (one this process did not
    start, or a cluster) gets their CPUs back even when Ray Data left an actor
    alive after a failed unit. Killing an actor that already exited is a no-op."""
    try:
        handles = ray.get(registry.take.remote(), timeout=RELEASE_WAIT_S)
    except ray.exceptions.RayError:  # the registry is gone: nothing to kill by handle
        handles = []
    for handle in handles:
        ray.kill(handle, no_restart=True)
    ray.kill(registry, no_restart=True)


def _wait_released(ray: Any, cpus: float) -> None:
    """Wait (bounded) until the cluster has ``cpus`` CPUs free again: killed
    actors release their resources asynchronously."""
    deadline = time.monotonic() + RELEASE_WAIT_S
    while time.monotonic() < deadline:
        if ray.available_resources().get("CPU", 0.0) >= cpus:
            return
        time.sleep(0.2)


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


def _plan(writer: RecordWriter, profile: RunProfile, threads_from_allotment: bool,
          cohort: Path, run_dir: Path, limit: int | None, home: str | Path | None) -> _Plan:
    """Resolve once, build the provenance, settle the manifest, list the rows to do."""
    from guardrepro.run.pipeline import (
        _check_existing,
        _create_runner,
        _existing_manifest,
        _settle_manifest,
        build_provenance,
        prepare_rows,
    )
    from guardrepro.run.resolve import resolve_profile

    rows = read_cohort(cohort)
    scope = rows if limit is None else rows[:limit]
    existing = _existing_manifest(writer, run_dir)
    resolved = resolve_profile(profile, home=home)  # read and verified once, here
    prepared = prepare_rows(resolved.guard, resolved.tokenizer, scope,
                            profile.decoding.max_new_tokens, cohort_path=cohort)
    runner = _create_runner(profile, resolved)
    try:
        provenance = build_provenance(resolved, runner, resolved.tree_sha256)
    finally:
        runner.close()
    manifest = _settle_manifest(existing, run_dir, provenance, profile, cohort, len(rows),
                                None, len(rows))
    _check_existing(writer, rows, prepared, provenance.sha256)
    todo = [p for p in prepared if p.row.row_id not in writer.records]
    return _Plan(profile, threads_from_allotment, manifest, provenance, rows, len(rows), todo,
                 len(prepared) - len(todo))


def _dispatch(ray: Any, writer: RecordWriter, plan: _Plan, options: RayOptions, cohort: Path,
              home: str | Path | None, progress: bool) -> int:
    """Feed the units to the actor pool and append what comes back; returns the
    number of identical duplicates dropped."""
    import logging

    from ray.data import ActorPoolStrategy, DataContext

    from guardrepro.progress import progress_bar
    from guardrepro.run.ray_actor import PoolRegistry, UnitActor
    from guardrepro.run.records import _parse_line

    DataContext.get_current().enable_progress_bars = False
    logging.getLogger("ray.data").setLevel(logging.WARNING)
    assert options.units is not None
    blocks = _unit_tables(split_units(plan.todo, options.units))
    expected = {p.row.row_id: p.input_sha256 for p in plan.todo}
    free = float(ray.available_resources().get("CPU", 0.0))
    registry = ray.remote(num_cpus=0)(PoolRegistry).remote()
    ds = ray.data.from_blocks(blocks).map_batches(  # one block per unit, never re-split
        UnitActor, batch_size=None, batch_format="pyarrow",
        compute=ActorPoolStrategy(size=min(options.workers, len(blocks)),
                                  max_tasks_in_flight_per_actor=1),
        fn_constructor_kwargs={
            "profile": plan.profile, "home": None if home is None else str(home),
            "provenance": plan.provenance.to_dict(), "run_id": plan.manifest.run_id,
            "cohort_path": str(cohort), "threads_from_allotment": plan.threads_from_allotment,
            "registry": registry},
        num_cpus=options.cpus_per_worker, num_gpus=options.gpus_per_worker or None)
    bar = progress_bar(len(plan.todo), f"run {plan.manifest.run_id} (ray)", "row",
                       enabled=progress)
    dropped = 0
    failure: GuardreproError | None = None
    batches = iter(ds.iter_batches(batch_size=None, batch_format="pyarrow"))
    try:
        for batch in batches:
            for line in batch.column("record").to_pylist():
                record = _parse_line(line.encode("utf-8"), file=f"{writer.path} (from Ray)",
                                     row=len(writer.records))
                if accept(writer, record, provenance_sha256=plan.manifest.provenance_sha256,
                          expected=expected):
                    bar.update(1)
                else:
                    dropped += 1
    except Exception as exc:
        if isinstance(exc, ray_error_types()) or not isinstance(exc, GuardreproError):
            failure = _translated(exc, writer.run_dir)
        else:
            failure = exc
    finally:
        bar.close()
        batches.close()  # the executor and its actors go now, not when collected
        del batches, ds
        gc.collect()
        _kill_pool(ray, registry)
    if failure is not None:
        _wait_released(ray, free)
        raise failure.with_traceback(None) from None
    return dropped


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
    """Run (or resume) the cohort on Ray (see the module docstring); a ``RunSummary``."""
    from guardrepro.run.doctor import preflight
    from guardrepro.run.pipeline import RunSummary, _status_counts

    started = time.perf_counter()
    opts = options.checked()
    assert opts.cpus_per_worker is not None
    if limit is not None and limit < 0:
        raise InputError(f"limit must be >= 0, got {limit}", field="limit")
    cohort = Path(cohort_path).resolve()
    out = Path(run_dir).resolve()
    shared, from_allotment = ray_profile(profile, opts.cpus_per_worker)
    if shared.backend != "rule":  # a rule is deterministic and batch-invariant by design
        preflight(shared)
    with RecordWriter(out) as writer:
        plan = _plan(writer, shared, from_allotment, cohort, out, limit, home)
        generation_started = time.time()
        try:
            if plan.todo:
                with ray_session(opts, out) as ray:
                    generation_started = time.time()  # Ray up; actors start within the span
                    _dispatch(ray, writer, plan, opts, cohort, home, progress)
        finally:  # cohort order even for a partial run, so either engine resumes it
            writer.rewrite_in_order([r.row_id for r in plan.rows])
        generation_finished = time.time()
        counts = _status_counts(writer, plan.rows)
    return RunSummary(
        run_dir=out, run_id=plan.manifest.run_id, rows_in_cohort=plan.rows_all,
        rows_selected=len(plan.rows), already_done=plan.already, generated=len(plan.todo),
        remaining=len(plan.rows) - sum(counts.values()), counts=counts,
        elapsed_s=time.perf_counter() - started,
        generation_started=generation_started, generation_finished=generation_finished)
