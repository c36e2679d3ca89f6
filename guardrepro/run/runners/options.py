"""The backend options each runner declares: name, accepted types, default, help.

Input: nothing (declarations only; this module imports no backend library,
so ``doctor``, the registry and ``guardrepro`` help can read a runner's
options while its dependencies are missing). Output: one ``OptionTable`` per
backend, which the runner class carries as its ``OPTIONS`` attribute and
``runners.registry.option_table`` returns without importing the runner.

Invariants: a table's names are exactly the ``[backend_options]`` keys its
runner accepts, and its defaults are the only ones: a runner (and the
pipeline's chunk size, ``doctor``'s facts) fills an absent option from here and
keeps no default of its own. A default of ``None`` means "absent" (the runner
decides, e.g. the vLLM runner requires an explicit ``dtype``); the runner
validates values (ranges, choices) itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Option:
    name: str
    types: tuple[type, ...]
    default: Any
    help: str


@dataclass(frozen=True)
class OptionTable:
    backend: str
    options: tuple[Option, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(o.name for o in self.options)

    def defaults(self) -> dict[str, Any]:
        return {o.name: o.default for o in self.options}

    def default(self, name: str) -> Any:
        for option in self.options:
            if option.name == name:
                return option.default
        raise KeyError(name)

    def filled(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """``given`` over the defaults (a key not declared is the runner's to refuse)."""
        return {**self.defaults(), **given}

    def value(self, given: Mapping[str, Any], name: str) -> Any:
        """Option ``name`` as given, else its declared default."""
        return given[name] if name in given else self.default(name)


_INT = (int,)
_STR = (str,)
_BOOL = (bool,)
_BATCH = Option("batch_size", _INT, 1, "requests per generate call (the pipeline's chunk)")

HF = OptionTable("hf", (
    Option("dtype", _STR, "float32", "float32 | bfloat16 | float16"),
    Option("device", _STR, "cpu", "cpu | cuda | cuda:N | mps"),
    _BATCH,
    Option("threads", (int, str), None, "torch threads; \"auto\": physical cores / workers"),
    Option("attn_implementation", _STR, "sdpa", "transformers attention: sdpa | eager"),
    Option("decode_loop", _STR, "generate",
           "generate (transformers) | lean (runners/fast_greedy.py, greedy only)"),
))

MLX = OptionTable("mlx", (
    Option("dtype", _STR, None, "expected float dtype of the loaded weights (checked)"),
    Option("device", _STR, "default", "cpu | gpu | default"),
    Option("batch_size", _INT, 1, "requests decoded together (greedy; the first batch is "
           "checked against batch 1, which is used from then on if they differ)"),
    Option("prefill_step_size", _INT, 2048, "prompt tokens per prefill step"),
    Option("prefix_reuse", _BOOL, True, "greedy prompts prefill on top of a prefix of >= 16 "
           "tokens shared with a recent prompt (the first 4 such rows are checked against a "
           "full prefill; reuse is switched off if tokens differ)"),
))

VLLM = OptionTable("vllm", (
    Option("dtype", _STR, None, "required: bfloat16 | float16 | float32"),
    Option("device", _STR, "auto", "auto | cuda | cpu"),
    _BATCH,
    Option("tensor_parallel_size", _INT, 1, "GPUs per engine"),
    Option("enable_prefix_caching", _BOOL, True, "reuse KV cache across shared prefixes"),
    Option("max_model_len", _INT, None, "context length (default: the model's)"),
    Option("max_num_seqs", _INT, 256, "sequences the engine schedules at once"),
    Option("max_num_batched_tokens", _INT, None, "tokens per engine step"),
    Option("enforce_eager", _BOOL, False, "no CUDA graphs"),
    Option("seed", _INT, 0, "engine seed (requests carry their own seeds)"),
    Option("gpu_memory_utilization", (int, float), 0.9, "fraction of GPU memory, in (0, 1]"),
    Option("cpu_kvcache_space_gib", _INT, 1, "KV cache on the vllm-cpu engine"),
    Option("batch_invariant", _BOOL, False, "VLLM_BATCH_INVARIANT=1"),
    Option("multiprocessing", _BOOL, False, "VLLM_ENABLE_V1_MULTIPROCESSING=1"),
))

RULE = OptionTable("rule", (
    Option("lookup_table", _STR, None, "JSON lookup table (rule-tool-lookup), relative to the "
           "profile"),
    _BATCH,
))

TABLES: Mapping[str, OptionTable] = {t.backend: t for t in (HF, MLX, VLLM, RULE)}
