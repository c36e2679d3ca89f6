"""Teacher-forced divergence of a candidate model from a reference run.

Input: a reference run (its records, and the profile that made it) and a
candidate run profile. For every row the reference's own prompt ids followed
by its own generated ids are fed to a model in one forward pass.
Output: ``reference_logprobs.npz`` (written once per reference run, then
reused by every candidate) and, per candidate, per-row and overall figures:
mean and 99th-percentile KL(reference || candidate) per generated token,
top-1 agreement, and at the decision token (the token carrying the first
character of the harmfulness rating) the KL, the candidate's top1-top2 logit
margin and the reference's.

Invariants:
- Positions: for prompt ids P (length n) and generated ids G (length m) the
  input is P + G[:-1] and the m scored positions are n-1 .. n+m-2, i.e. the
  distributions that produced G[0] .. G[m-1] (the EOS that stopped it included).
- The reference stores full-vocabulary log-probabilities (float32) of those
  positions only, not top-k: KL is exact over the vocabulary. Rows without
  generated ids (inference errors) are counted, never scored.
- KL(p || q) = sum_v p_v (log p_v - log q_v) in float64, with log-softmax
  computed by the max-shift formula; top-1 ties go to the lowest id.
- The prompt ids are re-derived with the reference profile and must hash to
  the record's ``input_sha256``; the npz is written atomically and loaded with
  ``allow_pickle=False``; its ``run`` field names the reference provenance.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from guardrepro.artifacts.store import atomic_write_bytes
from guardrepro.errors import InputError
from guardrepro.schema import Record

REFERENCE_FILE = "reference_logprobs.npz"


def log_softmax(logits: np.ndarray) -> np.ndarray:
    x = np.asarray(logits, dtype=np.float64)
    shifted = x - x.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def token_kl(ref_logprobs: np.ndarray, cand_logprobs: np.ndarray) -> np.ndarray:
    """Per position KL(reference || candidate) from two (positions, vocab) log-prob arrays."""
    p = np.asarray(ref_logprobs, dtype=np.float64)
    q = np.asarray(cand_logprobs, dtype=np.float64)
    if p.shape != q.shape:
        raise InputError(f"reference and candidate shapes differ: {p.shape} vs {q.shape}")
    kl: np.ndarray = (np.exp(p) * (p - q)).sum(axis=-1)
    return kl


def top2_margin(logits: np.ndarray) -> np.ndarray:
    part = np.sort(np.asarray(logits, dtype=np.float64), axis=-1)
    margin: np.ndarray = part[..., -1] - part[..., -2]
    return margin


@dataclass(frozen=True)
class ForcedRow:
    """One row to score: prompt ids, generated ids, decision index (or None)."""

    row_id: str
    prompt_ids: tuple[int, ...]
    output_ids: tuple[int, ...]
    decision_index: int | None


def forced_logits(runner: Any, row: ForcedRow) -> np.ndarray:
    """Float32 logits at the scored positions of ``row`` (see module docstring)."""
    ids = list(row.prompt_ids) + list(row.output_ids[:-1])
    keep = len(row.output_ids)
    backend = getattr(runner, "backend", None)
    if backend == "mlx":
        return _mlx_logits(runner, ids, keep)
    if backend == "hf":
        import torch

        with torch.no_grad():
            tensor = torch.tensor([ids], device=runner.device)
            out = runner.model(input_ids=tensor, logits_to_keep=keep).logits[0]
        return np.asarray(out.float().cpu().numpy())[-keep:]
    raise InputError(f"teacher-forced logits are not available for backend {backend!r}",
                     field="backend")


def _mlx_logits(runner: Any, ids: Sequence[int], keep: int) -> np.ndarray:
    import mlx.core as mx

    model = runner.model
    inputs = mx.array([list(ids)])
    inner = getattr(model, "model", None)
    if inner is not None and hasattr(model, "args"):  # project only the kept positions
        hidden = inner(inputs)[:, -keep:]
        if getattr(model.args, "tie_word_embeddings", False):
            out = inner.embed_tokens.as_linear(hidden)
        else:
            out = model.lm_head(hidden)
    else:
        out = model(inputs)[:, -keep:]
    out = out[0].astype(mx.float32)
    mx.eval(out)
    return np.array(out)


def forced_rows(records: Sequence[Record], prompt_ids: Mapping[str, tuple[int, ...]],
                decision_index: Mapping[str, int | None]) -> list[ForcedRow]:
    rows = []
    for rec in sorted(records, key=lambda r: r.row_id):
        if not rec.output_token_ids:
            continue
        rows.append(ForcedRow(rec.row_id, prompt_ids[rec.row_id],
                              tuple(rec.output_token_ids), decision_index.get(rec.row_id)))
    return rows


def save_reference(path: Path, rows: Sequence[ForcedRow], logprobs: Sequence[np.ndarray],
                   meta: Mapping[str, Any]) -> None:
    """Write the reference log-probs of every row as one npz, atomically."""
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(r.output_ids) for r in rows])
    flat_prompt = np.array([i for r in rows for i in r.prompt_ids], dtype=np.int64)
    prompt_offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    prompt_offsets[1:] = np.cumsum([len(r.prompt_ids) for r in rows])
    buffer = io.BytesIO()
    np.savez(
        buffer,
        row_ids=np.array([r.row_id for r in rows], dtype=str),
        offsets=offsets,
        output_ids=np.array([i for r in rows for i in r.output_ids], dtype=np.int64),
        prompt_ids=flat_prompt,
        prompt_offsets=prompt_offsets,
        decision_index=np.array([-1 if r.decision_index is None else r.decision_index
                                 for r in rows], dtype=np.int64),
        logprobs=np.concatenate([np.asarray(lp, dtype=np.float32) for lp in logprobs]),
        meta=np.array(json.dumps(dict(meta), sort_keys=True)),
    )
    atomic_write_bytes(path, buffer.getvalue())  # names the path on a full disk


@dataclass(frozen=True)
class ReferenceLogprobs:
    rows: tuple[ForcedRow, ...]
    logprobs: tuple[np.ndarray, ...]
    meta: Mapping[str, Any]


def load_reference(path: Path) -> ReferenceLogprobs:
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
    except (OSError, ValueError, KeyError) as exc:
        raise InputError(f"cannot read reference log-probs: {exc}", file=str(path)) from exc
    off, poff = arrays["offsets"], arrays["prompt_offsets"]
    rows, logprobs = [], []
    for i, rid in enumerate(arrays["row_ids"].tolist()):
        decision = int(arrays["decision_index"][i])
        rows.append(ForcedRow(str(rid),
                              tuple(int(x) for x in arrays["prompt_ids"][poff[i]:poff[i + 1]]),
                              tuple(int(x) for x in arrays["output_ids"][off[i]:off[i + 1]]),
                              None if decision < 0 else decision))
        logprobs.append(arrays["logprobs"][off[i]:off[i + 1]])
    return ReferenceLogprobs(tuple(rows), tuple(logprobs), json.loads(str(arrays["meta"])))


def row_divergence(row: ForcedRow, ref_logprobs: np.ndarray,
                   cand_logits: np.ndarray) -> tuple[dict[str, Any], np.ndarray]:
    """Per-row figures and the per-token KL values."""
    cand = log_softmax(cand_logits)
    kl = token_kl(ref_logprobs, cand)
    agree = np.argmax(ref_logprobs, axis=-1) == np.argmax(cand, axis=-1)
    out: dict[str, Any] = {"row_id": row.row_id, "tokens": int(kl.size),
                           "mean_kl": float(kl.mean()), "max_kl": float(kl.max()),
                           "top1_agree": int(agree.sum())}
    d = row.decision_index
    if d is not None and d < kl.size:
        out.update(decision_index=d, decision_kl=float(kl[d]),
                   decision_top1_agree=bool(agree[d]),
                   decision_margin=float(top2_margin(cand_logits[d])),
                   reference_decision_margin=float(top2_margin(ref_logprobs[d])))
    else:
        out.update(decision_index=None, decision_kl=None, decision_top1_agree=None,
                   decision_margin=None, reference_decision_margin=None)
    return out, kl


def summarize(rows: Sequence[Mapping[str, Any]], kls: Sequence[np.ndarray]) -> dict[str, Any]:
    """Overall figures: KL pooled over every scored token, decision tokens apart."""
    pooled = np.concatenate(kls) if kls else np.zeros(0)
    decided = [r for r in rows if r["decision_kl"] is not None]
    tokens = int(pooled.size)
    return {
        "rows": len(rows),
        "tokens": tokens,
        "mean_kl": float(pooled.mean()) if tokens else None,
        "p99_kl": float(np.quantile(pooled, 0.99)) if tokens else None,
        "max_kl": float(pooled.max()) if tokens else None,
        "top1_agreement": {"count": sum(r["top1_agree"] for r in rows), "denominator": tokens},
        "decision_rows": len(decided),
        "decision_mean_kl": (sum(r["decision_kl"] for r in decided) / len(decided)
                             if decided else None),
        "decision_max_kl": max((r["decision_kl"] for r in decided), default=None),
        "decision_top1_agreement": {"count": sum(1 for r in decided if r["decision_top1_agree"]),
                                    "denominator": len(decided)},
        "decision_min_margin": min((r["decision_margin"] for r in decided), default=None),
    }
