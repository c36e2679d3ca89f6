"""A lean greedy decoder for Llama-family transformers models (the hf runner's
``decode_loop = "lean"``).

Input: a loaded transformers ``Qwen2ForCausalLM`` or ``LlamaForCausalLM``
(eval mode, default RoPE, full attention), a batch of token-id prompts, the
EOS id set, the pad id and ``max_new_tokens``. Output: per prompt, in input
order, a ``Decoded``: the generated ids (ending with the EOS id when one was
produced), the top-1 minus top-2 logit gap at every generated position, and
the finish reason (``"stop"`` or ``"length"``).

How it stays ``generate(do_sample=False)``:

- Prefill runs each prompt alone through the model's own ``forward``, called
  as ``generate`` calls it at batch 1 (no attention mask, positions from 0,
  ``logits_to_keep=1``, a ``DynamicCache``), so no prompt pays for another's
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
  float32, biases, RoPE from the model's ``rotary_emb``, SDPA with the same
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
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from transformers import DynamicCache

from guardrepro.run.runners.greedy import (
    MIN_PREFIX,
    Decoded,
    Prefix,
    PrefixStore,
    record_labels,
    record_step,
)
from guardrepro.run.runners.lean_kv import KV, KVGroup, drop, partition, place

SUPPORTED_MODEL_TYPES = ("qwen2", "llama")
REUSE_PAIR_COST = 2.0  # a masked (query, key) pair against a causal one (see worth_reusing)
# (tokens each live row has generated so far, prompt index of each live row, that
# step's logits) -> the logits to choose from
Adjust = Callable[[Sequence[int], Sequence[int], torch.Tensor], torch.Tensor]


def unsupported_reason(model: Any) -> str | None:
    """Why ``model`` cannot use the lean decoder, or None when it can."""
    config = model.config
    model_type = getattr(config, "model_type", None)
    if model_type not in SUPPORTED_MODEL_TYPES:
        return f"model_type {model_type!r} (the lean decoder supports {SUPPORTED_MODEL_TYPES})"
    rope = getattr(config, "rope_parameters", None) or {}
    if rope.get("rope_type", "default") != "default":
        return f"rope_type {rope.get('rope_type')!r} (only the default RoPE)"
    if any(t != "full_attention" for t in getattr(config, "layer_types", None) or []):
        return "sliding-window layers"
    if getattr(config, "_attn_implementation", "sdpa") != "sdpa":
        return f"attn_implementation {config._attn_implementation!r} (only sdpa)"
    if getattr(config, "mlp_bias", False):
        return "MLP biases"
    return None


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


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


@dataclass(frozen=True)
class _LayerWeights:
    """One decoder layer's tensors (the model's own, not copies)."""

    norm_in: torch.Tensor
    q: torch.Tensor
    q_bias: torch.Tensor | None
    k: torch.Tensor
    k_bias: torch.Tensor | None
    v: torch.Tensor
    v_bias: torch.Tensor | None
    o: torch.Tensor
    norm_post: torch.Tensor
    gate: torch.Tensor
    up: torch.Tensor
    down: torch.Tensor
    act: Callable[[torch.Tensor], torch.Tensor]

    @classmethod
    def of(cls, layer: Any) -> _LayerWeights:
        attn, mlp = layer.self_attn, layer.mlp
        return cls(layer.input_layernorm.weight, attn.q_proj.weight, attn.q_proj.bias,
                   attn.k_proj.weight, attn.k_proj.bias, attn.v_proj.weight, attn.v_proj.bias,
                   attn.o_proj.weight, layer.post_attention_layernorm.weight,
                   mlp.gate_proj.weight, mlp.up_proj.weight, mlp.down_proj.weight, mlp.act_fn)


class LeanDecoder:
    """Greedy decoding with the weights of one loaded transformers model."""

    def __init__(self, model: Any, *, min_prefix: int = MIN_PREFIX) -> None:
        reason = unsupported_reason(model)
        if reason is not None:
            raise ValueError(f"the lean decoder cannot run this model: {reason}")
        self.model = model
        config = model.config
        self.inner = model.model
        self.eps = float(config.rms_norm_eps)
        self.heads = int(config.num_attention_heads)
        self.kv_heads = int(config.num_key_value_heads)
        self.head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // self.heads)
        self.scale = self.head_dim**-0.5
        self.layers = list(self.inner.layers)[: config.num_hidden_layers]
        # each layer's tensors, looked up once (module attribute access costs per step)
        self.weights = [_LayerWeights.of(layer) for layer in self.layers]
        self._cos = self._sin = torch.empty(0)  # RoPE by position (``_rope``)
        self.device = next(model.parameters()).device
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
        the prompt runs through the model, attending to the prefix's keys."""
        start = 0 if prefix is None else int(prefix[0][0].shape[2])
        ids = torch.tensor([list(prompt[start:])], dtype=torch.long, device=self.device)
        cache = DynamicCache(config=self.model.config)
        for i, (keys, values) in enumerate(prefix or []):
            cache.update(keys, values, i)  # the shared tensors are never written in place
        out = self.model(
            input_ids=ids,
            attention_mask=None,
            position_ids=torch.arange(start, len(prompt), device=self.device)[None, :],
            cache=cache,
            use_cache=True,
            logits_to_keep=1,
        )
        layers: Any = cache.layers
        return [(layer.keys, layer.values) for layer in layers], out.logits[:, -1, :]

    def _attend(self, w: _LayerWeights, h: torch.Tensor, cos: Any, sin: Any) -> Any:
        rows = h.shape[0]
        q = F.linear(h, w.q, w.q_bias).view(rows, 1, -1, self.head_dim)
        k = F.linear(h, w.k, w.k_bias).view(rows, 1, -1, self.head_dim)
        v = F.linear(h, w.v, w.v_bias).view(rows, 1, -1, self.head_dim)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        q = (q * cos) + (_rotate_half(q) * sin)
        k = (k * cos) + (_rotate_half(k) * sin)
        return q, k, v

    def _rope(self, positions: torch.Tensor, like: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """cos and sin at ``positions`` (rows, 1) from a table of the model's own
        ``rotary_emb`` over positions 0..n (extended as needed). Bit for bit the
        per-step call: each entry is one product ``inv_freq * position`` (a
        matmul of inner size 1) and its cos / sin, whatever the other positions."""
        top = int(positions.max()) + 1
        if top > self._cos.shape[0]:
            size = max(top, 2 * self._cos.shape[0], 4096)
            ids = torch.arange(size, device=self.device)[None, :]
            cos, sin = self.inner.rotary_emb(like, ids)
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
        h = self.inner.embed_tokens(tokens)  # (rows, 1, hidden)
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
            h = residual + F.linear(out, w.o)
            residual = h
            x = _rms(h, w.norm_post, self.eps)
            h = residual + F.linear(w.act(F.linear(x, w.gate)) * F.linear(x, w.up), w.down)
        h = _rms(h, self.inner.norm.weight, self.eps)
        for group in groups:
            group.advance()
        return self.model.lm_head(h[:, -1, :])

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
                          len(self.layers), [indices[j] for j in part])
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
