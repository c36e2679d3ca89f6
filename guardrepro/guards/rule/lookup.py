"""The tool-lookup table: fitted on labelled benchmark rows, stored as JSON.

Input: (current_action, gold score) pairs, e.g. benchmark rows outside the
cohort being scored (``training_rows``: the rows of a declared split).
Output: ``{"version", "table": {tool_key: 0|1}, "fallback": 0|1, "rows": n}``;
the key of an unparsable tool is ``"<none>"``. Fitting is
``bench.shortcuts.fit_lookup`` (per key the majority strict gold label, ties
unsafe; fallback the global majority) on the rows given: fit on rows other
than the ones you score, or the baseline is in-sample.

Splits (``TRAIN_SPLITS``): ``benchmark-minus-cohort`` (every benchmark row
whose base sample is not in the cohort, so no scored row is seen in
training) or ``benchmark`` (all rows, declared leaky). An empty split is an
error.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from guardrepro.artifacts.store import atomic_write_bytes, read_hashed
from guardrepro.bench.shortcuts import fit_lookup, tool_key
from guardrepro.bench.tsbench import BenchRow
from guardrepro.errors import InputError
from guardrepro.schema import strict_decision

VERSION = "tool-lookup-table-v1"
TRAIN_SPLITS = ("benchmark-minus-cohort", "benchmark")


def training_rows(bench: Sequence[BenchRow], cohort_bases: Iterable[str],
                  train_split: str) -> list[tuple[Any, float]]:
    """(current_action, gold score) of the rows of the declared split."""
    if train_split not in TRAIN_SPLITS:
        raise InputError(f"train_split must be one of {TRAIN_SPLITS}, got {train_split!r}",
                         field="train_split")
    held_out = set(cohort_bases) if train_split == "benchmark-minus-cohort" else set()
    rows = [(r.raw.get("current_action"), r.score) for r in bench
            if r.base_sample_id not in held_out]
    if not rows:
        raise InputError(f"the training split {train_split!r} has no rows", field="train_split")
    return rows


def fit_table(rows: Sequence[tuple[Any, float]]) -> dict[str, Any]:

    if not rows:
        raise InputError("cannot fit the lookup table on zero rows")
    keys = [tool_key(action) for action, _ in rows]
    labels = [strict_decision(gold) for _, gold in rows]
    table, fallback = fit_lookup(keys, labels)
    return {"version": VERSION, "rows": len(rows), "fallback": fallback,
            "table": {("<none>" if k is None else k): v for k, v in sorted(
                table.items(), key=lambda kv: "" if kv[0] is None else kv[0])}}


def save_table(table: dict[str, Any], path: Path) -> None:
    atomic_write_bytes(path, (json.dumps(table, indent=2, sort_keys=True) + "\n").encode())


def load_table_hashed(path: Path) -> tuple[dict[str, Any], str]:
    """The lookup table and the sha256 of the bytes parsed (one read)."""
    try:
        raw, digest = read_hashed(Path(path))
        data = json.loads(raw.decode("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"cannot read the lookup table: {exc}", file=str(path)) from exc
    if not isinstance(data, dict) or data.get("version") != VERSION:
        raise InputError(f"not a {VERSION} file", file=str(path), field="version")
    if data.get("fallback") not in (0, 1) or not isinstance(data.get("table"), dict):
        raise InputError("expected 'fallback' 0|1 and a 'table' object", file=str(path))
    return data, digest
