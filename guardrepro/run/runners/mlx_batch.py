"""Batched greedy decoding on mlx-lm models (the MLX runner's ``batch_size > 1``).

Input: a loaded mlx-lm model whose layer caches are mlx-lm ``KVCache`` objects
(full attention), a batch of token-id prompts, the EOS id set,
``max_new_tokens`` and the prefill chunk size. Output: per prompt, in input
order, a ``Decoded``: the generated ids (ending with the EOS id when one was
produced), the top-1 minus top-2 gap of the float32 logits at every step, the
finish reason (``"stop"`` or ``"length"``), the seconds its prefill took and
how many of its prompt positions were reused from another prompt's cache.

How it stays the batch-1 loop:

- Each prompt is prefilled alone exactly as the runner's batch-1 path does
  (chunks of ``prefill_step_size`` over all but the last token, then the last
  token), so every first token and first margin are those of batch 1.
- The per-prompt caches are merged into one left-padded ``BatchKVCache``
  (mlx-lm's own merge: each row keeps its positions; padding is masked) and
  all unfinished rows decode together, one token a step; greedy is the argmax
  of each row's raw float32 logits, as at batch 1.
- A row that produced an EOS id leaves the batch at once (``filter``).

Prompt-prefix reuse (``reuse=True``; also the runner's batch-1 path): guard
prompts share the template head, and the edited variants of one base sample
are the same prompt up to the first edited token. A prompt that shares at
least ``MIN_PREFIX`` leading tokens with a prompt already prefilled (in the
batch, or in the runner's ``PrefixStore`` of recent prompts at batch 1) starts
from fresh caches holding copies of that prompt's first L positions (causal
attention: position i's keys and values depend only on tokens 0..i) and
prefills only the remainder, chunked as above, the last token alone. L is at
most the prompt's length minus one, so the last token always runs. The copies
are new buffers: the cache they came from is never written through them, and
positions below an mlx-lm ``KVCache``'s offset are never overwritten by later
steps (it appends; growing concatenates), so a stored cache keeps its prompt
positions while it decodes. The remainder attends over a longer key range
than its query range, which may round differently from a full prefill, so
the runner checks the first reusing rows against a full prefill.

Batched kernels may round differently from batch 1; whether tokens stay the
same is a property of the model and the recipe (float32 on the toy guard: the
same; quantized or bf16 weights: not guaranteed). The runner therefore checks
its first batch against batch 1 and falls back when they differ (see
``mlx_runner``).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from typing import Any

from guardrepro.run.runners.greedy import (
    MIN_PREFIX,
    Decoded,
    Prefix,
    PrefixStore,
    record_labels,
    record_step,
)


def copy_prefix(cache: Sequence[Any], length: int) -> list[Any]:
    """Fresh ``KVCache`` layers holding copies of ``cache``'s first ``length``
    positions (new buffers, capacity rounded up to the cache step)."""
    import mlx.core as mx
    from mlx_lm.models.cache import KVCache

    out = []
    for layer in cache:
        if layer.offset < length:
            raise ValueError(f"a cache of {layer.offset} positions has no prefix of {length}")
        fresh = KVCache()
        capacity = -(-length // fresh.step) * fresh.step
        buffers = []
        for held in (layer.keys, layer.values):
            batch, heads, _, dim = held.shape
            buffer = mx.zeros((batch, heads, capacity, dim), held.dtype)
            buffer[..., :length, :] = held[..., :length, :]
            buffers.append(buffer)
        fresh.keys, fresh.values = buffers
        fresh.offset = length
        out.append(fresh)
    return out


MASK_BUG_MLX_LM = (0, 31, 3)  # mlx-lm issue #1906, on mlx 0.32.2 / mlx-lm 0.31.3


def version_reason(mlx_lm_version: str | None) -> str | None:
    """Why this mlx-lm cannot batch, or None: mlx-lm issue #1906 reports that
    batch generation ignores the padding mask on mlx 0.32.2 / mlx-lm 0.31.3 (the
    versions the paper pins). Batched decoding here relies
    on mlx-lm's left-padded ``BatchKVCache`` and its mask, so mlx-lm 0.31.3 and
    earlier (not known to be fixed) run at batch 1."""
    if mlx_lm_version is None:
        return None
    parts = tuple(int(p) for p in re.findall(r"[0-9]+", mlx_lm_version)[:3])
    if parts and parts <= MASK_BUG_MLX_LM:
        return (f"mlx-lm {mlx_lm_version}: batch generation ignores the padding mask on "
                "mlx-lm <= 0.31.3 (mlx-lm issue #1906)")
    return None


def unsupported_reason(model: Any) -> str | None:
    """Why ``model``'s caches cannot be batched, or None when they can."""
    from mlx_lm.models.cache import KVCache, make_prompt_cache

    kinds = {type(c).__name__ for c in make_prompt_cache(model)}
    if kinds != {KVCache.__name__}:
        return f"cache types {sorted(kinds)} (batched decoding needs plain KVCache layers)"
    return None


def prefill(model: Any, ids: Sequence[int], step: int,
            prefix: Prefix[list[Any]] | None = None) -> tuple[list[Any], Any]:
    """One prompt alone: its cache and its last position's float32 logits; with
    ``prefix``, only the positions after it are computed."""
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    if prefix is None:
        cache, start = make_prompt_cache(model), 0
    elif not MIN_PREFIX <= prefix.length < len(ids):
        raise ValueError(f"a reused prefix of {prefix.length} positions for a prompt of "
                         f"{len(ids)} tokens")
    else:
        cache, start = copy_prefix(prefix.cache, prefix.length), prefix.length
    prompt = mx.array(list(ids))
    for lo in range(start, len(ids) - 1, step):
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
    reuse: bool = False,
    adjust: Callable[[int, Sequence[int], Any], Any] | None = None,
    label_ids: Sequence[int] = (),
) -> list[Decoded]:
    """Greedy-decode ``prompts`` together (see the module docstring); with
    ``reuse``, a prompt prefills on top of the longest prefix it shares with a
    prompt before it in the batch. ``adjust(step, live prompt indices,
    logits)`` (benchmarks: forced output lengths) may rewrite each step's
    logits before the choice. ``label_ids``: each step's logits of these ids
    are kept per row (``Decoded.label_logits``)."""
    import mlx.core as mx

    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("every prompt needs at least one token")
    eos = set(int(i) for i in eos_token_ids)
    caches, first, prefill_s, reused = [], [], [], []
    store: PrefixStore[list[Any]] = PrefixStore(None)
    for ids in prompts:
        started = time.perf_counter()
        prefix = store.find(ids) if reuse else None
        cache, logits = prefill(model, ids, prefill_step_size, prefix)
        mx.eval(logits, [c.state for c in cache])
        if reuse:
            store.add(ids, cache)
        caches.append(cache)
        first.append(logits)
        prefill_s.append(time.perf_counter() - started)
        reused.append(0 if prefix is None else prefix.length)
    batch = [caches[0][i].merge([c[i] for c in caches]) for i in range(len(caches[0]))]
    del caches, store
    tokens: list[list[int]] = [[] for _ in prompts]
    margins: list[list[float]] = [[] for _ in prompts]
    labels: list[list[list[float]]] = [[] for _ in prompts]
    columns = mx.array(list(label_ids)) if label_ids else None
    finish = ["length"] * len(prompts)
    alive = list(range(len(prompts)))
    logits = mx.stack(first)
    for step in range(max_new_tokens):
        if adjust is not None:
            logits = adjust(step, alive, logits)
        nxt = mx.argmax(logits, axis=-1)
        top2 = mx.topk(logits, 2, axis=-1)  # ascending within the pair, as at batch 1
        mx.eval(nxt, top2)
        pairs: Any = top2.tolist()
        chosen: Any = nxt.tolist()
        gaps = [abs(pair[0] - pair[1]) for pair in pairs]
        if columns is not None:
            record_labels(logits[:, columns].tolist(), alive, labels)
        keep = record_step(chosen, gaps, alive, eos, tokens, margins, finish)
        if not keep or step + 1 == max_new_tokens:
            break
        if len(keep) < len(alive):
            rows = mx.array(keep)
            for layer in batch:
                layer.filter(rows)
            nxt = nxt[rows]
            alive = [alive[row] for row in keep]
        logits = model(nxt[:, None], cache=batch)[:, -1].astype(mx.float32)
    return [Decoded(t, m, f, p, r, v) for t, m, f, p, r, v in
            zip(tokens, margins, finish, prefill_s, reused, labels, strict=True)]
