"""Load TS-Bench rows strictly, in the upstream evaluator's order.

Input: the benchmark JSON files at their ToolSafe-relative paths below a data
directory (a checkout, or the directory ``guardrepro.artifacts.fetch.materialize``
returns). Output: ``BenchRow`` values, one per row, in file order and, for a
benchmark, in the order the upstream evaluator concatenated the files
(AgentDojo: workspace, travel, slack, banking; AgentHarm: harmful_steps then
benign_steps; ASB: DPI_attack_success, OPI_attack_success, atttack_failure;
alphabetical order is wrong).

Invariants:

- A row is a JSON object with exactly the seven ``schema.BENCH_FIELDS``.
  ``id-interaction`` / ``id-segment``: int or str. ``instruction``: str;
  ``current_action``: str or null. ``history`` / ``env_info``: str, list, object or
  null (the base sample id and the prompt renderer both accept these; numbers
  and booleans there are rejected as malformed). ``score``: 0, 0.5 or 1 (int
  or float; booleans are rejected although ``True == 1`` in Python).
- Nothing is dropped, reordered or coerced: ``BenchRow.raw`` is the row
  exactly as decoded. Duplicate keys inside a JSON object and the non-JSON
  constants NaN/Infinity are errors rather than being silently resolved.
- Every error is an ``InputError`` naming the file, the row index and the
  field.
- Row counts are whatever the files hold (the paper's ASB count differs
  from the released files); an ASB row whose ``current_action`` is empty,
  ``"None"`` or ``"Final Answer"`` (or JSON null, which stringifies to "")
  is a row like any other.
- Base sample ids are unique within a benchmark (the published data has no
  duplicates; ``docs/PROTOCOL.md``, "Benchmark rows"): two rows with the same
  content are an error that names both rows, never a silent merge.
- ``interaction_id`` is ``"<domain>/<id-interaction>"``: upstream numbers
  interactions per file, so the raw id alone does not identify a cluster
  across domains.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from guardrepro.errors import InputError
from guardrepro.schema import BENCH_FIELDS, check_score
from guardrepro.spec import check_keys

UNIT_SEPARATOR = "\x1f"

AGENTDOJO_FILES = (
    "TS-Bench/agentdojo-traj/workspace.json",
    "TS-Bench/agentdojo-traj/travel.json",
    "TS-Bench/agentdojo-traj/slack.json",
    "TS-Bench/agentdojo-traj/banking.json",
)
AGENTHARM_FILES = (
    "TS-Bench/agentharm-traj/harmful_steps.json",
    "TS-Bench/agentharm-traj/benign_steps.json",
)
ASB_FILES = (  # "atttack_failure" is the upstream file's own spelling
    "TS-Bench/asb-traj/test/DPI_attack_success.json",
    "TS-Bench/asb-traj/test/OPI_attack_success.json",
    "TS-Bench/asb-traj/test/atttack_failure.json",
)
# Benchmark name -> its files, in the upstream evaluator's concatenation order.
BENCHMARK_FILES: dict[str, tuple[str, ...]] = {
    "agentdojo": AGENTDOJO_FILES,
    "agentharm": AGENTHARM_FILES,
    "asb": ASB_FILES,
}

_ID_FIELDS = ("id-interaction", "id-segment")
_TEXT_FIELDS = ("instruction",)
_CONTEXT_FIELDS = ("history", "env_info")
_ACTION_FIELD = "current_action"  # a string, or null (an ASB step with no action)


@dataclass(frozen=True)
class BenchRow:
    """One TS-Bench row. ``raw`` is the decoded JSON object; do not mutate it."""

    domain: str
    index: int
    raw: dict[str, Any]
    base_sample_id: str
    interaction_id: str
    file: str

    @property
    def score(self) -> float:
        """The gold score as a float (0.0, 0.5 or 1.0)."""
        return float(self.raw["score"])


def field_text(value: Any) -> str:
    """A field as text: None -> "", str as is, else sorted-key JSON (non-ASCII kept)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def base_sample_id(row: Mapping[str, Any]) -> str:
    """Content id of a row: sha256 of instruction, history, current_action and
    env_info joined by U+001F (None -> "", str as is, anything else as
    ``json.dumps(sort_keys=True, ensure_ascii=False)``), first 20 hex digits."""
    parts = [
        field_text(row[name]) for name in ("instruction", "history", "current_action", "env_info")
    ]
    return hashlib.sha256(UNIT_SEPARATOR.join(parts).encode("utf-8")).hexdigest()[:20]


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-JSON constant {name}")


def decode_json_strict(data: bytes, file: str) -> Any:
    """Decode JSON bytes (UTF-8), refusing duplicate object keys and NaN/Infinity;
    ``file`` names the source in errors."""

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in items:
            if key in out:
                raise InputError(f"duplicate key {key!r} in a JSON object", file=file, field=key)
            out[key] = value
        return out

    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8: {exc}", file=file) from exc
    try:
        return json.loads(text, object_pairs_hook=pairs, parse_constant=_reject_constant)
    except (json.JSONDecodeError, ValueError) as exc:
        if isinstance(exc, InputError):
            raise
        raise InputError(f"invalid JSON: {exc}", file=file) from exc


def read_json_strict(path: Path) -> Any:
    """Read and decode a JSON file strictly (see ``decode_json_strict``)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError as exc:
        raise InputError("file not found", file=str(path)) from exc
    return decode_json_strict(data, str(path))


def validate_row(row: Any, *, file: str, index: int) -> dict[str, Any]:
    """Check one decoded row against the TS-Bench schema and return it unchanged."""
    if not isinstance(row, dict):
        raise InputError(f"expected a JSON object, got {type(row).__name__}", file=file, row=index)
    check_keys(row, BENCH_FIELDS, file=file, row=index, required=BENCH_FIELDS)
    for name in _ID_FIELDS:
        value = row[name]
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise InputError(
                f"expected an int or a string, got {type(value).__name__}",
                file=file,
                row=index,
                field=name,
            )
    for name in _TEXT_FIELDS:
        if not isinstance(row[name], str):
            raise InputError(
                f"expected a string, got {type(row[name]).__name__}",
                file=file,
                row=index,
                field=name,
            )
    action = row[_ACTION_FIELD]
    if action is not None and not isinstance(action, str):
        raise InputError(
            f"expected a string or null, got {type(action).__name__}",
            file=file,
            row=index,
            field=_ACTION_FIELD,
        )
    for name in _CONTEXT_FIELDS:
        value = row[name]
        if value is not None and not isinstance(value, str | list | dict):
            raise InputError(
                f"expected a string, list, object or null, got {type(value).__name__}",
                file=file,
                row=index,
                field=name,
            )
    check_score(row["score"], file=file, row=index)
    return row


def load_bench_file(path: str | Path, domain: str) -> list[BenchRow]:
    """Load one TS-Bench file; ``domain`` is stored on every row (upstream:
    the file stem)."""
    path = Path(path)
    return bench_rows(read_json_strict(path), str(path), domain)


def bench_rows(data: Any, file: str, domain: str) -> list[BenchRow]:
    """Validate the decoded content of one TS-Bench file (``file`` names it)."""
    if not isinstance(data, list):
        raise InputError(f"expected a JSON list of rows, got {type(data).__name__}", file=file)
    if not data:
        raise InputError("the file holds no rows", file=file)
    rows: list[BenchRow] = []
    for index, item in enumerate(data):
        raw = validate_row(item, file=file, index=index)
        rows.append(
            BenchRow(
                domain=domain,
                index=index,
                raw=raw,
                base_sample_id=base_sample_id(raw),
                interaction_id=f"{domain}/{raw['id-interaction']}",
                file=file,
            )
        )
    return rows


def check_unique_ids(rows: list[BenchRow]) -> None:
    """Raise if two rows share a base sample id, naming both."""
    seen: dict[str, BenchRow] = {}
    for row in rows:
        first = seen.get(row.base_sample_id)
        if first is not None:
            raise InputError(
                f"duplicate base sample id {row.base_sample_id} (same content as "
                f"{first.file} row {first.index})",
                file=row.file,
                row=row.index,
                field="base_sample_id",
            )
        seen[row.base_sample_id] = row


def benchmark_files(benchmark: str) -> tuple[str, ...]:
    """The ToolSafe-relative files of ``benchmark`` in upstream order."""
    files = BENCHMARK_FILES.get(benchmark)
    if files is None:
        raise InputError(
            f"unknown benchmark {benchmark!r}; known: {sorted(BENCHMARK_FILES)}", field="benchmark"
        )
    return files


def load_benchmark(data_dir: str | Path, benchmark: str) -> list[BenchRow]:
    """Load every file of ``benchmark`` ("agentdojo", "agentharm" or "asb") from
    ``data_dir`` in upstream order; ids are checked unique across the files."""
    rows: list[BenchRow] = []
    for rel in benchmark_files(benchmark):
        rows.extend(load_bench_file(Path(data_dir) / rel, Path(rel).stem))
    check_unique_ids(rows)
    return rows
