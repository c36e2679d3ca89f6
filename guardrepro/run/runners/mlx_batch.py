"""Batched greedy decoding on mlx-lm models (the MLX runner's ``batch_size > 1``).

Input: a loaded mlx-lm model whose layer caches are mlx-lm ``KVCache`` objects
(full attention), a batch of token-id prompts, the EOS id set,
``max_new_tokens`` and the prefill chunk size. Output: per prompt, in input
order, a ``Decoded``: the generated ids (ending with the EOS id when one was
produced), the top-1 minus top-2 gap of the float32 logits at every step, the
finish reason (``"stop"`` or ``"length"``) and the seconds its prefill took.

How it stays the batch-1 loop:

- Each prompt is prefilled alone exactly as the runner's batch-1 path does
  (chunks of ``prefill_step_size`` over all but the last token, then the last
  token), so every first token and first margin are those of batch 1.
- The per-prompt caches are merged into one left-padded ``BatchKVCache``
  (mlx-lm's own merge: each row keeps its positions; padding is masked) and
  all unfinished rows decode together, one token a step; greedy is the argmax
  of each row's raw float32 logits, as at batch 1.
- A row that produced an EOS id leaves the batch at once (``filter``).

Batched kernels may round differently from batch 1; whether tokens stay the
same is a property of the model and the recipe (float32 on the toy guard: the
same; quantized or bf16 weights: not guaranteed). The runner therefore checks
its first batch against batch 1 and falls back when they differ (see
``mlx_runner``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Decoded:
    token_ids: list[int]
    margins: list[float]
    finish_reason: str  # "stop" | "length"
    prefill_s: float


def unsupported_reason(model: Any) -> str | None:
    """Why ``model``'s caches cannot be batched, or None when they can."""
    from mlx_lm.models.cache import KVCache, make_prompt_cache

    kinds = {type(c).__name__ for c in make_prompt_cache(model)}
    if kinds != {KVCache.__name__}:
        return f"cache types {sorted(kinds)} (batched decoding needs plain KVCache layers)"
    return None


def prefill(model: Any, ids: Sequence[int], step: int) -> tuple[list[Any], Any]:
    """One prompt alone: its cache and its last position's float32 logits."""
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    cache = make_prompt_cache(model)
    prompt = mx.array(list(ids))
    for lo in range(0, len(ids) - 1, step):
        hi = min(lo + step, len(ids) - 1)
        model(prompt[None, lo:hi], cache=cache)
        mx.eval([c.state for c in cache])
    logits = model(prompt[None, -1:], cache=cache)[0, -1].astype(mx.float32)
    return cache, logits


def decode_batch(
    model: Any,
    prompts: Sequence[Sequence[int]],
    *,
    eos_token_ids: Sequence[int],
    max_new_tokens: int,
    prefill_step_size: int,
) -> list[Decoded]:
    """Greedy-decode ``prompts`` together (see the module docstring)."""
    import mlx.core as mx

    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("every prompt needs at least one token")
    eos = set(int(i) for i in eos_token_ids)
    caches, first, prefill_s = [], [], []
    for ids in prompts:
        started = time.perf_counter()
        cache, logits = prefill(model, ids, prefill_step_size)
        mx.eval(logits, [c.state for c in cache])
        caches.append(cache)
        first.append(logits)
        prefill_s.append(time.perf_counter() - started)
    batch = [caches[0][i].merge([c[i] for c in caches]) for i in range(len(caches[0]))]
    del caches
    tokens: list[list[int]] = [[] for _ in prompts]
    margins: list[list[float]] = [[] for _ in prompts]
    finish = ["length"] * len(prompts)
    alive = list(range(len(prompts)))
    logits = mx.stack(first)
    for step in range(max_new_tokens):
        nxt = mx.argmax(logits, axis=-1)
        top2 = mx.topk(logits, 2, axis=-1)  # ascending within the pair, as at batch 1
        mx.eval(nxt, top2)
        pairs: Any = top2.tolist()
        chosen: Any = nxt.tolist()
        keep = []
        for row, (token, pair) in enumerate(zip(chosen, pairs, strict=True)):
            index = alive[row]
            tokens[index].append(int(token))
            margins[index].append(float(abs(pair[0] - pair[1])))
            if int(token) in eos:
                finish[index] = "stop"
            else:
                keep.append(row)
        if not keep or step + 1 == max_new_tokens:
            break
        if len(keep) < len(alive):
            rows = mx.array(keep)
            for layer in batch:
                layer.filter(rows)
            nxt = nxt[rows]
            alive = [alive[row] for row in keep]
        logits = model(nxt[:, None], cache=batch)[:, -1].astype(mx.float32)
    return [Decoded(t, m, f, p) for t, m, f, p in
            zip(tokens, margins, finish, prefill_s, strict=True)]
