"""The synthetic cohort on vLLM with random weights (``load_format="dummy"``):
no download, the shape's ``config.json`` only. Run by ``bench_synthetic`` in
vLLM's own environment as ``python -m scripts.synthetic.run_vllm SPEC OUT``
(a JSON spec in, a JSON result out), one process per engine setting.

Forced lengths: vLLM gets ``min_tokens = max_tokens = L`` with ``ignore_eos``
(no custom logits processor), so a row has exactly L tokens but its last one
is the model's argmax, not the EOS id; ``forced_lengths_ok`` counts lengths
only here (``forced_eos`` is None).

Spec keys: ``config_dir``, ``rows`` (row_id, prompt ids, output_tokens),
``options`` (dtype, device, enable_prefix_caching, max_num_seqs,
max_num_batched_tokens, max_model_len, gpu_memory_utilization, seed),
``batch_invariant``, ``sample`` (row ids also run one request at a time).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any


def _generate(llm: Any, rows: list[dict[str, Any]]) -> tuple[dict[str, list[int]], int, float]:
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    prompts = [TokensPrompt(prompt_token_ids=r["prompt"]) for r in rows]
    params = [SamplingParams(temperature=0.0, max_tokens=r["output_tokens"],
                             min_tokens=r["output_tokens"], ignore_eos=True, detokenize=False)
              for r in rows]
    started = time.perf_counter()
    outs = llm.generate(prompts, params, use_tqdm=False)
    elapsed = time.perf_counter() - started
    tokens = {r["row_id"]: list(o.outputs[0].token_ids) for r, o in zip(rows, outs, strict=True)}
    cached = sum(int(getattr(o, "num_cached_tokens", 0) or 0) for o in outs)
    return tokens, cached, elapsed


def main(spec_path: str, out_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    if spec.get("batch_invariant"):
        os.environ["VLLM_BATCH_INVARIANT"] = "1"
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")  # GiB; read by the CPU engine only
    started = time.perf_counter()
    import vllm
    from vllm import LLM

    options = dict(spec["options"])
    llm = LLM(model=spec["config_dir"], load_format="dummy", skip_tokenizer_init=True,
              trust_remote_code=False, enforce_eager=options.pop("enforce_eager", False),
              **options)
    load_s = time.perf_counter() - started
    rows = spec["rows"]
    tokens, cached, gen_s = _generate(llm, rows)
    sample = [r for r in rows if r["row_id"] in set(spec.get("sample", []))]
    single: dict[str, list[int]] = {}
    for row in sample:
        llm.reset_prefix_cache()
        got, _, _ = _generate(llm, [row])
        single.update(got)
    import resource

    peak = None
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin"
                                                                 else 1024)
    try:
        import torch

        if torch.cuda.is_available():
            peak = int(torch.cuda.max_memory_allocated())
    except Exception:
        peak = None
    result = {"vllm": vllm.__version__, "load_s": load_s, "generation_s": gen_s,
              "cached_tokens": cached, "tokens": tokens, "batch1_tokens": single,
              "cuda_peak_bytes": peak, "peak_rss_bytes": int(rss)}
    Path(out_path).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
