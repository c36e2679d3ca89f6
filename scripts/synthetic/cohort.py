"""A synthetic cohort with TS-Guard's published length profile (token ids only).

Input: a row count (a multiple of 4, at most 256), the vocabulary size, the
EOS ids, a seed, and optionally one fixed prompt length (the long-prompt
points). Output: ``Row`` objects in cohort order (base sample, then its
variants original, marker, alias, combined) and a summary of the lengths
achieved beside the target.

The published profile (UPSTREAM.md, the paper's Q8 Mac run over 256 rows):
prompts 988-13,087 tokens, median 1,979; outputs 110-2,048, median 215.
Lengths are drawn from one quantile curve per profile: from the minimum to
the median log-linearly over the lower half, from the median to the maximum
over the upper half along ``ln(median) + (ln(max) - ln(median)) * u**3``
(a long thin tail, most rows near the median). With N rows of B = N/4 bases,
base k gets the prompt length at quantile k / (B - 1) and the output lengths
are the curve at k / (N - 1) over the rows, shuffled with the seed; so
every row count hits the minimum and maximum exactly and the median to
within the rounding of the two middle points of an even count.

Prompt layout (random ids below the EOS ids): a template head shared by every
row (``HEAD`` tokens), the tool descriptions (20% of the rest), the
interaction history (65%), the current action and a shared template tail
(``TAIL`` tokens). The tool name (3 tokens) occurs once in the tool
descriptions, twice in the history and once in the action. The variants edit
as the real ones do: ``marker`` replaces 4 tokens at 60% of the history,
``alias`` replaces every occurrence of the tool name, ``combined`` does both.
Edits keep the token count, so a variant is exactly as long as its base.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

PROMPT = (988, 1979, 13087)  # min, median, max input tokens
OUTPUT = (110, 215, 2048)  # min, median, max output tokens
MAX_ROWS = 256
VARIANTS = ("original", "marker", "alias", "combined")
HEAD = 600  # template instructions shared by every row (assumed; the toy template's is 48)
TAIL = 40
NAME = 3  # tokens of the tool name
MARKER = 4  # tokens the marker edit replaces


@dataclass(frozen=True)
class Row:
    row_id: str
    base: int
    variant: str
    prompt: tuple[int, ...]
    output_tokens: int  # forced: the EOS id is the output's last token


def quantile(q: float, profile: tuple[int, int, int]) -> float:
    low, mid, high = (math.log(v) for v in profile)
    if q <= 0.5:
        return math.exp(low + (mid - low) * (2 * q))
    return math.exp(mid + (high - mid) * (2 * q - 1) ** 3)


def _points(n: int, profile: tuple[int, int, int]) -> list[int]:
    if n == 1:
        return [profile[1]]
    return [round(quantile(k / (n - 1), profile)) for k in range(n)]


def _base(rng: random.Random, length: int, vocab: int) -> tuple[list[int], list[list[int]]]:
    """A base prompt body and the positions of its tool-name occurrences."""
    def ids(n: int) -> list[int]:
        return [rng.randrange(vocab) for _ in range(n)]

    body = length - HEAD - TAIL
    tools, history = int(body * 0.2), int(body * 0.65)
    action = body - tools - history
    name = ids(NAME)
    parts = [ids(tools), ids(history), ids(action)]
    sites = [(0, int(tools * 0.3)), (1, int(history * 0.25)), (1, int(history * 0.8)),
             (2, min(2, action - NAME))]
    occurrences = []
    offsets = [0, tools, tools + history]
    for part, at in sites:
        parts[part][at : at + NAME] = name
        occurrences.append(list(range(HEAD + offsets[part] + at, HEAD + offsets[part] + at + NAME)))
    return parts[0] + parts[1] + parts[2], occurrences


def build(rows: int, vocab: int, eos_ids: Sequence[int], *, seed: int = 0,
          prompt_tokens: int | None = None) -> list[Row]:
    """``rows`` synthetic rows (see the module docstring)."""
    if rows < 4 or rows % 4 or rows > MAX_ROWS:
        raise ValueError(f"rows must be a multiple of 4 from 4 to {MAX_ROWS}, got {rows}")
    if prompt_tokens is not None and prompt_tokens < HEAD + TAIL + 100:
        raise ValueError(f"prompt_tokens must be >= {HEAD + TAIL + 100}, got {prompt_tokens}")
    usable = min(eos_ids) if min(eos_ids) > vocab // 2 else vocab
    rng = random.Random(seed)
    head = [rng.randrange(usable) for _ in range(HEAD)]
    tail = [rng.randrange(usable) for _ in range(TAIL)]
    bases = rows // 4
    lengths = ([prompt_tokens] * bases if prompt_tokens is not None
               else _points(bases, PROMPT))
    outputs = _points(rows, OUTPUT)
    random.Random(seed + 1).shuffle(outputs)
    out: list[Row] = []
    for b, length in enumerate(lengths):
        body, occurrences = _base(rng, length, usable)
        alias = [rng.randrange(usable) for _ in range(NAME)]
        marker_at = HEAD + int(len(body) * 0.2) + int(int(len(body) * 0.65) * 0.6)
        marker = [rng.randrange(usable) for _ in range(MARKER)]
        original = head + body + tail
        for v, variant in enumerate(VARIANTS):
            ids = list(original)
            if variant in ("marker", "combined"):
                ids[marker_at : marker_at + MARKER] = marker
            if variant in ("alias", "combined"):
                for positions in occurrences:
                    for p, token in zip(positions, alias, strict=True):
                        ids[p] = token
            out.append(Row(f"b{b:02d}-{variant}", b, variant, tuple(ids),
                           outputs[b * 4 + v]))
    return out


def _stats(values: Sequence[int]) -> dict[str, Any]:
    return {"min": min(values), "median": statistics.median(values), "max": max(values),
            "mean": round(statistics.fmean(values), 1), "total": sum(values)}


def summary(rows: Sequence[Row]) -> dict[str, Any]:
    """Achieved prompt and output lengths beside the published target."""
    return {
        "rows": len(rows),
        "prompt": {"target": dict(zip(("min", "median", "max"), PROMPT, strict=True)),
                   "achieved": _stats([len(r.prompt) for r in rows])},
        "output": {"target": dict(zip(("min", "median", "max"), OUTPUT, strict=True)),
                   "achieved": _stats([r.output_tokens for r in rows])},
    }


def format_summary(s: dict[str, Any]) -> str:
    lines = [f"length profile, {s['rows']} rows:   min  median     max    mean "
             "(target min/median/max)"]
    for key in ("prompt", "output"):
        a, t = s[key]["achieved"], s[key]["target"]
        lines.append(f"  {key:7s} tokens {a['min']:8d} {a['median']:7.0f} {a['max']:7d} "
                     f"{a['mean']:7.0f}  ({t['min']} / {t['median']} / {t['max']})")
    return "\n".join(lines)
