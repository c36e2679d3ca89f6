"""``sweep --engine ray``: every configuration's cohort run in one Ray actor pool.

Input: a loaded sweep spec, the sweep directory, the built cohort rows file
and the ``engine_ray.RayOptions``. Output: ``pins.json`` in the sweep
directory (each artifact's lock and verified tree hash), the reference's
and each configuration's run directory (manifest and records, exactly as
``run --engine ray`` writes them), and the function that ``sweep.run_sweep``
calls in place of ``pipeline.run_cohort``: it returns the summary of the run
made here.

Invariants:

- Every recipe's artifact is built here, once, by this process
  (``sweep._artifact``: reused when its lock exists), and pinned before any
  run reads it: its lock is materialised and verified, and the verified tree
  hash is written to ``pins.json`` (atomically) before Ray starts. The
  driver's own resolve and every actor compare the artifact they verify on
  their node with that hash and refuse a mismatch (``ProvenanceError``).
- The runs to make are the reference (always: a complete one generates
  nothing) and every recipe and rule configuration without its
  ``summary.json``. They go to ``engine_ray.run_many`` together: one Ray job,
  one actor pool, each run split into ``units`` units by the shard rule,
  recipe x shard units side by side; the driver holds every run's record
  store (exactly-once, the duplicate comparison, the cohort-order rewrite).
- The teacher log-probabilities, the divergences, the comparisons and the
  summaries are computed afterwards by ``sweep.run_sweep``, on the driver,
  exactly as in a local sweep: the reference's log-probabilities once.
- A configuration run on Ray has the records of a local sweep's when each run
  is one unit (``--units 1``), and of ``run --workers K`` with ``--units K``.
  An interrupted ray sweep resumes with the same command, or with the local
  engine (each run resumes through its records).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from guardrepro.errors import InferenceError
from guardrepro.experiments.spec import SweepSpec
from guardrepro.experiments.sweep import SweepResult, _artifact, _rule_profile

PINS_FILE = "pins.json"


def pin(lock: Path, home: str | Path | None) -> str:
    """Materialise and verify the artifact of ``lock``; its tree hash."""
    from guardrepro.artifacts.fetch import materialize
    from guardrepro.artifacts.treehash import cached_tree_hash

    return cached_tree_hash(materialize(lock, home), home).sha256


@dataclass
class RaySummaries:
    """``pipeline.run_cohort``'s stand-in for the sweep loop: the summary of the
    run this sweep made on Ray for that run directory."""

    by_dir: dict[Path, Any] = field(default_factory=dict)

    def __call__(self, profile: Any, cohort: Path, run_dir: Path, **_: Any) -> Any:
        summary = self.by_dir.get(Path(run_dir).resolve())
        if summary is None:
            raise InferenceError(f"sweep --engine ray: no run was made for {run_dir}")
        return summary


def _requests(spec: SweepSpec, out: Path, cohort: Path, home: str | Path | None,
              result: SweepResult) -> tuple[list[Any], dict[str, Any]]:
    """(the runs to make, the pins), artifacts built and pinned on the way."""
    from guardrepro.run.engine_ray import RunRequest
    from guardrepro.run.profile import RunProfile

    pins: dict[str, Any] = {}

    def request(name: str, profile: RunProfile, run_dir: Path) -> RunRequest:
        lock = profile.checkpoint.lock
        pinned = None
        if lock is not None and profile.descriptor.needs_model:
            pinned = pin(lock, home)
            pins[name] = {"lock": str(lock), "tree_sha256": pinned}
        return RunRequest(profile, cohort, run_dir.resolve(), pinned)

    requests = [request("reference", RunProfile.load(spec.reference_profile),
                        out / "reference")]
    cpu = result.device.startswith("Device(cpu")
    for entry in spec.recipes:
        recipe = entry.chosen(cpu)
        run_dir = out / "runs" / recipe.name
        if (run_dir / "summary.json").exists():
            continue
        lock = _artifact(recipe, spec, out, home, result)  # built here, once
        profile = RunProfile.load(spec.candidate_profile).with_checkpoint_lock(lock)
        requests.append(request(recipe.name, profile, run_dir))
    for rule in spec.rules:
        run_dir = out / "runs" / rule.name
        if not (run_dir / "summary.json").exists():
            path, _ = _rule_profile(rule, spec, out, cohort, home, result)
            requests.append(request(rule.name, RunProfile.load(path), run_dir))
    return requests, pins


def run_configurations(spec: SweepSpec, out: Path, cohort: Path, home: str | Path | None,
                       result: SweepResult, progress: bool, *,
                       options: Any) -> Callable[..., Any]:
    """Build and pin the artifacts, then make every run in one pool (see the
    module docstring); returns the ``run_cohort`` stand-in."""
    from guardrepro.run.engine_ray import run_many
    from guardrepro.rundir.outputs import write_json_atomic

    requests, pins = _requests(spec, out, cohort, home, result)
    write_json_atomic(out / PINS_FILE, pins)  # pinned before any run reads an artifact
    summaries = run_many(requests, options=options, progress=progress, home=home,
                         session_dir=out, label=f"sweep {spec.name} (ray)")
    result.actions.append(f"ray: {len(requests)} runs in one pool")
    return RaySummaries({r.run_dir: s for r, s in zip(requests, summaries, strict=True)})
