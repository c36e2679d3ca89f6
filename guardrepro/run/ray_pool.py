"""The actor pool of ``--engine ray``: units of one or more runs in one Ray job.

Input: ``PoolJob``s (a run whose driver holds its ``RecordWriter``, planned by
``engine_ray``: the rows to do, the provenance the actors must match, the
artifact tree hash pinned for it) and the pool's shape (actors, units per
run, CPUs/GPUs per actor). Output: every returned record appended, once, to
its own run's writer.

Invariants:

- Each run's rows to do are split into ``units`` units by the rule that splits
  ``run --workers``' rows (``split_units``: ``run.balance``); every unit is
  one Ray block tagged with its run's index (column ``job``) and unit number,
  handed whole to one actor (``map_batches(batch_size=None)`` over an
  ``ActorPoolStrategy``, at most one unit in flight per actor). Blocks are
  ordered run by run, so an actor switches runner rarely. All runs share one
  pool in one Ray job: a sweep's recipe x shard units run side by side.
- A returned record is checked against its own run (provenance hash, a row to
  do of that run, the driver's ``input_sha256``) and appended with that run's
  writer; a duplicate (a retried unit) is compared on its deterministic
  fields (``accept``): identical, dropped; different, ``NondeterminismError``.
- The actors' log records (sent through the registry) are replayed into the
  driver's handlers before the records of each unit and when the job ends,
  so ``run.log`` holds what every actor logged, failed units included.
- An actor's failure is re-raised as the guardrepro error it raised (naming
  the row); when the job ends every actor it started is killed
  (``ray_actor.PoolRegistry``), and after a failure the driver waits
  (bounded) for their CPUs.
"""

from __future__ import annotations

import gc
import json
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from guardrepro import errors
from guardrepro.errors import GuardreproError, InferenceError, ProvenanceError
from guardrepro.run.balance import balanced_split, row_size
from guardrepro.rundir.records import RecordWriter
from guardrepro.schema import Record

# Fields that may differ between two generations of the same row.
TIMING_FIELDS = ("timings", "created_at", "peak_memory_bytes")


class NondeterminismError(InferenceError):
    """A row generated twice (a retried unit) came back with different outputs."""


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
    known = writer.read(record.row_id) if record.row_id in writer.records else None
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
    """Unit ``k`` (index ``k - 1``): the rows (prepared, in cohort order) that
    ``balance.balanced_split`` gives part ``k - 1``, as ``run --workers`` splits
    them between its workers."""
    return balanced_split(rows, units, lambda item: row_size(item.row))


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


def _translated(exc: Exception, where: str) -> GuardreproError:
    """The guardrepro error to raise for a failure of the Ray job (the actor's
    own error when there is one), naming the run (``where``)."""
    cause = _guardrepro_cause(exc)
    if cause is not None:
        return type(cause)(f"{where}: ray: {cause}")
    text = str(exc).strip().splitlines()
    return InferenceError(f"{where}: ray: {type(exc).__name__}: "
                          f"{text[-1] if text else ''}")


RELEASE_WAIT_S = 30.0


def _relay_logs(ray: Any, registry: Any) -> None:
    """The actors' log records held by the registry, replayed into this
    process's handlers (stderr at its level, ``run.log``), each naming the
    actor's pid. A registry already gone has nothing left to relay."""
    from guardrepro import logs

    try:
        entries = ray.get(registry.take_logs.remote(), timeout=RELEASE_WAIT_S)
    except ray.exceptions.RayError:
        return
    for entry in entries:
        logs.handle_entry(entry)


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
class PoolJob:
    """One run fed to the pool: its writer (held by the driver), the prepared rows
    to do, and what its actors get (``ray_actor.JobSpec`` fields)."""

    writer: RecordWriter
    todo: Sequence[Any]
    provenance_sha256: str
    spec: Mapping[str, Any]  # profile, provenance, run_id, cohort_path, ... (JobSpec)


@dataclass(frozen=True)
class PoolShape:
    workers: int
    units: int
    cpus_per_worker: float
    gpus_per_worker: float = 0.0


def _blocks(jobs: Sequence[PoolJob], units: int) -> list[Any]:
    blocks = []
    for index, job in enumerate(jobs):
        for table in _unit_tables(split_units(job.todo, units)):
            blocks.append(table.append_column("job", _int_column(index, table.num_rows)))
    return blocks


def _int_column(value: int, n: int) -> Any:
    import pyarrow as pa

    return pa.array([value] * n, pa.int64())


def dispatch(ray: Any, jobs: Sequence[PoolJob], shape: PoolShape, home: str | Path | None,
             progress: bool, label: str, where: str) -> int:
    """Feed every job's units to one actor pool and append what comes back to the
    job's writer; returns the number of identical duplicates dropped. ``label``
    names the progress bar, ``where`` the job in errors."""
    import logging

    from ray.data import ActorPoolStrategy, DataContext

    from guardrepro.guards.registry import record_parser
    from guardrepro.progress import progress_bar
    from guardrepro.run.ray_actor import PoolRegistry, UnitActor
    from guardrepro.rundir.records import parse_record_line

    DataContext.get_current().enable_progress_bars = False
    logging.getLogger("ray.data").setLevel(logging.WARNING)
    blocks = _blocks(jobs, shape.units)
    expected = [{p.row.row_id: p.input_sha256 for p in job.todo} for job in jobs]
    free = float(ray.available_resources().get("CPU", 0.0))
    registry = ray.remote(num_cpus=0)(PoolRegistry).remote()
    ds = ray.data.from_blocks(blocks).map_batches(  # one block per unit, never re-split
        UnitActor, batch_size=None, batch_format="pyarrow",
        compute=ActorPoolStrategy(size=min(shape.workers, len(blocks)),
                                  max_tasks_in_flight_per_actor=1),
        fn_constructor_kwargs={"jobs": [dict(job.spec) for job in jobs],
                               "home": None if home is None else str(home),
                               "registry": registry,
                               "log_level": logging.getLogger().getEffectiveLevel()},
        num_cpus=shape.cpus_per_worker, num_gpus=shape.gpus_per_worker or None)
    bar = progress_bar(sum(len(job.todo) for job in jobs), label, "row", enabled=progress)
    dropped = 0
    failure: GuardreproError | None = None
    batches = iter(ds.iter_batches(batch_size=None, batch_format="pyarrow"))
    try:
        for batch in batches:
            _relay_logs(ray, registry)  # the actor's lines for this unit, before its rows
            indices = batch.column("job").to_pylist()
            for index, line in zip(indices, batch.column("record").to_pylist(), strict=True):
                writer = jobs[index].writer
                record = parse_record_line(line.encode("utf-8"), file=f"{writer.path} (from Ray)",
                                     row=len(writer.records), parsers=record_parser)
                if accept(writer, record, provenance_sha256=jobs[index].provenance_sha256,
                          expected=expected[index]):
                    bar.update(1)
                else:
                    dropped += 1
    except Exception as exc:
        if isinstance(exc, ray_error_types()) or not isinstance(exc, GuardreproError):
            failure = _translated(exc, where)
        else:
            failure = exc
    finally:
        bar.close()
        batches.close()  # the executor and its actors go now, not when collected
        del batches, ds
        gc.collect()
        _relay_logs(ray, registry)  # what the actors logged up to their end or failure
        _kill_pool(ray, registry)
    if failure is not None:
        _wait_released(ray, free)
        raise failure.with_traceback(None) from None
    return dropped
