"""How a runner decodes: ``DecodingParams`` and the seeds of sampled mode.

A profile's ``[decoding]`` table and a manifest's ``decoding`` object read
through ``DecodingParams.from_dict``; ``sampled_seed`` is the published seed
rule (docs/PROTOCOL.md).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal

from guardrepro.errors import InputError
from guardrepro.schema import check_fields


@dataclass(frozen=True)
class DecodingParams:
    """How a runner decodes. ``greedy``: one attempt, temperature 0, no top-k,
    no top-p, no repetition penalty. ``sampled`` (the authors' mode):
    temperature/top_p sampling, up to ``max_attempts`` generations until one
    parses; attempt ``a`` of a row (from 1) is seeded with ``sampled_seed(base
    id, serialization, a, repeat=seed)``. ``seed`` is the repeat index of a
    seeded repeat (``run --seed N``): None or 0 gives the published seeds,
    any other value a different, documented set (see ``sampled_seed``)."""

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
        if self.seed is not None and (isinstance(self.seed, bool) or self.seed < 0):
            raise InputError(f"seed (the repeat index) must be >= 0, got {self.seed!r}",
                             field="seed")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, file: str | None = None) -> DecodingParams:
        check_fields(data, cls, file=file, row=None)
        return cls(**dict(data))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def seed_for(self, base_sample_id: str, serialization: str, attempt: int) -> int | None:
        """Seed of ``attempt`` (from 1) of a cohort row in sampled mode (None
        when greedy): ``sampled_seed`` of the row's base id and serialization,
        so every variant of a base gets the same seeds."""
        if self.mode == "greedy":
            return None
        repeat = 0 if self.seed is None else self.seed
        return sampled_seed(base_sample_id, serialization, attempt, repeat=repeat)


SAMPLED_SEED_SALT = "260828"


def sampled_seed_text(base_sample_id: str, serialization: str, attempt: int,
                      repeat: int = 0) -> str:
    """The string hashed for a sampled-mode seed. Repeat 0 (the published
    seeds): ``"260828:<base_sample_id>:<serialization>:<attempt>"``; repeat
    ``r > 0``: the same string followed by ``":r<r>"`` (e.g. ``...:1:r2``), so
    a repeat never reuses a published seed string and all variants of a base
    still share a repeat's seeds. ``attempt`` counts from 1 (published code)."""
    if attempt < 1 or repeat < 0:
        raise InputError(f"attempt must be >= 1 and repeat >= 0, got {attempt}, {repeat}",
                         field="seed")
    text = f"{SAMPLED_SEED_SALT}:{base_sample_id}:{serialization}:{attempt}"
    return text if repeat == 0 else f"{text}:r{repeat}"


def sampled_seed(base_sample_id: str, serialization: str, attempt: int, repeat: int = 0) -> int:
    """First 4 bytes (big-endian unsigned) of the sha256 of
    ``sampled_seed_text(...)`` encoded as UTF-8: an integer in [0, 2**32)."""
    text = sampled_seed_text(base_sample_id, serialization, attempt, repeat)
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:4], "big")
