"""What the two sides of a comparison are: guard, checkpoint, cohort.

Input: a run directory, a ``records.jsonl`` file, a predictions file, or the
``subject`` a published-figures spec declares. Output: a ``Side`` per input
(each field None when the input does not say), the fields in which two sides
differ, and the one line ``compare`` and ``vs-published`` print first.

Identities: the guard is the provenance's guard name; the checkpoint is the
artifact tree sha256 of what ran (so a quantized copy is another checkpoint);
the cohort is the cohort file's sha256 from the run manifest. A field unknown
on either side is reported as unknown, never as the same.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from guardrepro.checks.core.serde import JsonValue
from guardrepro.rundir.manifest import MANIFEST_FILE, RunManifest, read_manifest
from guardrepro.rundir.read import read_records_file
from guardrepro.rundir.records import RECORDS_FILE
from guardrepro.schema import Record

FIELDS = ("guard", "checkpoint", "cohort")


@dataclass(frozen=True)
class Side(JsonValue):
    guard: str | None = None
    checkpoint: str | None = None
    cohort: str | None = None


def side_of_run(path: str | Path) -> Side:
    """The side of a run directory (or its records.jsonl): its manifest's guard,
    artifact tree and cohort sha256; without a manifest, the guard and tree its
    records share (cohort unknown); an empty ``Side`` for anything else."""
    path = Path(path)
    if not path.is_dir() and path.name != RECORDS_FILE:
        return Side()  # a predictions file says nothing of where it came from
    run_dir = path if path.is_dir() else path.parent
    manifest = read_manifest(run_dir) if (run_dir / MANIFEST_FILE).is_file() else None
    records = run_dir / RECORDS_FILE
    if manifest is None and records.is_file():
        return side_from(path, None, read_records_file(records).records)
    return side_from(path, manifest, None)


def side_from(path: str | Path, manifest: RunManifest | None,
              records: Sequence[Record] | None) -> Side:
    """``side_of_run`` of a run the caller has read: its ``manifest`` (None when it
    has none) and, used only without a manifest, its ``records``."""
    path = Path(path)
    if not path.is_dir() and path.name != RECORDS_FILE:
        return Side()  # a predictions file says nothing of where it came from
    if manifest is None:
        if records is None:
            return Side()
        provs = {(r.provenance.guard, r.provenance.artifact_tree_sha256) for r in records}
        if len(provs) != 1:
            return Side()
        guard, tree = next(iter(provs))
        return Side(guard, tree, None)  # records alone do not name the cohort file
    cohort = manifest.cohort.get("sha256")
    return Side(manifest.provenance.guard, manifest.provenance.artifact_tree_sha256,
                cohort if isinstance(cohort, str) else None)


def side_of(data: Mapping[str, Any]) -> Side:
    return Side(**{f: data.get(f) for f in FIELDS})


def compare_sides(a: Side, b: Side) -> dict[str, Any]:
    """``{"a", "b", "differ", "unknown"}``: the fields that differ and those
    unknown on at least one side."""
    unknown = [f for f in FIELDS if getattr(a, f) is None or getattr(b, f) is None]
    differ = [f for f in FIELDS if f not in unknown and getattr(a, f) != getattr(b, f)]
    return {"a": a.to_dict(), "b": b.to_dict(), "differ": differ, "unknown": unknown}


def _short(value: str | None) -> str:
    if value is None:
        return "?"
    return value[:12] if len(value) == 64 else value


def sides_line(sides: Mapping[str, Any], names: tuple[str, str] = ("A", "B")) -> str:
    """One line: what differs between the sides, what is the same, what is unknown."""
    a, b = sides["a"], sides["b"]
    parts = []
    if sides["differ"]:
        parts.append("the sides differ in " + ", ".join(
            f"{f} ({names[0]} {_short(a[f])}, {names[1]} {_short(b[f])})"
            for f in sides["differ"]))
    same = [f for f in FIELDS if f not in sides["differ"] and f not in sides["unknown"]]
    if same:
        parts.append("same " + ", ".join(f"{f} {_short(a[f])}" for f in same))
    for side, name, other, other_name in ((a, names[0], b, names[1]),
                                          (b, names[1], a, names[0])):
        unknown = [f for f in FIELDS if side[f] is None]
        if unknown:
            known = [f"{f} {_short(other[f])}" for f in unknown if other[f] is not None]
            beside = f" ({other_name}: {', '.join(known)})" if known else ""
            parts.append(f"{name} does not say its {', '.join(unknown)}{beside}")
    return "; ".join(parts)
