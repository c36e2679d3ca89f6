"""One transformers configuration of the synthetic benchmark in a fresh process,
loading a saved checkpoint the way a ``guardrepro run`` of it loads it.

Run by ``bench_synthetic`` as ``python -m scripts.synthetic.hf_process SPEC OUT``
(a JSON spec in, a JSON result out), so that its wall time holds what a user
waits for: interpreter start, imports, loading, generation and exit; nothing
is inherited from the benchmark's own process.

- ``hf-generate`` (the naive loop): ``torch_load.load_causal_lm`` (the hf
  runner's ``from_pretrained``, one torch thread), then ``generate`` once per
  row (``run_hf.naive``).
- ``hf-lean``: the hf runner's module (the lean decoder with it) and what
  ``hf_runner.preload`` imports are imported in this process, as a run's
  parent imports them; then ``workers`` processes are forked, each reading
  the tensors itself
  (``lean_weights.from_checkpoint``: no transformers model is built) and
  decoding the rows a run gives it (``run_hf.lean_workers``), as the workers of
  ``runners/toy-hf.toml`` do.

Spec keys: ``backend``, ``checkpoint``, ``shape`` (name, config, eos_ids),
``rows`` (row_id, base, variant, prompt ids, output_tokens), ``slots``,
``workers``. The result: each row's tokens, the prefill and decode seconds,
reused prompt tokens, peak memory, and the generation span's epoch times
(the parent turns them into start-up and generation seconds).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def main(spec_path: str, out_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    from scripts.synthetic import run_hf
    from scripts.synthetic.cohort import Row
    from scripts.synthetic.shapes import Shape

    rows = [Row(r["row_id"], r["base"], r["variant"], tuple(r["prompt"]), r["output_tokens"])
            for r in spec["rows"]]
    shape = Shape(spec["shape"]["name"], spec["shape"]["config"], tuple(spec["shape"]["eos_ids"]))
    checkpoint = Path(spec["checkpoint"])
    if spec["backend"] == "hf-generate":
        model = run_hf.load_saved(checkpoint, 1)
        started = time.time()
        result = run_hf.naive(model, 0.0, rows, shape)
        span = [started, time.time()]
    elif spec["backend"] == "hf-lean":
        from guardrepro.run.runners.hf_runner import preload  # and the lean decoder with it

        preload(checkpoint, {"decode_loop": "lean"})  # what a run imports before forking
        result = run_hf.lean_workers(checkpoint, 0.0, rows, shape, spec["slots"],
                                     spec["workers"])
        span = result.extra["generation_epochs"]
    else:
        raise SystemExit(f"unknown backend {spec['backend']!r}")
    document = {"what": result.what, "tokens": result.tokens, "prefill_s": result.prefill_s,
                "decode_s": result.decode_s, "reused": result.reused,
                "peak_memory_bytes": result.peak_memory_bytes,
                "memory_kind": result.memory_kind, "generation_epochs": span}
    Path(out_path).write_text(json.dumps(document))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(*sys.argv[1:]))
