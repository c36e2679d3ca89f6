"""The synthetic cohort on transformers (CPU): the naive ``generate`` loop at
batch 1 and the lean batched decoder (``runners.lean``), both on one
randomly initialised model, each row's output length forced.

Forcing (both paths, the same rule): at generated position ``s`` (1-based)
of a row whose forced length is ``L``, every EOS id's logit is ``-inf`` while
``s < L``; at ``s == L`` every logit but the first EOS id's is ``-inf``. The
row then stops on that EOS exactly as a guard's answer does.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import torch

from scripts.synthetic.cohort import Row
from scripts.synthetic.measure import Result, peak_rss_bytes
from scripts.synthetic.shapes import Shape, build_hf


def forcing(targets: Sequence[int], eos_ids: Sequence[int]) -> Any:
    """``adjust(step, alive, logits)`` for the lean decoder (see the module docstring)."""
    lengths = torch.tensor(list(targets), dtype=torch.long)
    eos = torch.tensor(list(eos_ids), dtype=torch.long)

    def adjust(step: int, alive: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
        want = lengths[torch.tensor(list(alive), dtype=torch.long)]
        position = step + 1
        logits = logits.clone()
        suppress = want > position
        if bool(suppress.any()):
            rows = suppress.nonzero().flatten()
            logits[rows[:, None], eos[None, :]] = float("-inf")
        force = want == position
        if bool(force.any()):
            rows = force.nonzero().flatten()
            logits[rows] = float("-inf")
            logits[rows, eos[0]] = 0.0
        return logits

    return adjust


class _Processor:
    """The same rule as a transformers logits processor, for one row at batch 1."""

    def __init__(self, target: int, eos_ids: Sequence[int], prompt_len: int) -> None:
        self.adjust = forcing([target], eos_ids)
        self.prompt_len = prompt_len
        self.first: float | None = None

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.first is None:
            self.first = time.perf_counter()
        return self.adjust(input_ids.shape[1] - self.prompt_len, [0], scores)


def load(shape: Shape, threads: int) -> tuple[Any, float]:
    torch.set_num_threads(threads)
    started = time.perf_counter()
    model = build_hf(shape)
    return model, time.perf_counter() - started


@torch.inference_mode()
def naive(model: Any, load_s: float, rows: Sequence[Row], shape: Shape) -> Result:
    """``generate(do_sample=False)`` once per row (the baseline)."""
    from transformers import GenerationConfig, LogitsProcessorList

    tokens, prefill, decode = {}, 0.0, 0.0
    for row in rows:
        config = GenerationConfig(do_sample=False, num_beams=1, eos_token_id=list(shape.eos_ids),
                                  pad_token_id=shape.eos_ids[-1],
                                  max_new_tokens=row.output_tokens)
        processor = _Processor(row.output_tokens, shape.eos_ids, len(row.prompt))
        ids = torch.tensor([row.prompt], dtype=torch.long)
        started = time.perf_counter()
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                             generation_config=config,
                             logits_processor=LogitsProcessorList([processor]))
        ended = time.perf_counter()
        first = processor.first or ended
        prefill += first - started
        decode += ended - first
        tokens[row.row_id] = out[0, len(row.prompt):].tolist()
    return Result("hf-generate", "generate per row, batch 1", rows, tokens, load_s, prefill,
                  decode, 0, peak_rss_bytes(), "process peak RSS", shape.eos_ids[0])


def batches(rows: Sequence[Row], size: int) -> list[list[Row]]:
    """Rows sorted by prompt length (stable: a base's variants stay together), in
    chunks of ``size``, as ``sort_by_length`` does in a run."""
    ordered = sorted(rows, key=lambda r: len(r.prompt))
    return [ordered[i : i + size] for i in range(0, len(ordered), size)]


@torch.inference_mode()
def lean(model: Any, load_s: float, rows: Sequence[Row], shape: Shape, batch: int,
         min_prefix: int | None = None) -> Result:
    """The lean decoder, ``batch`` rows at a time, prefixes shared within a batch."""
    from guardrepro.run.runners.greedy import MIN_PREFIX
    from guardrepro.run.runners.lean import LeanDecoder

    decoder = LeanDecoder(model, min_prefix=MIN_PREFIX if min_prefix is None else min_prefix)
    decoder.warm_up(0)
    tokens, prefill, total, reused = {}, 0.0, 0.0, 0
    for chunk in batches(rows, batch):
        started = time.perf_counter()
        decoded, prefill_s = decoder.decode(
            [r.prompt for r in chunk], eos_token_ids=shape.eos_ids,
            max_new_tokens=max(r.output_tokens for r in chunk),
            adjust=forcing([r.output_tokens for r in chunk], shape.eos_ids))
        total += time.perf_counter() - started
        prefill += prefill_s
        reused += sum(decoder.reused)
        for r, d in zip(chunk, decoded, strict=True):
            tokens[r.row_id] = d.token_ids
    name = "hf-lean" if batch > 1 else "hf-lean-b1"
    return Result(name, f"lean decoder, sorted, batches of {batch}", rows, tokens, load_s,
                  prefill, total - prefill, reused, peak_rss_bytes(), "process peak RSS",
                  shape.eos_ids[0])
