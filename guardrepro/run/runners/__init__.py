"""Inference backends behind one ``Runner`` protocol (see ``base``).

- ``hf_runner`` (transformers; ``fast_greedy`` is its lean batched greedy
  decoder), ``mlx_runner`` (mlx-lm; ``mlx_batch`` its batched greedy path),
  ``vllm_runner``, ``rule_runner`` (model-free baselines).
- ``greedy``: what the batched greedy decoders share whatever their array
  library: the prompt-prefix store and the per-step token bookkeeping.
- ``options``: each runner's declared options and defaults; ``registry``
  creates runners by backend name; ``weights`` refuses non-safetensors
  checkpoints.
"""
