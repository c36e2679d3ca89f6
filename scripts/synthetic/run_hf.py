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
from pathlib import Path
from typing import Any

import torch

from scripts.synthetic.cohort import Row
from scripts.synthetic.measure import Result, peak_rss_bytes
from scripts.synthetic.shapes import Shape


def forcing(targets: Sequence[int], eos_ids: Sequence[int]) -> Any:
    """``adjust(step, alive, logits)`` for the lean decoder (see the module docstring)."""
    lengths = torch.tensor(list(targets), dtype=torch.long)
    eos = torch.tensor(list(eos_ids), dtype=torch.long)

    def adjust(step: int | Sequence[int], alive: Sequence[int],
               logits: torch.Tensor) -> torch.Tensor:
        # step: tokens generated so far, one for all rows (batch 1, static batches)
        # or one per live row (the lean decoder, whose rows join at different steps)
        want = lengths[torch.tensor(list(alive), dtype=torch.long)]
        position = torch.as_tensor(step, dtype=torch.long) + 1
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


def load_saved(checkpoint: Path, threads: int) -> Any:
    """The saved checkpoint loaded as the hf runner loads it for ``generate``
    (``torch_load.load_causal_lm``, float32 on CPU, ``threads`` torch threads)."""
    from guardrepro.run.runners.torch_load import load_causal_lm

    options = {"dtype": "float32", "device": "cpu", "threads": threads}
    return load_causal_lm(checkpoint, options, backend="hf").model


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
def _lean_rows(model: Any, rows: Sequence[Row], shape: Shape, batch: int,
               min_prefix: int | None, slots: int | None
               ) -> tuple[dict[str, list[int]], float, float, int]:
    """The lean decoder over ``rows`` (tokens, prefill s, total s, reused tokens):
    with ``slots``, every row in one call, sorted by length, ``slots`` rows decoded
    at once (continuous batching); without, static sorted batches of ``batch``."""
    from guardrepro.run.runners.greedy import MIN_PREFIX
    from guardrepro.run.runners.lean import LeanDecoder

    decoder = LeanDecoder(model, min_prefix=MIN_PREFIX if min_prefix is None else min_prefix)
    decoder.warm_up(0)
    tokens, prefill, total, reused = {}, 0.0, 0.0, 0
    for chunk in batches(rows, len(rows) if slots is not None else batch):
        started = time.perf_counter()
        decoded, prefill_s = decoder.decode(
            [r.prompt for r in chunk], eos_token_ids=shape.eos_ids,
            max_new_tokens=max(r.output_tokens for r in chunk), slots=slots,
            adjust=forcing([r.output_tokens for r in chunk], shape.eos_ids))
        total += time.perf_counter() - started
        prefill += prefill_s
        reused += sum(decoder.reused)
        for r, d in zip(chunk, decoded, strict=True):
            tokens[r.row_id] = d.token_ids
    return tokens, prefill, total, reused


def lean(model: Any, load_s: float, rows: Sequence[Row], shape: Shape, batch: int,
         min_prefix: int | None = None) -> Result:
    """The lean decoder, ``batch`` rows at a time, prefixes shared within a batch."""
    tokens, prefill, total, reused = _lean_rows(model, rows, shape, batch, min_prefix, None)
    name = "hf-lean" if batch > 1 else "hf-lean-b1"
    return Result(name, f"lean decoder, sorted, batches of {batch}", rows, tokens, load_s,
                  prefill, total - prefill, reused, peak_rss_bytes(), "process peak RSS",
                  shape.eos_ids[0])


def lean_weights(checkpoint: Path) -> Any:
    """The lean decoder's tensors read from a saved checkpoint, as a ``run`` worker
    reads them (``lean_weights.from_checkpoint``: no transformers model built)."""
    from guardrepro.run.runners.lean_weights import from_checkpoint
    from guardrepro.run.runners.weights import require_safetensors

    files = require_safetensors(checkpoint, "hf")
    weights, why = from_checkpoint(checkpoint, files, torch.float32, torch.device("cpu"), "sdpa")
    if weights is None:
        raise SystemExit(f"{checkpoint}: the lean decoder cannot read it: {why}")
    return weights


def _worker(source: Any, rows: Sequence[Row], shape: Shape, slots: int, barrier: Any,
            out: Any) -> None:
    torch.set_num_threads(1)
    model = lean_weights(source) if isinstance(source, Path) else source
    barrier.wait()  # the workers start generating together, as a run's do
    started = time.time()
    tokens, prefill, _, reused = _lean_rows(model, rows, shape, slots, None, slots)
    out.send((tokens, prefill, started, time.time(), reused, peak_rss_bytes()))
    out.close()


def lean_workers(source: Any, load_s: float, rows: Sequence[Row], shape: Shape, slots: int,
                 workers: int) -> Result:
    """The toy profile's setup (``runners/toy-hf.toml``): ``workers`` processes of
    one thread each, forked from this one, each making the rows a run would
    give it (``run.balance.balanced_split``, here on prompt tokens: these rows
    have no text), sorted by length, ``slots`` rows at once (continuous
    batching). ``source``: a model built in
    this process, or a checkpoint directory that each worker reads after the
    fork, as a ``run`` worker does. Generation = the workers' common start
    (after loading) to the last one done; ``prefill_s`` sums the workers';
    ``extra`` holds the span's epoch times."""
    import multiprocessing

    from guardrepro.run.balance import balanced_split

    context = multiprocessing.get_context("fork")
    shards = balanced_split(rows, workers, lambda r: len(r.prompt))
    barrier = context.Barrier(workers)
    pipes, processes = [], []
    forked = time.perf_counter()
    for share in shards:
        receive, send = context.Pipe(duplex=False)
        process = context.Process(target=_worker,
                                  args=(source, share, shape, slots, barrier, send))
        process.start()
        pipes.append(receive)
        processes.append(process)
    results = [pipe.recv() for pipe in pipes]
    for process in processes:
        process.join()
    wall = time.perf_counter() - forked
    tokens: dict[str, list[int]] = {}
    for got in results:
        tokens.update(got[0])
    prefill = sum(got[1] for got in results)
    first, last = min(got[2] for got in results), max(got[3] for got in results)
    span = last - first
    return Result("hf-lean", f"lean decoder, {workers} worker(s) x 1 thread, {slots} slots, "
                  "continuous batching (the toy-hf setup)",
                  rows, tokens, load_s, prefill / workers, span - prefill / workers,
                  sum(got[4] for got in results), max(got[5] for got in results),
                  "largest worker peak RSS", shape.eos_ids[0],
                  {"wall_s": round(load_s + wall, 3), "workers": workers, "slots": slots,
                   "generation_epochs": [first, last]})


def concurrency_check(model: Any, rows: Sequence[Row], shape: Shape, sizes: Sequence[int],
                      reference: dict[str, list[int]]) -> list[dict[str, Any]]:
    """``check-invariance`` at each concurrency in ``sizes`` on the synthetic cohort:
    the lean decoder in this process with ``size`` slots over every row (sorted,
    one call, continuous batching), each row's tokens compared with the naive
    loop's (``reference``). One object per size: rows identical, rows compared,
    the most rows decoded together, seconds."""
    out = []
    for size in sizes:
        started = time.perf_counter()
        tokens, _, _, _ = _lean_rows(model, rows, shape, size, None, size)
        same = sum(1 for r in rows if tokens[r.row_id] == list(reference[r.row_id]))
        out.append({"concurrency": size, "decoded_together": min(size, len(rows)),
                    "identical": same, "of": len(rows),
                    "seconds": round(time.perf_counter() - started, 3)})
    return out
