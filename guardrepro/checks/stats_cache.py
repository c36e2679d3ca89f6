"""When a run's stats.json may be reused instead of recomputed.

Input: a run directory, the cohort file its expected rows come from (or
None: the records' grid), and the interval settings asked for.

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

from guardrepro.artifacts.store import sha256_file
from guardrepro.checks.figure import SHAPES
from guardrepro.checks.runio import (
    MANIFEST_FILE,
    RECORDS_FILE,
    load_manifest,
    manifest_cohort_path,
)
from guardrepro.checks.stats_types import COUNTED, SCHEMA, STATISTICS, VIEWS, StatsResult
from guardrepro.errors import InputError

SETTINGS = ("replicates", "seed", "confidence")


def _describe(tp: Any, seen: set[str]) -> str:
    """A type as text, dataclasses expanded into their fields (once each)."""
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if tp.__qualname__ in seen:
            return tp.__qualname__
        seen.add(tp.__qualname__)
        hints = typing.get_type_hints(tp)
        inner = ",".join(f"{f.name}:{sorted(f.metadata.items())}:{_describe(hints[f.name], seen)}"
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


def _sha(path: Path | None) -> str | None:
    return None if path is None or not path.is_file() else sha256_file(path)[0]


def input_hashes(run_dir: str | Path, cohort: str | Path | None) -> dict[str, str | None]:
    """sha256 of the run's records, manifest and cohort file (None: absent);
    ``cohort`` None: the one the manifest names, when it is on disk (as
    ``load_run``). A caller that has hashed these files already passes its
    hashes to ``cache_key`` instead."""
    run_dir = Path(run_dir)
    if cohort is None:
        cohort = manifest_cohort_path(run_dir, load_manifest(run_dir))
    return {"records_sha256": _sha(run_dir / RECORDS_FILE),
            "manifest_sha256": _sha(run_dir / MANIFEST_FILE),
            "cohort_sha256": _sha(None if cohort is None else Path(cohort))}


def cache_key(run_dir: str | Path, cohort: str | Path | None, *, replicates: int | None,
              seed: int | None, confidence: float | None,
              hashes: Mapping[str, str | None] | None = None) -> dict[str, Any]:
    """The key of the statistics of ``run_dir`` with these settings (``hashes``:
    ``input_hashes`` of the run, computed here when not given)."""
    if hashes is None:
        hashes = input_hashes(run_dir, cohort)
    return {"schema": SCHEMA, "fingerprint": fingerprint(), **hashes,
            "replicates": replicates, "seed": seed, "confidence": confidence}


def matches(cached: Mapping[str, Any], key: Mapping[str, Any]) -> bool:
    """Whether a cached key answers ``key`` (a None setting in ``key`` matches any)."""
    return all(cached.get(k) == v for k, v in key.items()
               if not (k in SETTINGS and v is None))


def cached(path: Path, key: Mapping[str, Any]) -> StatsResult | None:
    """stats.json at ``path`` when it exists and its ``cache_key`` matches ``key``."""
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise InputError(f"invalid JSON: {exc}", file=str(path)) from exc
    stored = data.get("cache_key") if isinstance(data, Mapping) else None
    if not isinstance(stored, Mapping) or not matches(stored, key):
        return None
    return StatsResult.from_dict(data)


def keyed(result: StatsResult, run_dir: str | Path, cohort: str | Path | None = None, *,
          hashes: Mapping[str, str | None] | None = None) -> StatsResult:
    """``result`` carrying the ``cache_key`` of its own settings over ``run_dir``
    (what every writer of a run's stats.json stores, so readers can reuse it)."""
    s = result.settings
    return result.with_extra(cache_key=cache_key(run_dir, cohort, replicates=s.replicates,
                                                 seed=s.seed, confidence=s.confidence,
                                                 hashes=hashes))
