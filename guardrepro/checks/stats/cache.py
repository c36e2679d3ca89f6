"""When a run's stats.json may be reused instead of recomputed.

Input: a run read once (``RunData``: its records, manifest and cohort file,
hashed while read), and the interval settings asked for.

Output: the ``cache_key`` object written into stats.json beside the
statistics (``StatsResult.extra["cache_key"]``), and ``cached`` (the
stats.json read back when its key matches, else None).

Invariants:

- the key holds the stats schema, a fingerprint of the result type
  (``fingerprint``: every dataclass field and type hint reachable from
  ``StatsResult``, the statistics, views and figure shapes), the sha256 of
  records.jsonl, of manifest.json and of the cohort file, and the interval
  settings (replicates, seed, confidence). A file's mtime is never part of
  it: a records file rewritten with its old mtime is a different key.
- adding a statistic, a field or a view changes the fingerprint, so a
  stats.json written before the change is recomputed, never read with a
  missing key.
- settings given as None match any cached settings (the reader did not ask
  for particular ones); given, they must be equal.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from guardrepro.checks.core.figure import SHAPES
from guardrepro.checks.stats.definitions import STATISTICS, VIEWS
from guardrepro.checks.stats.types import COUNTED, SCHEMA, StatsResult
from guardrepro.limits import read_json_file
from guardrepro.rundir.read import RunData
from guardrepro.rundir.stream import RunRowsRead

SETTINGS = ("replicates", "seed", "confidence")


def _metadata(meta: Mapping[str, Any]) -> str:
    """A field's serialisation options as text that is the same in every process:
    a function (a field's own writer or reader) by its qualified name, never by
    its ``repr``, which holds a memory address."""
    return str(sorted((k, v.__qualname__ if callable(v) and hasattr(v, "__qualname__") else v)
                      for k, v in meta.items()))


def _describe(tp: Any, seen: set[str]) -> str:
    """A type as text, dataclasses expanded into their fields (once each)."""
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if tp.__qualname__ in seen:
            return tp.__qualname__
        seen.add(tp.__qualname__)
        hints = typing.get_type_hints(tp)
        inner = ",".join(f"{f.name}:{_metadata(f.metadata)}:{_describe(hints[f.name], seen)}"
                         for f in dataclasses.fields(tp))
        return f"{tp.__qualname__}({inner})"
    args = typing.get_args(tp)
    if args:
        origin = typing.get_origin(tp)
        name = getattr(origin, "__qualname__", str(origin))
        return f"{name}[{','.join(_describe(a, seen) for a in args)}]"
    return getattr(tp, "__qualname__", str(tp))


def fingerprint() -> str:
    """16 hex digits naming the shape of a stats.json (module docstring)."""
    text = json.dumps([SCHEMA, _describe(StatsResult, set()), STATISTICS, VIEWS, COUNTED,
                       SHAPES])
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def input_hashes(run: RunData | RunRowsRead) -> dict[str, str | None]:
    """sha256 of the run's records, manifest and cohort file (None: no cohort
    file, the records' grid), as ``load_run_data`` hashed them while reading."""
    return {"records_sha256": run.records_sha256,
            "manifest_sha256": run.manifest_sha256,
            "cohort_sha256": None if run.cohort is None else run.cohort.sha256}


def cache_key(run: RunData | RunRowsRead, *, replicates: int | None, seed: int | None,
              confidence: float | None) -> dict[str, Any]:
    """The key of the statistics of ``run`` with these settings."""
    return {"schema": SCHEMA, "fingerprint": fingerprint(), **input_hashes(run),
            "replicates": replicates, "seed": seed, "confidence": confidence}


def matches(cached: Mapping[str, Any], key: Mapping[str, Any]) -> bool:
    """Whether a cached key answers ``key`` (a None setting in ``key`` matches any)."""
    return all(cached.get(k) == v for k, v in key.items()
               if not (k in SETTINGS and v is None))


def cached(path: Path, key: Mapping[str, Any]) -> StatsResult | None:
    """stats.json at ``path`` when it exists and its ``cache_key`` matches ``key``.
    A symlink there is never the cache (nor read): the caller computes, and its
    atomic write replaces the link (``artifacts.nofollow``)."""
    if path.is_symlink() or not path.is_file():
        return None
    data = read_json_file(path)
    stored = data.get("cache_key") if isinstance(data, Mapping) else None
    if not isinstance(stored, Mapping) or not matches(stored, key):
        return None
    return StatsResult.from_dict(data)


def keyed(result: StatsResult, run: RunData | RunRowsRead) -> StatsResult:
    """``result`` carrying the ``cache_key`` of its own settings over ``run``
    (what every writer of a run's stats.json stores, so readers can reuse it)."""
    s = result.settings
    return result.with_extra(cache_key=cache_key(run, replicates=s.replicates, seed=s.seed,
                                                 confidence=s.confidence))
