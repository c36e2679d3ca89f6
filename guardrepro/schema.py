"""Frozen values shared by every stage: cohort rows, decoding parameters,
provenance and records.

Each class has a strict ``from_dict`` that rejects unknown and missing keys
(a silently dropped field breaks provenance) and a ``to_dict`` whose output
``from_dict`` accepts unchanged. JSON is the only serialisation.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import MISSING as _MISSING
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

from guardrepro.errors import InputError

BENCH_FIELDS = (
    "id-interaction",
    "id-segment",
    "instruction",
    "history",
    "current_action",
    "env_info",
    "score",
)
GOLD_SCORES = (0.0, 0.5, 1.0)
RecordStatus = Literal["ok", "parse_error", "inference_error"]
RECORD_STATUSES = ("ok", "parse_error", "inference_error")


def canonical_json(value: Any) -> str:
    """The one canonical JSON text used for hashing: sorted keys, compact, UTF-8."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _check_keys(
    data: Mapping[str, Any], cls: type, *, file: str | None, row: int | None
) -> None:
    if not isinstance(data, Mapping):
        raise InputError(f"expected a JSON object, got {type(data).__name__}", file=file, row=row)
    names = {f.name for f in fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise InputError(f"unknown key(s) {unknown}", file=file, row=row, field=unknown[0])
    required = {f.name for f in fields(cls) if f.default is f.default_factory is _MISSING}
    missing = sorted(required - set(data))
    if missing:
        raise InputError(f"missing key(s) {missing}", file=file, row=row, field=missing[0])




def _gold(value: Any, *, file: str | None, row: int | None, field_name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value not in GOLD_SCORES:
        raise InputError(
            f"expected one of 0, 0.5, 1, got {value!r}", file=file, row=row, field=field_name
        )
    return float(value)


@dataclass(frozen=True)
class CohortRow:
    """One line of a cohort JSONL file (see ``guardrepro.cohort``).

    ``sample`` holds ``sample_id`` (the derived id) and the seven TS-Bench
    fields with the row's edit applied.
    """

    cohort: str
    base_sample_id: str
    variant: str
    domain: str
    original_label: float
    serialization: str
    axis: str
    sample: Mapping[str, Any]

    @property
    def row_id(self) -> str:
        return str(self.sample["sample_id"])

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Any], *, file: str | None = None, row: int | None = None
    ) -> CohortRow:
        _check_keys(data, cls, file=file, row=row)
        for name in ("cohort", "base_sample_id", "variant", "domain", "serialization", "axis"):
            if not isinstance(data[name], str) or not data[name]:
                raise InputError("expected a non-empty string", file=file, row=row, field=name)
        sample = data["sample"]
        if not isinstance(sample, Mapping):
            raise InputError("expected an object", file=file, row=row, field="sample")
        expected = {"sample_id", *BENCH_FIELDS}
        if set(sample) != expected:
            diff = sorted(set(sample) ^ expected)
            raise InputError(
                f"sample keys differ from {sorted(expected)}: {diff}",
                file=file,
                row=row,
                field=f"sample.{diff[0]}",
            )
        if not isinstance(sample["sample_id"], str) or not sample["sample_id"]:
            raise InputError(
                "expected a non-empty string", file=file, row=row, field="sample.sample_id"
            )
        label = _gold(data["original_label"], file=file, row=row, field_name="original_label")
        return cls(
            cohort=data["cohort"],
            base_sample_id=data["base_sample_id"],
            variant=data["variant"],
            domain=data["domain"],
            original_label=label,
            serialization=data["serialization"],
            axis=data["axis"],
            sample=dict(sample),
        )

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["sample"] = dict(self.sample)
        return out


def read_cohort(path: str | Path) -> list[CohortRow]:
    """Read a cohort JSONL file strictly; duplicate row ids are an error."""
    path = Path(path)
    rows: list[CohortRow] = []
    seen: dict[str, int] = {}
    with path.open(encoding="utf-8") as fh:
        for index, line in enumerate(fh):
            if not line.strip():
                raise InputError("blank line", file=str(path), row=index)
            try:
                data = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(f"invalid JSON: {exc}", file=str(path), row=index) from exc
            item = CohortRow.from_dict(data, file=str(path), row=index)
            if item.row_id in seen:
                raise InputError(
                    f"duplicate sample_id {item.row_id!r} (first at row {seen[item.row_id]})",
                    file=str(path),
                    row=index,
                    field="sample.sample_id",
                )
            seen[item.row_id] = index
            rows.append(item)
    if not rows:
        raise InputError("cohort file is empty", file=str(path))
    return rows


@dataclass(frozen=True)
class DecodingParams:
    """How a runner decodes. ``greedy``: one attempt, temperature 0, no top-k,
    no top-p, no repetition penalty. ``sampled`` (the authors' mode):
    temperature/top_p sampling, up to ``max_attempts`` generations until one
    parses, seeds derived per row and attempt from ``seed``."""

    mode: Literal["greedy", "sampled"] = "greedy"
    max_new_tokens: int = 2048
    temperature: float = 0.0
    top_p: float = 1.0
    max_attempts: int = 1
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.mode not in ("greedy", "sampled"):
            raise InputError(f"decoding mode must be greedy or sampled, got {self.mode!r}")
        if self.max_new_tokens < 1:
            raise InputError("max_new_tokens must be >= 1", field="max_new_tokens")
        if self.mode == "greedy" and (self.temperature != 0.0 or self.top_p != 1.0):
            raise InputError("greedy decoding takes temperature 0 and top_p 1", field="mode")
        if self.mode == "greedy" and self.max_attempts != 1:
            raise InputError("greedy decoding makes exactly one attempt", field="max_attempts")
        if self.mode == "sampled" and (self.temperature <= 0 or not 0 < self.top_p <= 1):
            raise InputError("sampled decoding needs temperature > 0 and 0 < top_p <= 1")
        if self.max_attempts < 1:
            raise InputError("max_attempts must be >= 1", field="max_attempts")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, file: str | None = None) -> DecodingParams:
        _check_keys(data, cls, file=file, row=None)
        return cls(**dict(data))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def seed_for(self, row_id: str, attempt: int) -> int | None:
        """Per-row, per-attempt seed for sampled mode (None when greedy)."""
        if self.mode == "greedy":
            return None
        base = 0 if self.seed is None else self.seed
        digest = hashlib.sha256(f"{base}:{row_id}:{attempt}".encode()).hexdigest()
        return int(digest[:8], 16)


@dataclass(frozen=True)
class Provenance:
    """Everything a run's outputs depend on. Two runs (or a run and its
    resume) may share records only when their provenance is identical."""

    guard: str
    backend: str
    backend_config: Mapping[str, Any]
    artifact_tree_sha256: str
    model_revision: str
    template_sha256: str
    chat_template_sha256: str
    parser_version: str
    decoding: Mapping[str, Any]
    package_versions: Mapping[str, str]

    @property
    def backend_config_sha256(self) -> str:
        return sha256_text(canonical_json(dict(self.backend_config)))

    @property
    def sha256(self) -> str:
        return sha256_text(canonical_json(self.to_dict()))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, file: str | None = None) -> Provenance:
        _check_keys(data, cls, file=file, row=None)
        return cls(**dict(data))

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for key in ("backend_config", "decoding", "package_versions"):
            out[key] = dict(out[key])
        return out


@dataclass(frozen=True)
class Attempt:
    """One generation attempt and how it parsed."""

    text: str
    token_ids: list[int]
    finish_reason: str
    status: str
    score: float | None
    error_type: str | None
    decision_margin: float | None
    seed: int | None

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Any], *, file: str | None = None, row: int | None = None
    ) -> Attempt:
        _check_keys(data, cls, file=file, row=row)
        return cls(**dict(data))


@dataclass(frozen=True)
class Record:
    """One (run, cohort row) result with full provenance.

    ``status`` is ``ok`` (parsed, ``score`` set), ``parse_error`` (every
    attempt failed to parse; ``error_type`` set) or ``inference_error`` (the
    backend failed; ``error_type`` holds the message). ``output_*`` and
    ``decision_margin`` come from the final attempt.
    """

    run_id: str
    row_id: str
    base_sample_id: str
    cohort: str
    variant: str
    domain: str
    gold_label: float
    input_sha256: str
    prompt_tokens: int
    provenance_sha256: str
    provenance: Mapping[str, Any]
    status: str
    score: float | None
    error_type: str | None
    components: Mapping[str, Any] | None
    decision_margin: float | None
    output_text: str
    output_token_ids: list[int]
    finish_reason: str
    attempts: list[Mapping[str, Any]]
    timings: Mapping[str, float]
    peak_memory_bytes: int | None
    created_at: str
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.status not in RECORD_STATUSES:
            raise InputError(f"status must be one of {RECORD_STATUSES}", field="status")
        if (self.status == "ok") != (self.score is not None):
            raise InputError("score is set exactly when status is ok", field="score")
        if self.score is not None and self.score not in GOLD_SCORES:
            raise InputError(f"score must be 0, 0.5 or 1, got {self.score!r}", field="score")

    @property
    def valid(self) -> bool:
        return self.status == "ok"

    @property
    def strict_decision(self) -> int:
        """Strict (unsafe) decision, fail-closed: invalid rows count as 1."""
        return 1 if self.score is None or self.score != 0 else 0

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Any], *, file: str | None = None, row: int | None = None
    ) -> Record:
        _check_keys(data, cls, file=file, row=row)
        try:
            return cls(**dict(data))
        except InputError as exc:
            raise InputError(exc.message, file=file, row=row, field=exc.field) from exc

    def to_dict(self) -> dict[str, Any]:
        return json.loads(json.dumps(asdict(self)))


def iter_jsonl(path: str | Path) -> Iterator[tuple[int, Any]]:
    """Yield (row index, parsed object) for each line; bad JSON names file and row."""
    path = Path(path)
    with path.open(encoding="utf-8") as fh:
        for index, line in enumerate(fh):
            try:
                yield index, json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(f"invalid JSON: {exc}", file=str(path), row=index) from exc
