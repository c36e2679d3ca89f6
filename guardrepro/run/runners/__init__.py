"""Inference backends behind one ``Runner`` protocol (see ``base``).

- ``backends``: one descriptor per backend (class path, dependencies, extra,
  whether it needs a model, doctor facts, option table); ``registry``
  registers them, derives the tables everything else reads and creates
  runners by backend name; ``options``: the option table type, which
  validates types, choices, patterns and ranges.
- ``hf_runner`` (transformers; ``lean`` is its lean batched greedy decoder,
  ``decode_loop = "lean"``), ``mlx_runner`` (mlx-lm; ``mlx_batch`` its
  batched greedy path), ``vllm_runner``, ``rule_runner`` (model-free
  baselines).
- ``greedy``: what the batched greedy decoders share whatever their array
  library: the prompt-prefix store and the per-step token bookkeeping.
- ``weights`` refuses non-safetensors checkpoints.
"""
