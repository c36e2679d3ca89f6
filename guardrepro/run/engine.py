"""Which engine runs a cohort, chosen once: ``execute`` is ``guardrepro run``.

Input: a ``RunRequest`` (the profile file, cohort, run directory, optional
shard, limit, seed and worker count) and an ``Engine`` (``local``, the
default, or ``ray`` with its pool shape). Output: the run directory and the
``pipeline.RunSummary`` of the engine that ran it:

- ``local`` without a shard: ``workers.run_with_workers`` (one process, or
  ``workers`` processes over deterministic shards merged in cohort order);
- ``local`` with ``--shard K/N``: ``pipeline.run_cohort`` on that shard (one
  process; more workers are refused);
- ``ray``: ``engine_ray.run_on_ray`` (docs/SCALE.md); ``--shard`` is refused,
  Ray splits the rows into units itself.

Ray options given to the local engine are refused by name, never ignored. A
local run imports no Ray module: ``engine_ray`` (and through it the pool and
the actors) is imported only when the Ray engine is chosen.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from guardrepro.errors import InputError

if TYPE_CHECKING:
    from guardrepro.run.engine_ray import RayOptions
    from guardrepro.run.pipeline import RunSummary
    from guardrepro.run.profile import RunProfile

ENGINES = ("local", "ray")


@dataclass(frozen=True)
class Engine:
    """The ``--engine`` options as given: ``name`` (``local`` or ``ray``) and the
    Ray pool's shape, which only the Ray engine takes."""

    name: str = "local"
    address: str | None = None
    units: int | None = None
    cpus_per_worker: float | None = None
    gpus_per_worker: float = 0.0

    def ray(self, workers: int, *, shard: str | None = None) -> RayOptions | None:
        """The ``RayOptions`` for the Ray engine (None for local). Ray options
        given to the local engine, and a shard given to Ray, are refused."""
        if self.name not in ENGINES:
            raise InputError(f"unknown engine {self.name!r} (known: {', '.join(ENGINES)})",
                             field="engine")
        if self.name == "ray" and shard is not None:
            raise InputError("--shard and --engine ray cannot be combined (Ray splits the rows "
                             "into units itself)", field="shard")
        if self.name == "local":
            given = [name for name, value in (("--ray-address", self.address),
                                              ("--units", self.units),
                                              ("--cpus-per-worker", self.cpus_per_worker))
                     if value is not None]
            if self.gpus_per_worker:
                given.append("--gpus-per-worker")
            if given:
                raise InputError(f"{', '.join(given)} need --engine ray", field="engine")
            return None
        from guardrepro.run.engine_ray import RayOptions

        return RayOptions(workers=workers, units=self.units, address=self.address,
                          cpus_per_worker=self.cpus_per_worker,
                          gpus_per_worker=self.gpus_per_worker)


@dataclass(frozen=True)
class RunRequest:
    """One ``guardrepro run``: what to run and where; ``workers`` None takes the
    profile's ``workers``; ``seed`` replaces a sampled profile's decoding seed."""

    profile: Path
    cohort: Path
    run_dir: Path
    shard: str | None = None
    limit: int | None = None
    seed: int | None = None
    workers: int | None = None


def load_profile(path: Path, seed: int | None) -> RunProfile:
    """The run profile at ``path``, its decoding seed replaced by ``seed`` (a
    greedy profile takes none: ``InputError`` naming ``decoding.mode``)."""
    from guardrepro.run.profile import RunProfile

    profile = RunProfile.load(path)
    if seed is None:
        return profile
    if profile.decoding.mode != "sampled":
        raise InputError(
            f"--seed {seed} applies to sampled decoding only; this profile decodes "
            f"{profile.decoding.mode!r} (greedy takes no seed)",
            file=str(path),
            field="decoding.mode",
        )
    return profile.with_decoding(dataclasses.replace(profile.decoding, seed=seed))


@dataclass(frozen=True)
class RunDone:
    """What ``execute`` ran: the summary, with the shard and worker count it ran with."""

    summary: RunSummary
    shard: str | None
    workers: int

    def lines(self) -> list[str]:
        """The run's summary as printed: counts, statuses, and the run directory last."""
        summary = self.summary
        note = f" (shard {self.shard} of {summary.rows_in_cohort} rows)" if self.shard else ""
        if self.shard is None and self.workers > 1:
            note = f" ({self.workers} workers)"
        counts = summary.counts
        return [
            f"run {summary.run_id}: {summary.rows_selected} rows selected{note}; "
            f"{summary.already_done} already done, {summary.generated} generated, "
            f"{summary.remaining} remaining ({summary.elapsed_s:.1f} s)",
            "status: " + ", ".join(f"{status} {counts.get(status, 0)}" for status in counts),
            str(summary.run_dir),
        ]


def execute(request: RunRequest, engine: Engine = Engine(), *, progress: bool = True,
            home: Path | None = None) -> RunDone:
    """Run (or resume) ``request`` on the chosen engine."""
    profile = load_profile(request.profile, request.seed)
    workers = profile.workers if request.workers is None else request.workers
    on_ray = engine.ray(workers, shard=request.shard)
    if on_ray is not None:
        from guardrepro.run.engine_ray import run_on_ray

        summary = run_on_ray(profile, request.cohort, request.run_dir, options=on_ray,
                             limit=request.limit, progress=progress, home=home)
    elif request.shard is not None:
        if request.workers is not None and request.workers > 1:
            raise InputError("--shard and --workers > 1 cannot be combined", field="workers")
        from guardrepro.run.pipeline import run_cohort

        summary = run_cohort(profile, request.cohort, request.run_dir, shard=request.shard,
                             limit=request.limit, progress=progress, home=home)
    else:
        from guardrepro.run.workers import run_with_workers

        summary = run_with_workers(profile, request.cohort, request.run_dir, workers=workers,
                                   limit=request.limit, progress=progress, home=home)
    return RunDone(summary, request.shard, workers)
