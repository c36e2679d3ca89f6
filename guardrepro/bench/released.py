"""Load the released TS-Guard predictions and prove they align with TS-Bench.

Input: ``preds.json``, ``labels.json`` and ``meta_data.json`` from
``guardian_test_logs/<benchmark>/TS-Guard/`` (``asb/all`` for ASB; parallel JSON lists, one entry
per row) and the benchmark rows from ``guardrepro.bench.tsbench`` in upstream
order. Output: a ``ReleasedSet`` whose rows carry the base sample id, domain,
gold label (the row's gold score), released prediction and the raw ``guard_res``
object. The re-parse report keeps its published keys ``sample_id`` and ``label``.

Alignment rules (``docs/PROTOCOL.md``, "Released predictions"), each
failure an ``InputError`` naming the file, the index and the field, never a
skip:

- the three lists and the benchmark rows have the same length;
- ``meta_data[i]`` is exactly ``{"meta_sample": ..., "guard_res": {...}}`` and
  ``meta_sample`` equals raw row ``i`` exactly (JSON types included: ``1`` is
  not ``1.0`` and ``true`` is not ``1``); when it equals another row instead,
  the message says the order differs from upstream;
- ``labels[i]`` equals the row's gold score (numerically; booleans refused);
- ``preds[i]`` is 0, 0.5, 1 or null (null: every upstream parse attempt
  failed);
- sample ids are unique.

``guard_res`` layout. The upstream evaluator stores the guard's reply as
``{"risk rating": <0|0.5|1>, "results": {...parsed tags...}, "reason":
<raw text of the attempt that parsed>}`` and, when all attempts failed,
``{"reason": <raw text of the last attempt>}``. ``released_output`` reads the
``"reason"`` string (one string: earlier failed attempts are not kept
upstream); any other layout is an ``InputError`` naming the index and the keys
found. ``reparse_released`` re-parses that text and compares it with
``preds[i]``; it also requires ``guard_res["risk rating"]`` (when present) to
equal ``preds[i]`` and its absence to go with a null prediction.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from guardrepro.bench.tsbench import (
    BenchRow,
    base_sample_id,
    load_benchmark,
    read_json_strict,
    validate_row,
)
from guardrepro.errors import InputError
from guardrepro.schema import check_score
from guardrepro.serde.fields import JsonValue, opt
from guardrepro.spec import check_keys

RELEASED_DIR = "guardian_test_logs/{benchmark}/TS-Guard"
# The released logs' folder per benchmark (ASB's evaluator run is named "all").
RELEASED_NAMES = {"agentdojo": "agentdojo", "agentharm": "agentharm", "asb": "asb/all"}
RELEASED_FILES = ("preds.json", "labels.json", "meta_data.json")
RAW_OUTPUT_KEY = "reason"
RATING_KEY = "risk rating"


@dataclass(frozen=True)
class ReleasedRow:
    """One released prediction aligned with its benchmark row.

    ``domain`` and ``interaction_id`` are None when the set was loaded from
    the three files alone (no TS-Bench rows to take them from)."""

    index: int
    base_sample_id: str
    domain: str | None
    interaction_id: str | None
    gold_label: float
    pred: float | None
    guard_res: dict[str, Any]


@dataclass(frozen=True)
class ReleasedSet:
    benchmark: str | None
    rows: tuple[ReleasedRow, ...]
    by_base_sample_id: Mapping[str, ReleasedRow]
    files: Mapping[str, str]


def _load_list(path: Path) -> list[Any]:
    data = read_json_strict(path)
    if not isinstance(data, list):
        raise InputError(f"expected a JSON list, got {type(data).__name__}", file=str(path))
    return data


def _first_difference(a: Any, b: Any, path: str = "") -> str | None:
    """Path of the first place where two decoded JSON values differ, types
    included (bool, int and float are distinct); None when identical."""
    if type(a) is not type(b):
        return path or "<root>"
    if isinstance(a, dict):
        for key in sorted(set(a) | set(b)):
            if key not in a or key not in b:
                return f"{path}.{key}" if path else key
            sub = _first_difference(a[key], b[key], f"{path}.{key}" if path else key)
            if sub is not None:
                return sub
        return None
    if isinstance(a, list):
        if len(a) != len(b):
            return f"{path}[len]"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            sub = _first_difference(x, y, f"{path}[{i}]")
            if sub is not None:
                return sub
        return None
    return None if a == b else (path or "<root>")


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def _check_pred(value: Any, *, file: str | None, index: int) -> float | None:
    return check_score(value, nullable=True, file=file, row=index, field=None)


def _check_meta_entry(entry: Any, *, file: str, index: int) -> tuple[Any, dict[str, Any]]:
    if not isinstance(entry, dict):
        raise InputError(
            f"expected a JSON object, got {type(entry).__name__}", file=file, row=index
        )
    check_keys(entry, ("meta_sample", "guard_res"), file=file, row=index,
               required=("meta_sample", "guard_res"))
    guard_res = entry["guard_res"]
    if not isinstance(guard_res, dict):
        raise InputError(
            f"expected a JSON object, got {type(guard_res).__name__}",
            file=file,
            row=index,
            field="guard_res",
        )
    return entry["meta_sample"], guard_res


def _matching_row(meta_sample: Any, rows: Sequence[BenchRow], i: int,
                  by_content: Mapping[str, int], meta_file: str) -> BenchRow:
    """Benchmark row ``i``, which must equal the released ``meta_sample``."""
    row = rows[i]
    diff = _first_difference(meta_sample, row.raw)
    if diff is not None:
        other = by_content.get(_canonical(meta_sample))
        hint = (
            f"; it equals benchmark row {other} instead: the row order differs from "
            "upstream (AgentDojo workspace, travel, slack, banking; AgentHarm "
            "harmful_steps, benign_steps; ASB DPI_attack_success, OPI_attack_success, "
            "atttack_failure)"
            if other is not None
            else ""
        )
        raise InputError(
            f"meta_sample differs from benchmark row {i} ({row.file} row {row.index}) "
            f"at {diff}{hint}",
            file=meta_file,
            row=i,
            field=f"meta_sample.{diff}",
        )
    return row


def align_released(
    preds_path: str | Path,
    labels_path: str | Path,
    meta_path: str | Path,
    rows: Sequence[BenchRow] | None,
    *,
    benchmark: str | None = None,
) -> ReleasedSet:
    """Verify the three released files against ``rows`` (upstream order).

    With ``rows=None`` the rows are taken from the ``meta_sample`` objects
    themselves (each validated against the TS-Bench schema): this checks the
    files' internal consistency only, and domains are unknown (None)."""
    paths = {"preds": Path(preds_path), "labels": Path(labels_path), "meta_data": Path(meta_path)}
    preds = _load_list(paths["preds"])
    labels = _load_list(paths["labels"])
    meta = _load_list(paths["meta_data"])
    meta_file = str(paths["meta_data"])

    counts = {"preds": len(preds), "labels": len(labels), "meta_data": len(meta)}
    if rows is not None:
        counts["benchmark rows"] = len(rows)
    if len(set(counts.values())) != 1:
        shown = ", ".join(f"{name} {n}" for name, n in counts.items())
        raise InputError(f"entry counts differ: {shown}", file=str(paths["preds"].parent))
    if not meta:
        raise InputError("the released files hold no entries", file=meta_file)

    by_content: dict[str, int] = {}
    if rows is not None:
        by_content = {_canonical(row.raw): i for i, row in enumerate(rows)}

    out: list[ReleasedRow] = []
    seen: dict[str, int] = {}
    for i, entry in enumerate(meta):
        meta_sample, guard_res = _check_meta_entry(entry, file=meta_file, index=i)
        if rows is None:
            raw = validate_row(meta_sample, file=f"{meta_file} meta_sample", index=i)
            base_id, domain, interaction = base_sample_id(raw), None, None
        else:
            row = _matching_row(meta_sample, rows, i, by_content, meta_file)
            raw, base_id = row.raw, row.base_sample_id
            domain, interaction = row.domain, row.interaction_id
        label = labels[i]
        if isinstance(label, bool) or not isinstance(label, int | float) or label != raw["score"]:
            raise InputError(
                f"label {label!r} differs from the row's gold score {raw['score']!r}",
                file=str(paths["labels"]),
                row=i,
            )
        pred = _check_pred(preds[i], file=str(paths["preds"]), index=i)
        if base_id in seen:
            raise InputError(
                f"duplicate sample id {base_id} (first at index {seen[base_id]})",
                file=meta_file,
                row=i,
                field="meta_sample",
            )
        seen[base_id] = i
        out.append(
            ReleasedRow(
                index=i,
                base_sample_id=base_id,
                domain=domain,
                interaction_id=interaction,
                gold_label=float(raw["score"]),
                pred=pred,
                guard_res=guard_res,
            )
        )
    return ReleasedSet(
        benchmark=benchmark,
        rows=tuple(out),
        by_base_sample_id={row.base_sample_id: row for row in out},
        files={name: str(path) for name, path in paths.items()},
    )


def released_dir(benchmark: str) -> str:
    """The ToolSafe-relative folder of ``benchmark``'s released TS-Guard logs."""
    name = RELEASED_NAMES.get(benchmark)
    if name is None:
        raise InputError(f"no released logs for benchmark {benchmark!r}; known: "
                         f"{sorted(RELEASED_NAMES)}", field="benchmark")
    return RELEASED_DIR.format(benchmark=name)


def released_paths(data_dir: str | Path, benchmark: str) -> tuple[Path, Path, Path]:
    """(preds, labels, meta_data) paths of ``benchmark`` below ``data_dir``."""
    base = Path(data_dir) / released_dir(benchmark)
    preds, labels, meta = (base / name for name in RELEASED_FILES)
    return preds, labels, meta


def load_released(data_dir: str | Path, benchmark: str) -> ReleasedSet:
    """Load and verify the released TS-Guard predictions of ``benchmark``
    ("agentdojo", "agentharm" or "asb") against the TS-Bench rows, both below
    ``data_dir`` at their ToolSafe-relative paths."""
    rows = load_benchmark(data_dir, benchmark)
    preds, labels, meta = released_paths(data_dir, benchmark)
    return align_released(preds, labels, meta, rows, benchmark=benchmark)


def released_output(guard_res: Mapping[str, Any], *, file: str | None, index: int) -> str:
    """The raw guard text stored in one ``guard_res`` (its ``"reason"`` string)."""
    text = guard_res.get(RAW_OUTPUT_KEY)
    if not isinstance(text, str):
        raise InputError(
            f"cannot find the raw guard output: expected a string under {RAW_OUTPUT_KEY!r}, "
            f"found keys {sorted(guard_res)}",
            file=file,
            row=index,
            field=f"guard_res.{RAW_OUTPUT_KEY}",
        )
    return text


@dataclass(frozen=True)
class ReparseRow(JsonValue):
    """One released row parsed again (the reparse report's key names)."""

    index: int
    base_sample_id: str = opt(key="sample_id")
    domain: str | None = opt()
    gold_label: float = opt(key="label")
    released_pred: float | None = opt()
    status: str = opt()
    score: float | None = opt()
    error_type: str | None = opt()
    reproduced: bool = opt()


class Parsed(Protocol):
    """What ``reparse_released`` reads of a parse (a guard's ``guards.base.ParseResult``:
    the parser is passed in, so this stage names no guard type)."""

    @property
    def status(self) -> str: ...
    @property
    def score(self) -> float | None: ...
    @property
    def error_type(self) -> str | None: ...


def reparse_released(
    released: ReleasedSet, parse: Callable[[str], Parsed]
) -> list[ReparseRow]:
    """Re-parse every stored raw output; a row is reproduced when the parse
    gives the released prediction (an error for a null prediction)."""
    meta_file = released.files.get("meta_data")
    out: list[ReparseRow] = []
    for row in released.rows:
        if RATING_KEY in row.guard_res:
            stored = _check_pred(row.guard_res[RATING_KEY], file=meta_file, index=row.index)
            if stored is None or stored != row.pred:
                raise InputError(
                    f"guard_res[{RATING_KEY!r}] = {row.guard_res[RATING_KEY]!r} but preds.json "
                    f"has {row.pred!r}",
                    file=meta_file,
                    row=row.index,
                    field=f"guard_res.{RATING_KEY}",
                )
        elif row.pred is not None:
            raise InputError(
                f"preds.json has {row.pred!r} but guard_res has no {RATING_KEY!r} "
                f"(keys {sorted(row.guard_res)})",
                file=meta_file,
                row=row.index,
                field=f"guard_res.{RATING_KEY}",
            )
        result = parse(released_output(row.guard_res, file=meta_file, index=row.index))
        reproduced = result.status == "error" if row.pred is None else result.score == row.pred
        out.append(
            ReparseRow(
                index=row.index,
                base_sample_id=row.base_sample_id,
                domain=row.domain,
                gold_label=row.gold_label,
                released_pred=row.pred,
                status=result.status,
                score=result.score,
                error_type=result.error_type,
                reproduced=reproduced,
            )
        )
    return out


def reparse_summary(rows: Sequence[ReparseRow]) -> dict[str, Any]:
    """Counts and the agreement rate (with its denominator) of a re-parse."""
    total = len(rows)
    reproduced = sum(row.reproduced for row in rows)
    errors: dict[str, int] = {}
    for row in rows:
        if row.error_type is not None:
            errors[row.error_type] = errors.get(row.error_type, 0) + 1
    return {
        "rows": total,
        "reproduced": reproduced,
        "not_reproduced": total - reproduced,
        "agreement": reproduced / total if total else None,
        "denominator": total,
        "released_null": sum(row.released_pred is None for row in rows),
        "reparse_errors": sum(row.status == "error" for row in rows),
        "error_types": dict(sorted(errors.items())),
    }
