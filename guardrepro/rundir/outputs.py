"""What the checks write into a run directory: the files' names, where they go,
and the one atomic JSON writer.

Input: the path a check was given (a run directory, or a predictions file
standing for one), the verb's ``--out`` (or None) and the JSON document.
Output: the file written, by ``write_json_atomic`` (pretty, sorted keys, a
final newline, through ``artifacts.store.atomic_write_bytes``).

Names: a run directory holds ``stats.json`` (``STATS_JSON``: ``stats``, and
the report's cache of it) and ``gate.json`` (``GATE_JSON``: ``gate``, read
back by the report and ``vs-published``). A predictions file ``PRED.jsonl``
gets ``PRED.stats.json`` beside it, so the stats of two files never share a
name; its gate.json goes beside it too. ``--out`` replaces the directory, not
the name.

Invariants: a file is written whole or not at all (no partial file under its
final name); every check's JSON has the same bytes for the same document.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from guardrepro.artifacts.store import atomic_write_bytes

STATS_JSON = "stats.json"
GATE_JSON = "gate.json"


def write_json_atomic(path: str | Path, data: Any) -> Path:
    """Write pretty JSON atomically (``artifacts.store.atomic_write_bytes``); return the path."""
    path = Path(path)
    text = json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    atomic_write_bytes(path, text.encode("utf-8"))
    return path


def output_dir(path: Path, out: Path | None) -> Path:
    """Where a check writes its JSON: ``out``, else the run directory, else the
    directory of the predictions file."""
    if out is not None:
        return out
    return path if path.is_dir() else path.parent


def stats_path(path: Path, out: Path | None = None) -> Path:
    """``stats.json`` of a run directory; ``<stem>.stats.json`` of a predictions
    file (in ``out`` when given, else beside the file)."""
    name = STATS_JSON if path.is_dir() else f"{path.stem}.{STATS_JSON}"
    return output_dir(path, out) / name


def write_stats(path: Path, out: Path | None, data: Any) -> Path:
    """Write the stats document ``data`` of ``path`` to its ``stats_path``."""
    target = stats_path(path, out)
    return write_json_atomic(target, data)
