"""Loading references and runs for the attribution (and the Python API).

Input: a gate spec TOML (its ``[reference]``: released predictions keyed by
base sample id, or records keyed by row id), or a run directory / records
JSONL used directly as a records reference. Output: reference values keyed
like the runs, the key field and a description of where they came from.

Invariant: a run directory's records are read strictly (duplicate row ids and
torn lines are errors); labels are the run directory's name, made unique by
the caller. A run already read (``rundir.read.RunData`` or ``rundir.read.RecordsFile``) is
taken as it is and not read again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from guardrepro.checks.parity.attribute import RefValue, RunInput, reference_from_records
from guardrepro.rundir.read import RecordsFile, RunData, read_records_file
from guardrepro.schema import Record

RunSource = str | Path | RunData | RecordsFile  # a path to read, or a run already read


def records_file(run: RunSource) -> RecordsFile:
    """The records of a run: read once from a path (``rundir.read.read_records_file``),
    or those of a run already read."""
    if isinstance(run, RecordsFile):
        return run
    if isinstance(run, RunData):
        return RecordsFile(run.records_file, run.records, run.records_sha256)
    return read_records_file(run)


def load_reference(path: RunSource, home: str | Path | None = None,
                   ) -> tuple[dict[str, RefValue], str, dict[str, Any]]:
    """(key -> reference value, key field, description) from a spec or a run."""
    if isinstance(path, RunData | RecordsFile):
        return _records_reference(records_file(path))
    path = Path(path)
    if path.is_file() and path.suffix == ".toml":
        from guardrepro.checks.parity.gate import load_spec, reference_rows

        spec = load_spec(path)
        key_field, rows, info = reference_rows(spec, home)
        ref = {k: RefValue(k, r.score if r.valid else None, r.base_sample_id or k, r.domain,
                           *_tokens(r.record))
               for k, r in rows.items()}
        return ref, key_field, {"spec": str(path), **info}
    return _records_reference(read_records_file(path))  # records and hash: one read


def _tokens(record: Record | None) -> tuple[tuple[int, ...] | None, str | None, str | None]:
    """A records reference row's token ids, prompt hash and text (None for released rows)."""
    if record is None:
        return None, None, None
    return tuple(record.output_token_ids), record.input_sha256, record.output_text


def _records_reference(file: RecordsFile) -> tuple[dict[str, RefValue], str, dict[str, Any]]:
    return (reference_from_records(list(file.records), "row_id"), "row_id",
            {"type": "records", "path": str(file.path), "sha256": file.sha256,
             "rows": len(file.records)})


def run_label(path: str | Path | RunData | RecordsFile) -> str:
    """A run's label: its directory's name (a records file's folder)."""
    if isinstance(path, RunData):
        return path.run_dir.name
    p = path.path if isinstance(path, RecordsFile) else Path(path)
    return p.parent.name if p.is_file() else p.name


def load_run_input(path: RunSource, key_field: str) -> RunInput:
    """A run directory, records JSONL or run already read, keyed by ``key_field``."""
    return RunInput.from_records(run_label(path), list(records_file(path).records), key_field)
