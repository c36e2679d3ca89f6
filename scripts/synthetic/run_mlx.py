"""The synthetic cohort on MLX (the Mac path; on Linux, MLX's CPU build as its
stand-in): batched greedy decoding with prompt-prefix reuse
(``runners.mlx_batch.decode_batch``) against batch 1, forced lengths as in
``run_hf`` (the same rule, in MLX arrays)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from scripts.synthetic.cohort import Row
from scripts.synthetic.measure import Result
from scripts.synthetic.run_hf import batches
from scripts.synthetic.shapes import Shape, build_mlx

PREFILL_STEP = 2048  # mlx-lm's default prefill chunk


def forcing(targets: Sequence[int], eos_ids: Sequence[int]) -> Any:
    import mlx.core as mx

    def adjust(step: int, alive: Sequence[int], logits: Any) -> Any:
        position = step + 1
        want = mx.array([targets[i] for i in alive])[:, None]
        vocab = mx.arange(logits.shape[-1])[None, :]
        is_eos = mx.zeros((1, logits.shape[-1]), dtype=mx.bool_)
        for e in eos_ids:
            is_eos = is_eos | (vocab == e)
        inf = mx.array(float("-inf"), dtype=logits.dtype)
        logits = mx.where((want > position) & is_eos, inf, logits)
        forced = want == position
        return mx.where(forced & (vocab != eos_ids[0]), inf,
                        mx.where(forced, mx.array(0.0, dtype=logits.dtype), logits))

    return adjust


def load(shape: Shape) -> tuple[Any, float]:
    started = time.perf_counter()
    model = build_mlx(shape)
    return model, time.perf_counter() - started


def run(model: Any, load_s: float, rows: Sequence[Row], shape: Shape, batch: int,
        reuse: bool) -> Result:
    """``batch`` rows at a time (sorted by prompt length); ``batch = 1`` is the
    batch-1 loop (each row alone, no reuse unless asked)."""
    import mlx.core as mx

    from guardrepro.run.runners.mlx_batch import decode_batch

    mx.reset_peak_memory()
    tokens, prefill, total, reused = {}, 0.0, 0.0, 0
    chunks = batches(rows, batch) if batch > 1 else [[r] for r in rows]
    for chunk in chunks:
        started = time.perf_counter()
        decoded = decode_batch(model, [r.prompt for r in chunk], eos_token_ids=shape.eos_ids,
                               max_new_tokens=max(r.output_tokens for r in chunk),
                               prefill_step_size=PREFILL_STEP, reuse=reuse,
                               adjust=forcing([r.output_tokens for r in chunk], shape.eos_ids))
        total += time.perf_counter() - started
        for r, d in zip(chunk, decoded, strict=True):
            tokens[r.row_id] = d.token_ids
            prefill += d.prefill_s
            reused += d.reused
    name = f"mlx-b{batch}" + ("-reuse" if reuse else "")
    what = (f"MLX float32, batches of {batch}" if batch > 1 else "MLX float32, batch 1") + (
        ", prefix reuse" if reuse else "")
    return Result(name, what, rows, tokens, load_s, prefill, total - prefill, reused,
                  int(mx.get_peak_memory()), "MLX peak memory", shape.eos_ids[0])
