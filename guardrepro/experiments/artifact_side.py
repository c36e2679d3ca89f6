"""A run's artifact side file (``artifact.json``): the size of the checkpoint it ran.

Input: a checkpoint lock (``artifacts.locks``) for the writer; a run directory
or records file for the reader. Output: ``artifact.json`` beside the records
(``{"artifact_bytes", "lock", ...extra}``), written by the sweep and the demo,
whose runs substitute the profile's checkpoint lock; the artifact size of a
run, read by the cost-harm frontier's bytes axis.

Invariants: the side file wins over the manifest's profile (whose own lock is
not the artifact that ran); without it the size is the sum of the profile's
checkpoint lock's file sizes, unknown (None) where a size is missing; a
non-integer ``artifact_bytes`` is an ``InputError`` naming the file and field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from guardrepro.errors import InputError
from guardrepro.limits import read_json_file

ARTIFACT_SIDE = "artifact.json"


def artifact_bytes(lock: Path) -> int:
    """The bytes of the checkpoint ``lock`` pins: the sum of its files' sizes
    (a file without a recorded size counts 0, as the sweep has always counted)."""
    from guardrepro.artifacts.locks import load_lock

    return sum(int(f.size or 0) for f in load_lock(lock).files)


def write_artifact_side(run_dir: Path, lock: Path, **extra: Any) -> None:
    """Write ``artifact.json`` next to a run made with a substituted checkpoint
    lock (``RunProfile.with_checkpoint_lock``): the manifest names only the
    profile, whose own lock is not the artifact that ran, so the frontier's
    bytes axis reads the size from here."""
    from guardrepro.rundir.outputs import write_json_atomic

    write_json_atomic(run_dir / ARTIFACT_SIDE,
                      {"artifact_bytes": artifact_bytes(lock), "lock": str(lock), **extra})


def run_artifact_bytes(path: Path) -> int | None:
    """``artifact.json`` next to the records (written by the sweep and the demo,
    whose runs substitute the profile's checkpoint lock), else the sum of the
    file sizes of the manifest's profile checkpoint lock."""
    folder = path if path.is_dir() else path.parent
    side = folder / ARTIFACT_SIDE
    if side.is_file():
        value = read_json_file(side).get("artifact_bytes")
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise InputError("artifact_bytes must be an integer", file=str(side),
                             field="artifact_bytes")
        return value
    from guardrepro.artifacts.locks import load_lock
    from guardrepro.run.profile import RunProfile
    from guardrepro.rundir.manifest import read_manifest

    manifest = read_manifest(folder)
    if manifest is None:
        return None
    profile_path = Path(manifest.profile["path"])
    if not profile_path.is_file():
        return None
    profile = RunProfile.load(profile_path)
    if profile.checkpoint.lock is None:
        return None
    if not Path(profile.checkpoint.lock).is_file():
        raise InputError(
            f"the checkpoint lock of profile {profile_path} is not there, so the run's "
            f"artifact size is unknown; a run made with another checkpoint lock needs "
            f"{ARTIFACT_SIDE} beside its records (write_artifact_side)",
            file=str(profile.checkpoint.lock), field="checkpoint.lock")
    sizes = [f.size for f in load_lock(profile.checkpoint.lock).files]
    return None if any(s is None for s in sizes) else sum(int(s) for s in sizes if s)
