"""Frozen values shared by every stage: cohort rows, provenance and records
(decoding parameters: ``guardrepro.decoding``).

Each class has a strict ``from_dict`` that rejects keys outside its fields and missing ones
(a silently dropped field breaks provenance) and a ``to_dict`` whose output
``from_dict`` accepts unchanged. JSON is the only serialisation.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import MISSING as _MISSING
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from typing import Any

from guardrepro.errors import InputError
from guardrepro.spec import check_keys
from guardrepro.textsafe import check_id

BENCH_FIELDS = ("id-interaction", "id-segment", "instruction", "history", "current_action",
                "env_info", "score")
GOLD_SCORES = (0.0, 0.5, 1.0)
RECORD_STATUSES = ("ok", "parse_error", "truncated", "inference_error")
# A model guard's decision-label probabilities (guards.decision); all None: not written.
SCORE_KEYS = ("label_probs", "p_unsafe", "expected_score", "p_unsafe_reason")


def canonical_json(value: Any) -> str:
    """The one canonical JSON text used for hashing: sorted keys, compact, UTF-8."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def check_fields(
    data: Mapping[str, Any], cls: type, *, file: str | None, row: int | None, where: str = ""
) -> None:
    """Refuse a non-object, unknown and missing keys; ``where``: dotted path of ``data``."""
    if not isinstance(data, Mapping):
        raise InputError(f"expected a JSON object, got {type(data).__name__}", file=file, row=row,
                         field=where or None)
    required = {f.name for f in fields(cls) if f.default is f.default_factory is _MISSING}
    check_keys(data, (f.name for f in fields(cls)), file=file, row=row, where=where,
               required=required)


def is_score(value: Any) -> bool:
    """True for 0, 0.5 or 1 given as a JSON number (a boolean is not a score)."""
    return not isinstance(value, bool) and isinstance(value, int | float) and value in GOLD_SCORES


def check_score(
    value: Any,
    *,
    nullable: bool = False,
    file: str | None = None,
    row: int | None = None,
    line: int | None = None,
    field: str | None = "score",
) -> float | None:
    """The one score check: 0, 0.5 or 1 as a float; with ``nullable``, None passes
    (an invalid prediction). Anything else is an ``InputError`` naming where."""
    if value is None and nullable:
        return None
    if not is_score(value):
        allowed = "0, 0.5, 1 or null" if nullable else "0, 0.5 or 1"
        raise InputError(f"expected {allowed}, got {value!r:.60}", file=file, row=row,
                         line=line, field=field)
    return float(value)


def strict_decision(score: float | None) -> int:
    """The strict rule, for a prediction or a gold score alike: 1 (unsafe / block)
    unless the score is exactly 0; None (invalid or missing) fails closed to 1."""
    return 1 if score is None or score != 0 else 0


COHORT_TEXT_FIELDS = ("instruction", "history", "current_action", "env_info")
# The 13 keys of a cohort row's ``sample`` (docs/PROTOCOL.md, "Cohort file").
SAMPLE_KEYS = (
    "sample_id", "source", "split", *COHORT_TEXT_FIELDS, "label", "trajectory_id",
    "segment_id", "subset", "malicious_user_request", "prompt_injection",
)
# The top-level keys of a cohort row; ``original_label`` is ``CohortRow.gold_strict``.
COHORT_KEYS = ("axis", "base_sample_id", "cohort", "domain", "original_label", "serialization",
               "variant", "sample")


def _text(value: Any, *, file: str | None, row: int | None, field_name: str,
          empty: bool = True) -> str:
    if not isinstance(value, str) or (not empty and not value):
        what = "a string" if empty else "a non-empty string"
        raise InputError(f"expected {what}, got {value!r:.60}", file=file, row=row,
                         field=field_name)
    return value


RAW_SERIALIZATION = "tsbench_raw"  # whole-split cohorts: the decoded TS-Bench values
_RAW = {"instruction": (str,), "current_action": (str, type(None))}  # others: str/list/dict/null


def _check_sample(sample: Any, top: Mapping[str, Any], *, file: str | None,
                  row: int | None) -> dict[str, Any]:
    if not isinstance(sample, Mapping):
        raise InputError("expected an object", file=file, row=row, field="sample")
    check_keys(sample, SAMPLE_KEYS, file=file, row=row, where="sample", required=SAMPLE_KEYS)
    for name in ("source", "split"):
        _text(sample[name], file=file, row=row, field_name=f"sample.{name}", empty=False)
    check_id(sample["sample_id"], file=file, row=row, field="sample.sample_id")
    for name in COHORT_TEXT_FIELDS:  # the stringified texts, or the raw values of a split
        if top.get("serialization") != RAW_SERIALIZATION:
            _text(sample[name], file=file, row=row, field_name=f"sample.{name}")
        elif not isinstance(sample[name], _RAW.get(name, (str, list, dict, type(None)))):
            raise InputError(f"not a TS-Bench {name}: {sample[name]!r:.60}", file=file, row=row,
                             field=f"sample.{name}")
    check_score(sample["label"], file=file, row=row, field="sample.label")
    for name, top_name in (("trajectory_id", "base_sample_id"), ("segment_id", "variant"),
                           ("subset", "domain")):
        if sample[name] != top[top_name]:
            raise InputError(f"must equal {top_name} {top[top_name]!r}, got {sample[name]!r}",
                             file=file, row=row, field=f"sample.{name}")
    for name in ("malicious_user_request", "prompt_injection"):
        if sample[name] is not None:
            raise InputError(f"expected null, got {sample[name]!r:.60}", file=file, row=row,
                             field=f"sample.{name}")
    return dict(sample)


@dataclass(frozen=True)
class CohortRow:
    """One line of a cohort JSONL file (layout: ``docs/PROTOCOL.md``, "Cohort
    file"; built by ``guardrepro.bench.cohort.build``).

    The gold score is ``sample["label"]`` (:attr:`gold_label`); ``gold_strict`` is
    its strict label (0 or 1), the file's ``original_label``. ``sample`` holds the 13 sample
    keys; its four texts are strings (the stringified TS-Bench fields with the
    row's edit applied), which is what the prompt renders (serialization
    ``tsbench_raw``, a whole-split cohort: the TS-Bench values as decoded).
    """

    axis: str
    base_sample_id: str
    cohort: str
    domain: str
    gold_strict: int
    serialization: str
    variant: str
    sample: Mapping[str, Any]

    @property
    def row_id(self) -> str:
        return str(self.sample["sample_id"])

    @property
    def gold_label(self) -> float:
        """The base's gold score (0.0, 0.5 or 1.0)."""
        return float(self.sample["label"])

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Any], *, file: str | None = None, row: int | None = None
    ) -> CohortRow:
        if not isinstance(data, Mapping):
            raise InputError(f"expected a JSON object, got {type(data).__name__}", file=file,
                             row=row)
        check_keys(data, COHORT_KEYS, file=file, row=row, required=COHORT_KEYS)
        for name in ("cohort", "variant", "domain", "serialization", "base_sample_id"):
            check_id(data[name], file=file, row=row, field=name)  # printed: ids' rule
        _text(data["axis"], file=file, row=row, field_name="axis")
        sample = _check_sample(data["sample"], data, file=file, row=row)
        label = data["original_label"]
        if isinstance(label, bool) or not isinstance(label, int) or label not in (0, 1):
            raise InputError(f"expected the strict label 0 or 1, got {label!r}", file=file,
                             row=row, field="original_label")
        strict = strict_decision(sample["label"])
        if label != strict:
            raise InputError(f"is {label} but sample.label {sample['label']!r} has strict "
                             f"label {strict}", file=file, row=row, field="original_label")
        return cls(axis=data["axis"], base_sample_id=data["base_sample_id"],
                   cohort=data["cohort"], domain=data["domain"], gold_strict=label,
                   serialization=data["serialization"], variant=data["variant"], sample=sample)

    def to_dict(self) -> dict[str, Any]:
        """The cohort file's object (``gold_strict`` written as ``original_label``)."""
        out = {"original_label" if k == "gold_strict" else k: v for k, v in asdict(self).items()}
        out["sample"] = dict(self.sample)
        return out


def _where(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


def _seconds(value: Any, *, file: str | None, row: int | None, field_name: str) -> float:
    if (isinstance(value, bool) or not isinstance(value, int | float)
            or not math.isfinite(value) or value < 0):
        raise InputError(f"expected a non-negative number of seconds, got {value!r:.60}",
                         file=file, row=row, field=field_name)
    return value


PROVENANCE_OBJECTS = ("backend_config", "decoding", "package_versions")  # others: strings


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
    chat_template_sha256: str | None  # None: the tokenizer has no chat template
    parser_version: str
    decoding: Mapping[str, Any]
    package_versions: Mapping[str, str]

    @property
    def sha256(self) -> str:
        return sha256_text(canonical_json(self.to_dict()))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, file: str | None = None,
                  row: int | None = None, where: str = "") -> Provenance:
        check_fields(data, cls, file=file, row=row, where=where)
        for name in (f.name for f in fields(cls) if f.name not in PROVENANCE_OBJECTS):
            if data[name] is not None or name != "chat_template_sha256":
                _text(data[name], file=file, row=row, field_name=_where(where, name))
        for name in (n for n in PROVENANCE_OBJECTS if not isinstance(data[n], Mapping)):
            raise InputError(f"expected an object, got {data[name]!r:.60}", file=file,
                             row=row, field=_where(where, name))
        return cls(**dict(data))

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for key in PROVENANCE_OBJECTS:
            out[key] = dict(out[key])
        return out


@dataclass(frozen=True)
class Attempt:
    """One generation attempt and how it parsed (values checked by ``rundir.record_checks``)."""

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
        cls, data: Mapping[str, Any], *, file: str | None = None, row: int | None = None,
        where: str = ""
    ) -> Attempt:
        check_fields(data, cls, file=file, row=row, where=where)
        return cls(**dict(data))


@dataclass(frozen=True)
class Timings:
    """Seconds of one generation (in a record: of all the row's attempts), a batch's wall
    time shared equally by its requests; ``prefill_s + decode_s == total_s`` up to rounding."""

    prefill_s: float
    decode_s: float
    total_s: float

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, file: str | None = None,
                  row: int | None = None, where: str = "") -> Timings:
        check_fields(data, cls, file=file, row=row, where=where)
        values = {f.name: _seconds(data[f.name], file=file, row=row,
                                   field_name=_where(where, f.name)) for f in fields(cls)}
        return cls(**values)

    def to_dict(self) -> dict[str, float]:
        return {"prefill_s": self.prefill_s, "decode_s": self.decode_s, "total_s": self.total_s}

    def __add__(self, other: Timings) -> Timings:
        return Timings(self.prefill_s + other.prefill_s, self.decode_s + other.decode_s,
                       self.total_s + other.total_s)


@dataclass(frozen=True)
class Record:
    """One (run, cohort row) result with full provenance.

    ``status`` is ``ok`` (parsed, ``score`` set), ``parse_error`` (every attempt failed to
    parse; ``error_type`` set), ``truncated`` (the same, the last one reaching ``max_new_tokens``)
    or ``inference_error`` (the backend failed; ``error_type`` holds the message). ``output_*`` and
    ``decision_margin`` come from the final attempt. ``row_id`` is the cohort row's id,
    ``base_sample_id`` the TS-Bench sample its variants derive from.
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
    provenance: Provenance
    status: str
    score: float | None
    error_type: str | None
    components: Mapping[str, Any] | None
    decision_margin: float | None
    output_text: str
    output_token_ids: list[int]
    finish_reason: str
    attempts: tuple[Attempt, ...]
    timings: Timings
    peak_memory_bytes: int | None
    created_at: str
    extra: Mapping[str, Any] = field(default_factory=dict)
    label_probs: Mapping[str, float] | None = None
    p_unsafe: float | None = None
    expected_score: float | None = None
    p_unsafe_reason: str | None = None

    def __post_init__(self) -> None:
        typed = (isinstance(self.provenance, Provenance), isinstance(self.timings, Timings),
                 isinstance(self.attempts, tuple), *(isinstance(a, Attempt) for a in self.attempts))
        if not all(typed):
            raise TypeError("Record takes a Provenance, a tuple of Attempt and a Timings")
        if self.status not in RECORD_STATUSES:
            raise InputError(f"status must be one of {RECORD_STATUSES}", field="status")
        if (self.status == "ok") != (self.score is not None):
            raise InputError("score is set exactly when status is ok", field="score")
        check_score(self.score, nullable=True)

    @property
    def valid(self) -> bool:
        return self.status == "ok"

    @property
    def strict_decision(self) -> int:
        """Strict (unsafe) decision, fail-closed: invalid rows count as 1."""
        return strict_decision(self.score)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, file: str | None = None,
                  row: int | None = None) -> Record:
        """A record from one ``records.jsonl`` object; a key missing or not known (also in
        ``provenance``, ``attempts[i]``, ``timings``) is an error naming file, row, field."""
        check_fields(data, cls, file=file, row=row)
        attempts = data["attempts"]
        if not isinstance(attempts, list):
            raise InputError(f"expected a list, got {attempts!r:.60}", file=file, row=row,
                             field="attempts")
        values = dict(data)
        values["provenance"] = Provenance.from_dict(data["provenance"], file=file, row=row,
                                                    where="provenance")
        values["attempts"] = tuple(Attempt.from_dict(a, file=file, row=row, where=f"attempts[{i}]")
                                   for i, a in enumerate(attempts))
        values["timings"] = Timings.from_dict(data["timings"], file=file, row=row, where="timings")
        try:
            return cls(**values)
        except InputError as exc:
            raise InputError(exc.message, file=file, row=row, field=exc.field) from exc

    def to_dict(self) -> dict[str, Any]:
        # json.loads(json.dumps(asdict(self))) without asdict's deep copies
        out: dict[str, Any] = json.loads(json.dumps(self, default=_plain))
        keep = any(out[k] is not None for k in SCORE_KEYS)
        return out if keep else {k: v for k, v in out.items() if k not in SCORE_KEYS}


def _plain(value: Any) -> dict[str, Any]:
    """``json.dumps``'s ``default`` for a record: a dataclass or a mapping as a shallow dict."""
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in fields(value)}
    return dict(value)  # a mapping; anything else raises TypeError, as json does
