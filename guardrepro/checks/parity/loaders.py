"""Loading references and runs for the attribution (and the Python API).

Input: a gate spec TOML (its ``[reference]``: released predictions keyed by
base sample id, or records keyed by row id), or a run directory / records
JSONL used directly as a records reference. Output: reference values keyed
like the runs, the key field and a description of where they came from.

Invariant: a run directory's records are read strictly (duplicate row ids and
torn lines are errors); labels are the run directory's name, made unique by
the caller.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from guardrepro.checks.io.runio import read_records_file
from guardrepro.checks.parity.attribute import RefValue, RunInput, reference_from_records


def load_reference(path: str | Path, home: str | Path | None = None,
                   ) -> tuple[dict[str, RefValue], str, dict[str, Any]]:
    """(key -> reference value, key field, description) from a spec or a run."""
    path = Path(path)
    if path.is_file() and path.suffix == ".toml":
        from guardrepro.checks.parity.gate import load_spec, reference_rows

        spec = load_spec(path)
        key_field, rows, info = reference_rows(spec, home)
        ref = {k: RefValue(k, r.score if r.valid else None, r.base_sample_id or k, r.domain)
               for k, r in rows.items()}
        return ref, key_field, {"spec": str(path), **info}
    file = read_records_file(path)  # read once: the records and the hash of the same bytes
    return (reference_from_records(list(file.records), "row_id"), "row_id",
            {"type": "records", "path": str(file.path), "sha256": file.sha256,
             "rows": len(file.records)})


def run_label(path: str | Path) -> str:
    p = Path(path)
    return p.parent.name if p.is_file() else p.name


def load_run_input(path: str | Path, key_field: str) -> RunInput:
    """A run directory (or records JSONL) keyed by ``key_field``."""
    return RunInput.from_records(run_label(path), list(read_records_file(path).records),
                                 key_field)
