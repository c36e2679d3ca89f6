"""A lean greedy decoder for Llama-family transformers models (the hf runner's
``decode_loop = "lean"``).

Input: the tensors of a ``Qwen2ForCausalLM`` or ``LlamaForCausalLM``
checkpoint (``lean_weights.LeanWeights``: read from its safetensors, or taken
from a loaded model; default RoPE, full attention, SDPA), a batch of token-id
prompts, the EOS id set and ``max_new_tokens``. Output: per prompt, in input
order, a ``Decoded``: the generated ids (ending with the EOS id when one was
produced), the top-1 minus top-2 logit gap at every generated position, and
the finish reason (``"stop"`` or ``"length"``).

How it stays ``generate(do_sample=False)``:

- Prefill runs each prompt alone through a hand-written forward that does
  what the model's own ``forward`` does when ``generate`` calls it at batch 1
  (no attention mask, positions from 0, the last position's logits only),
  operation for operation: the same SDPA call transformers' ``sdpa``
  attention makes (causal, grouped-query attention left to SDPA; with a
  reused prefix, the offset causal mask and the kv heads repeated), so its KV
  cache and logits are bit for bit the model's (tests/test_lean_weights.py),
  and no transformers model need be built. No prompt pays for another's
  padding. Prompts of one batch share token prefixes: the guard template's
  head, and far more between the edited variants of one base sample, which
  differ only from the first edited token on. Each prompt therefore looks
  up the longest prefix it shares with a prompt of the batch already
  prefilled; when that is at least ``MIN_PREFIX`` tokens, it reuses those
  positions' keys and values (causal attention: a position's KV depends only
  on the tokens up to it) and runs only its own remainder, at the same
  positions, attending to the reused keys (the tensors are shared, never
  written). A prompt with no such prefix (the first of every batch) gets
  bit-for-bit the naive loop's first token, margin and KV cache. A reused
  prefix makes the remainder's attention run with a key length longer than
  its query length, which may round the last bits differently (on the toy
  guard: margins within 1e-5, tokens identical on every row tested). The
  remainder runs with an explicit attention mask, which SDPA cannot skip
  half of as it does a causal prompt's, so a prefix is reused only where a
  FLOP estimate says it is cheaper (``worth_reusing``): always on short
  prompts, at 13k tokens only when it covers most of the prompt.
- Decoding then runs all unfinished sequences as one batch through a
  hand-written forward that applies the model's own weights with the same
  operations in the same order as the transformers modules (RMSNorm in
  float32, biases, RoPE by transformers' default rule, SDPA with the same
  GQA layout transformers picks: ``enable_gqa`` without a mask, the
  single-query "packed" layout with one), over preallocated KV buffers in
  which shorter prompts are left-padded and masked. Rows of very different
  lengths keep separate buffers (``lean_kv``: KV groups), so attention never
  reads another row's long padding; the projections and MLP of a step run
  over every row at once. It skips what costs time
  per step in ``generate``: logits processors, stopping criteria, mask
  builders, output containers, cache bookkeeping.
- The next token is ``argmax`` of the raw logits (no processor is active in
  the greedy configuration); the margin is ``topk(2)`` of the same logits in
  float32, as the hf runner's hook computes it.
- A sequence that produced an EOS id leaves the batch at once (its rows are
  dropped from the KV buffer, mask and positions), so finished rows cost
  nothing.

Tokens are what is guaranteed to match the naive loop, not float bits of
later margins: batched float32 kernels round differently from batch 1 (the
same holds for ``generate`` with left padding: margins moved by up to ~1e-5
on the toy guard). The tests compare token ids with ``generate`` at batch 1
on the toy guard and on tiny random models; ``guardrepro check-invariance``
measures it for any profile.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from guardrepro.run.runners.greedy import (
    MIN_PREFIX,
    Decoded,
    Prefix,
    PrefixStore,
    record_labels,
    record_step,
)
from guardrepro.run.runners.lean_kv import KV, KVGroup, drop, partition, place
from guardrepro.run.runners.lean_weights import LayerWeights, LeanWeights

REUSE_PAIR_COST = 2.0  # a masked (query, key) pair against a causal one (see worth_reusing)
# (tokens each live row has generated so far, prompt index of each live row, that
# step's logits) -> the logits to choose from
Adjust = Callable[[Sequence[int], Sequence[int], torch.Tensor], torch.Tensor]


def _rms(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    # transformers' Qwen2RMSNorm / LlamaRMSNorm, op for op
    dtype = x.dtype
    if dtype != torch.float32:  # the casts are no-ops in float32: skip their dispatch
        x = x.to(torch.float32)
    variance = x.pow(2).mean(-1, keepdim=True)
    x = x * torch.rsqrt(variance + eps)
    return weight * (x if dtype == torch.float32 else x.to(dtype))


def _slice(prefix: Prefix[KV] | None) -> KV | None:
    """The first ``prefix.length`` positions of a stored prompt's KV (views:
    the stored tensors are never written)."""
    if prefix is None:
        return None
    n = prefix.length
    return [(keys[:, :, :n], values[:, :, :n]) for keys, values in prefix.cache]


def _repeat_kv(x: torch.Tensor, groups: int) -> torch.Tensor:
    """(1, kv heads, n, d) -> (1, kv heads * groups, n, d), each kv head repeated
    ``groups`` times in place (transformers' ``repeat_kv``)."""
    batch, kv_heads, n, dim = x.shape
    return x[:, :, None, :, :].expand(batch, kv_heads, groups, n, dim).reshape(
        batch, kv_heads * groups, n, dim)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class LeanDecoder:
    """Greedy decoding with one model's weights (``lean_weights.LeanWeights``: a
    loaded transformers model's tensors, or read from its checkpoint)."""

    def __init__(self, model: Any, *, min_prefix: int = MIN_PREFIX) -> None:
        self.w = model if isinstance(model, LeanWeights) else LeanWeights.of_model(model)
        config = self.w.config
        self.eps = float(config.rms_norm_eps)
        self.heads = int(config.num_attention_heads)
        self.kv_heads = int(config.num_key_value_heads)
        self.head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // self.heads)
        self.scale = self.head_dim**-0.5
        self.weights = self.w.layers
        self._cos = self._sin = torch.empty(0)  # RoPE by position (``_rope``)
        self.device = self.w.device
        self.min_prefix = min_prefix
        kv = self.kv_heads * self.head_dim
        q = self.heads * self.head_dim
        hidden, inner = int(config.hidden_size), int(config.intermediate_size)
        # FLOPs per layer: per token in the projections and MLP, per (query, key) pair
        self._per_token = 2 * (2 * hidden * q + 2 * hidden * kv + 3 * hidden * inner)
        self._per_pair = 4 * q
        self.reused: list[int] = []  # per prompt of the last decode: positions reused

    def worth_reusing(self, shared: int, length: int) -> bool:
        """Whether prefilling the last ``length - shared`` tokens on top of a reused
        prefix is estimated cheaper than the whole prompt. A full prefill runs
        causal attention without a mask (SDPA skips the masked half: n^2 / 2
        pairs); the remainder needs an explicit mask, and SDPA then computes every
        (query, key) pair, r * n of them, and converts the mask per layer
        (measured on CPU: about twice the cost of a causal pair, ``REUSE_PAIR_COST``).
        Short prompts (the projections dominate) always reuse; at 13k tokens a
        prompt reuses only a prefix covering most of it."""
        rest = length - shared
        full = length * self._per_token + length * length / 2 * self._per_pair
        reuse = rest * self._per_token + REUSE_PAIR_COST * rest * length * self._per_pair
        return reuse < full

    def _prefill(self, prompt: Sequence[int], prefix: KV | None = None) -> tuple[KV, torch.Tensor]:
        """The prompt's KV cache and last-position logits; with ``prefix`` (the KV
        of the prompt's first ``prefix[0][0].shape[2]`` tokens), only the rest of
        the prompt runs, attending to the prefix's keys (the tensors are shared,
        never written: the cache holds new concatenations)."""
        start = 0 if prefix is None else int(prefix[0][0].shape[2])
        ids = torch.tensor([list(prompt[start:])], dtype=torch.long, device=self.device)
        n = ids.shape[1]
        h = F.embedding(ids, self.w.embed)
        positions = torch.arange(start, len(prompt), device=self.device)[None, :]
        cos, sin = self._rope_at(positions, h.dtype)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        mask = None
        if prefix is not None and n > 1:  # the causal pattern, offset by the prefix
            mask = (torch.arange(len(prompt), device=self.device)[None, :]
                    <= positions[0][:, None]).view(1, 1, n, len(prompt))
        cache: KV = []
        for i, w in enumerate(self.weights):
            residual = h
            x = _rms(h, w.norm_in, self.eps)
            q = F.linear(x, w.q, w.q_bias).view(1, n, -1, self.head_dim).transpose(1, 2)
            k = F.linear(x, w.k, w.k_bias).view(1, n, -1, self.head_dim).transpose(1, 2)
            v = F.linear(x, w.v, w.v_bias).view(1, n, -1, self.head_dim).transpose(1, 2)
            q = (q * cos) + (_rotate_half(q) * sin)
            k = (k * cos) + (_rotate_half(k) * sin)
            if prefix is not None:
                k = torch.cat([prefix[i][0], k], dim=-2)
                v = torch.cat([prefix[i][1], v], dim=-2)
            cache.append((k, v))
            out = self._prompt_attention(q, k, v, mask).reshape(1, n, -1).contiguous()
            h = residual + F.linear(out, w.o, w.o_bias)
            residual = h
            x = _rms(h, w.norm_post, self.eps)
            h = residual + F.linear(w.act(F.linear(x, w.gate)) * F.linear(x, w.up), w.down)
        h = _rms(h, self.w.norm, self.eps)
        return cache, F.linear(h[:, -1:, :], self.w.head)[:, -1, :]

    def _prompt_attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                          mask: torch.Tensor | None) -> torch.Tensor:
        """SDPA over a prompt's queries as transformers' ``sdpa`` attention calls it
        at batch 1: with no mask, causal (more than one query) and grouped-query
        attention left to SDPA (``enable_gqa``); with the prefix's mask, the kv
        heads repeated first. Output (1, queries, heads, head_dim), contiguous."""
        groups = self.heads // self.kv_heads
        extra: dict[str, Any] = {}
        if groups > 1 and mask is None:
            extra["enable_gqa"] = True
        elif groups > 1:
            k, v = _repeat_kv(k, groups), _repeat_kv(v, groups)
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=0.0, scale=self.scale,
            is_causal=q.shape[2] > 1 and mask is None, **extra)
        return out.transpose(1, 2).contiguous()

    def _rope_at(self, positions: torch.Tensor, dtype: torch.dtype
                 ) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin at ``positions`` (1, n), as transformers' default rotary
        embedding computes them: ``position * inv_freq`` in float32, repeated
        over both halves, then cast to the model's dtype."""
        freqs = positions[..., None].float() * self.w.inv_freq.to(dtype=torch.float)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(dtype), emb.sin().to(dtype)

    def _attend(self, w: LayerWeights, h: torch.Tensor, cos: Any, sin: Any) -> Any:
        rows = h.shape[0]
        q = F.linear(h, w.q, w.q_bias).view(rows, 1, -1, self.head_dim)
        k = F.linear(h, w.k, w.k_bias).view(rows, 1, -1, self.head_dim)
        v = F.linear(h, w.v, w.v_bias).view(rows, 1, -1, self.head_dim)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        q = (q * cos) + (_rotate_half(q) * sin)
        k = (k * cos) + (_rotate_half(k) * sin)
        return q, k, v

    def _rope(self, positions: torch.Tensor, like: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """cos and sin at ``positions`` (rows, 1) from a table of ``_rope_at`` over
        positions 0..n (extended as needed). Bit for bit the
        per-step call: each entry is one product ``inv_freq * position`` (a
        matmul of inner size 1) and its cos / sin, whatever the other positions."""
        top = int(positions.max()) + 1
        if top > self._cos.shape[0]:
            size = max(top, 2 * self._cos.shape[0], 4096)
            ids = torch.arange(size, device=self.device)[None, :]
            cos, sin = self._rope_at(ids, like.dtype)
            self._cos, self._sin = cos[0], sin[0]
        return self._cos[positions].unsqueeze(1), self._sin[positions].unsqueeze(1)

    def _attention(self, i: int, group: KVGroup, q: torch.Tensor, k: torch.Tensor,
                   v: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        """Layer ``i``'s attention for ``group``'s rows (their q, k, v of this step)."""
        col, rows = group.used, q.shape[0]
        group.keys[i, :, :, col : col + 1] = k
        group.values[i, :, :, col : col + 1] = v
        keys, values = group.keys[i, :, :, : col + 1], group.values[i, :, :, : col + 1]
        # one query per sequence: the group's queries share their kv head
        groups = self.heads // self.kv_heads
        scores = torch.matmul(q.reshape(rows, self.kv_heads, groups, self.head_dim),
                              keys.transpose(-1, -2)) * self.scale
        if bias is not None:
            scores = scores + bias
        probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(values.dtype)
        return torch.matmul(probs, values).reshape(rows, 1, -1)

    def _step(self, tokens: torch.Tensor, groups: list[KVGroup]) -> torch.Tensor:
        """One decoding step for every row of ``groups`` (in their order): the
        last-position logits. Projections and MLP run over all rows at once,
        attention per group."""
        for group in groups:
            group.reserve()
        h = F.embedding(tokens, self.w.embed)  # (rows, 1, hidden)
        positions = (groups[0].positions if len(groups) == 1
                     else torch.cat([g.positions for g in groups], dim=0))
        cos, sin = self._rope(positions, h)
        biases = [g.bias(h.dtype) for g in groups]
        spans, start = [], 0
        for group in groups:
            spans.append((start, start + len(group.rows)))
            start += len(group.rows)
        for i, w in enumerate(self.weights):
            residual = h
            x = _rms(h, w.norm_in, self.eps)
            q, k, v = self._attend(w, x, cos, sin)
            if len(groups) == 1:
                out = self._attention(i, groups[0], q, k, v, biases[0])
            else:
                out = torch.cat([self._attention(i, g, q[a:b], k[a:b], v[a:b], bias)
                                 for g, (a, b), bias in zip(groups, spans, biases, strict=True)],
                                dim=0)
            h = residual + F.linear(out, w.o, w.o_bias)
            residual = h
            x = _rms(h, w.norm_post, self.eps)
            h = residual + F.linear(w.act(F.linear(x, w.gate)) * F.linear(x, w.up), w.down)
        h = _rms(h, self.w.norm, self.eps)
        for group in groups:
            group.advance()
        return F.linear(h[:, -1, :], self.w.head)

    def warm_up(self, token_id: int) -> None:
        """Run two tiny prompts through both paths (prefill, padded batch step)
        once, so first-call costs (lazy imports, kernel selection) are paid at
        load time, not by the first rows. Outputs are discarded."""
        self.decode([[token_id] * 3, [token_id] * 5], eos_token_ids=[], max_new_tokens=3)

    def _admit(self, prompts: Sequence[Sequence[int]], indices: Sequence[int],
               store: PrefixStore[KV]) -> tuple[list[KVGroup], torch.Tensor]:
        """Prefill the prompts ``indices`` (each alone, on top of the longest prefix it
        shares with a prompt in ``store``, where ``worth_reusing``): their KV groups
        (``lean_kv.partition``: similar lengths together) and their first-step
        logits, in ``indices`` order."""
        caches, logits = [], []
        for index in indices:
            prompt = prompts[index]
            found = store.find(prompt)
            if found is not None and not self.worth_reusing(found.length, len(prompt)):
                found = None
            self.reused[index] = 0 if found is None else found.length
            cache, last = self._prefill(prompt, _slice(found))
            store.add(prompt, cache)
            caches.append(cache)
            logits.append(last)
        lengths = [len(prompts[i]) for i in indices]
        groups = [KVGroup([caches[j] for j in part], [lengths[j] for j in part],
                          len(self.weights), [indices[j] for j in part])
                  for part in partition(lengths)]
        return groups, torch.cat(logits, dim=0)

    @torch.inference_mode()
    def decode(
        self,
        prompts: Sequence[Sequence[int]],
        *,
        eos_token_ids: Sequence[int],
        max_new_tokens: int,
        adjust: Adjust | None = None,
        label_ids: Sequence[int] = (),
        slots: int | None = None,
    ) -> tuple[list[Decoded], float]:
        """Greedy-decode ``prompts`` (see the module docstring); also the seconds
        spent prefilling. ``slots`` (default: every prompt) is how many rows decode
        at once: the first ``slots`` prompts are prefilled, and whenever rows
        finish, the next prompts (in order) are prefilled and join the batch in
        their place, so a long answer holds one slot, not a batch (continuous
        batching). A prompt reuses a prefix of the last ``slots`` prompts
        prefilled. ``adjust`` (benchmarks: forced output lengths) may rewrite
        each step's logits before the choice; ``self.reused`` then holds each
        prompt's reused prefix length. ``label_ids``: each step's logits of these
        ids are kept per row (``Decoded.label_logits``)."""
        if not prompts or any(len(p) == 0 for p in prompts):
            raise ValueError("every prompt needs at least one token")
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        width = len(prompts) if slots is None else max(1, min(int(slots), len(prompts)))
        eos = set(int(i) for i in eos_token_ids)
        tokens: list[list[int]] = [[] for _ in prompts]
        margins: list[list[float]] = [[] for _ in prompts]
        labels: list[list[list[float]]] = [[] for _ in prompts]
        columns = torch.tensor(list(label_ids), dtype=torch.long, device=self.device)
        finish = ["length"] * len(prompts)
        self.reused = [0] * len(prompts)
        store: PrefixStore[KV] = PrefixStore(width, self.min_prefix)
        waiting = list(range(len(prompts)))[::-1]  # next prompt last
        prefill_s = 0.0

        def admit(count: int) -> tuple[list[KVGroup], torch.Tensor, list[int]]:
            nonlocal prefill_s
            started = time.perf_counter()
            indices = [waiting.pop() for _ in range(min(count, len(waiting)))]
            joined, logits = self._admit(prompts, indices, store)
            prefill_s += time.perf_counter() - started
            return joined, logits, indices

        groups: list[KVGroup] = []
        alive: list[int] = []
        step_logits = torch.empty(0)
        while True:
            order = list(alive)  # the rows of step_logits
            if waiting and len(alive) < width:
                joined, logits, indices = admit(width - len(alive))
                place(groups, joined)
                step_logits = torch.cat([step_logits, logits], dim=0) if alive else logits
                order += indices
                alive = [row for group in groups for row in group.rows]
                if order != alive:
                    at = {row: i for i, row in enumerate(order)}
                    step_logits = step_logits.index_select(
                        0, torch.tensor([at[row] for row in alive], device=self.device))
            if adjust is not None:
                step_logits = adjust([len(tokens[i]) for i in alive], alive, step_logits)
            nxt = torch.argmax(step_logits, dim=-1)
            top2 = torch.topk(step_logits.float(), k=2, dim=-1).values
            gaps = (top2[:, 0] - top2[:, 1]).tolist()
            if label_ids:
                record_labels(step_logits.index_select(1, columns).float().tolist(), alive, labels)
            keep = [row for row in record_step(nxt.tolist(), gaps, alive, eos, tokens, margins,
                                               finish)
                    if len(tokens[alive[row]]) < max_new_tokens]
            if len(keep) < len(alive):
                groups = drop(groups, keep)
                nxt = nxt.index_select(0, torch.tensor(keep, dtype=torch.long, device=self.device))
                alive = [alive[row] for row in keep]
            if not alive and not waiting:
                break
            if alive:
                step_logits = self._step(nxt[:, None], groups)
        decoded = [Decoded(t, m, f, label_logits=v)
                   for t, m, f, v in zip(tokens, margins, finish, labels, strict=True)]
        return decoded, prefill_s
