"""A transformers backend written the way docs/CONTRIBUTING.md's recipe says:
its descriptor and its runner in one module.

The runner is a plain greedy loop over the model's own KV cache: the prompt
is prefilled in one forward pass, then each step feeds the argmax of the raw
last-position logits back with the cache, one request at a time, until an
EOS id or ``max_new_tokens``. ``step_margins`` are top-1 minus top-2 of those
raw logits. Loading is the shared ``runners.torch_load`` helper.

``tests/test_backend_recipe.py`` uses this file twice: imported from
``tests/`` and registered with ``registry.register`` (its class path follows
the module's own name), and copied to ``guardrepro/run/runners/`` in a copy
of the tree, where the registry finds it without any other change.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from guardrepro.decoding import DecodingParams
from guardrepro.errors import InferenceError, InputError
from guardrepro.run.runners.backends import Backend, DoctorFacts
from guardrepro.run.runners.base import Generation, GenerationRequest, shared_timings
from guardrepro.run.runners.options import Option, OptionTable

DESCRIPTOR = Backend(
    name="kvloop", label="transformers KV-cache loop", runner=f"{__name__}:KVLoopRunner",
    modules=("torch", "transformers", "safetensors", "tokenizers"),
    packages=("torch", "transformers"), extra="hf", fork_safe=True,
    doctor=DoctorFacts(probe="torch", concurrency=1, threads="threads"),
    options=OptionTable("kvloop", (
        Option("dtype", (str,), "float32", "float32 | bfloat16 | float16",
               choices=("float32", "bfloat16", "float16")),
        Option("device", (str,), "cpu", "cpu, cuda, cuda:N or mps",
               pattern=r"cpu|mps|cuda(:[0-9]+)?"),
        Option("threads", (int, str), None, "torch threads; \"auto\": one process's share",
               choices=("auto",), minimum=1),
        Option("batch_size", (int,), 1, "requests per generate call (decoded one by one)",
               minimum=1),
    )),
)


class KVLoopRunner:
    """Greedy decoding over the KV cache, one request at a time."""

    backend = DESCRIPTOR.name

    def __init__(self, checkpoint_dir: Path, options: Mapping[str, Any], *,
                 eos_token_ids: Sequence[int], pad_token_id: int | None,
                 decode: Callable[[Sequence[int]], str]) -> None:
        from guardrepro.run.runners.torch_load import load_causal_lm

        self.options = DESCRIPTOR.options.check(options)
        if not eos_token_ids:
            raise InputError("at least one EOS token id is needed", field="eos_token_ids")
        self.eos_token_ids = tuple(int(i) for i in eos_token_ids)
        self.decode = decode
        self.loaded = load_causal_lm(Path(checkpoint_dir), self.options, backend=self.backend)

    def describe(self) -> dict[str, Any]:
        import torch
        import transformers

        return {"backend": self.backend, "torch": torch.__version__,
                "transformers": transformers.__version__, "dtype": self.options["dtype"],
                "device": self.options["device"]}

    def generate(self, requests: Sequence[GenerationRequest],
                 params: DecodingParams) -> list[Generation]:
        if params.mode != "greedy":
            raise InputError("the kvloop backend decodes greedily only", field="decoding.mode")
        return [self._one(request, params.max_new_tokens) for request in requests]

    def _one(self, request: GenerationRequest, max_new_tokens: int) -> Generation:
        import torch
        from transformers import DynamicCache

        if not request.prompt_token_ids:
            raise InferenceError(f"request {request.row_id!r} has an empty prompt")
        model, device = self.loaded.model, self.loaded.device
        tokens: list[int] = []
        margins: list[float] = []
        start = time.perf_counter()
        first = start
        cache = DynamicCache(config=model.config)  # filled in place by each forward pass
        with torch.inference_mode():
            out = model(input_ids=torch.tensor([request.prompt_token_ids], device=device),
                        cache=cache, use_cache=True)
            while True:
                logits = out.logits[0, -1].float()
                top2 = torch.topk(logits, k=2).values
                tokens.append(int(torch.argmax(logits)))
                margins.append(float(top2[0] - top2[1]))
                if len(tokens) == 1:
                    self.loaded.sync()
                    first = time.perf_counter()
                if tokens[-1] in self.eos_token_ids or len(tokens) == max_new_tokens:
                    break
                out = model(input_ids=torch.tensor([[tokens[-1]]], device=device),
                            cache=cache, use_cache=True)
        self.loaded.sync()
        timings = shared_timings(first - start, time.perf_counter() - start, 1)
        return Generation.from_tokens(request.row_id, tokens, margins,
                                      eos_token_ids=self.eos_token_ids, decode=self.decode,
                                      timings=timings,
                                      peak_memory_bytes=self.loaded.peak_memory())

    def close(self) -> None:
        self.loaded.close()
