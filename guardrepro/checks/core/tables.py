"""Tables for the checks' results: pandas on demand, figures as rows, exports.

Input: nested JSON results (a ``stats.json`` object) and pandas DataFrames.
Output: DataFrames with one row per figure, and CSV or Parquet files.

Invariants: pandas is imported only when a table is asked for, so that the
result types (``checks.stats.types``, ``checks.parity.gate_types``) can offer
``to_frame()`` without loading it; a table file is written atomically, with
its format chosen by the suffix (anything else is refused).
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from guardrepro.artifacts.store import atomic_write_bytes
from guardrepro.errors import InputError, missing_extra


def pandas() -> Any:
    """The pandas module (a core dependency; a clear error when it is absent)."""
    try:
        import pandas as pd
    except ImportError as exc:  # pragma: no cover - pandas is a core dependency
        raise missing_extra("the Python API", "pandas", None) from exc
    return pd


def flatten_leaves(data: Mapping[str, Any], prefix: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Every figure of a nested JSON result as one row: ``path`` (dotted) and
    its scalar fields. A figure is an object holding ``denominator`` (a count
    with its denominator) or ``lower`` (an interval)."""
    out: list[dict[str, Any]] = []
    for key, val in data.items():
        if not isinstance(val, Mapping):
            continue
        path = (*prefix, str(key))
        if "denominator" in val or "lower" in val:
            out.append({"path": ".".join(path),
                        **{k: v for k, v in val.items()
                           if v is None or isinstance(v, str | int | float | bool)}})
        out.extend(flatten_leaves(val, path))
    return out


def write_table(df: Any, path: str | Path) -> Path:
    """CSV or Parquet by the file's suffix, written atomically."""
    path = Path(path)
    buffer = io.BytesIO()
    if path.suffix == ".csv":
        buffer.write(df.to_csv(index=False).encode("utf-8"))
    elif path.suffix == ".parquet":
        try:
            df.to_parquet(buffer, index=False)
        except ImportError as exc:
            raise missing_extra("Parquet export", "pyarrow", "report") from exc
    else:
        raise InputError("table export needs a .csv or .parquet file name", file=str(path))
    atomic_write_bytes(path, buffer.getvalue())
    return path


def stats_frame(data: Mapping[str, Any]) -> Any:
    """A stats.json object as one row per figure (count/denominator or
    interval), dotted path first (``StatsResult.to_frame``)."""
    df = pandas().DataFrame(flatten_leaves(data))
    first = [c for c in ("path", "numerator", "count", "denominator", "value", "point",
                         "lower", "upper") if c in df.columns]
    df = df[first + [c for c in df.columns if c not in first]]
    for col in ("numerator", "count", "denominator"):
        values = df[col].dropna() if col in df else None
        if values is not None and bool((values == values.round()).all()):
            df[col] = df[col].astype("Int64")
    return df
