"""The transformers runner: greedy (or the authors' sampled mode) generation
with ``AutoModelForCausalLM`` on a local, verified checkpoint directory.

Input: token-id prompts (``GenerationRequest``) and ``DecodingParams``.
Output: one ``Generation`` per request, in request order.

Invariants and choices:

- Loading (``runners.torch_load``, shared with any torch-based backend): local
  files only, safetensors only (``use_safetensors=True``; a directory without
  ``*.safetensors`` is refused), ``trust_remote_code=False``.
- The checkpoint's own ``generation_config.json`` never influences decoding.
  transformers fills every generation setting left unset (``None``) from the
  model's generation config (TS-Guard's carries ``top_k=20`` and
  ``repetition_penalty=1.05``), so the runner replaces
  ``model.generation_config`` with a pristine ``GenerationConfig`` and passes
  an explicit one: greedy = ``do_sample=False``, one beam, no repetition
  penalty, no n-gram blocking, no top-k/top-p; sampled = ``do_sample=True``
  with the profile's temperature and top_p and ``top_k=0`` (off).
- Stops on any of the EOS ids passed in (the checkpoint's; both for TS-Guard);
  ``finish_reason`` is ``"stop"`` when an EOS id was generated (it is kept as
  the last of ``token_ids``), ``"length"`` at ``max_new_tokens``.
- ``score_logits``: when the requests name ``score_token_ids`` (a logit
  guard such as ShieldGemma), the raw logits of those ids at the first
  generated position, per request (one chunk shares one id set).
- ``label_logits[i]``: when the requests name ``label_token_ids``, the raw
  logits of those ids at generated position ``i`` (both decode loops).
- ``step_margins[i]``: top-1 minus top-2 of the raw logits (the ``lm_head``
  output, before temperature or any processor) at generated position ``i``,
  captured by a forward hook so that no full logit history is kept.
- Batching: greedy requests run in chunks of ``batch_size`` with left
  padding. Measured: in float32, padded batches gave the same tokens as batch
  1; in bfloat16 they did not (padding changes the reduction shapes), so use
  ``batch_size = 1`` for bf16 runs that must match batch-1 outputs. Sampled
  mode always runs one request at a time, seeding torch's generator with the
  request's seed right before its generation.
- Timings: ``prefill_s`` = time to the first generated token, ``decode_s`` =
  the rest, both of the chunk's wall time divided by the number of requests in
  the chunk (amortised, as in ``runners.base.Timings``).
  ``peak_memory_bytes``: ``torch.cuda.max_memory_allocated`` for the chunk on
  CUDA, else the process's peak resident set size (``getrusage``).

- ``decode_loop = "lean"`` (greedy only; sampled mode always uses
  ``generate``): ``runners.lean.LeanDecoder`` instead of ``generate``:
  each prompt prefilled alone exactly as ``generate`` does at batch 1, then
  the chunk decoded as one batch by a hand-written forward over the model's
  own weights, finished sequences dropped at once. Same tokens as
  ``generate`` at batch 1 (tests; ``guardrepro check-invariance``); margins
  equal up to float32 rounding of batched kernels (as with ``generate``'s own
  left-padded batches). The decoder reads the checkpoint's safetensors itself
  (``runners.lean_weights``), so no transformers model is built and its
  modelling code is never imported (about 2 s of start-up on the development
  machine); a checkpoint whose tensors are not laid out as the decoder
  expects is loaded with transformers and its tensors used, as before. The
  model is loaded on first use of ``HFRunner.model`` (sampled mode,
  teacher-forced passes). Verified in float32; in bf16/fp16 batched rows can
  differ from batch 1 as they do with ``generate``. Llama-family models only
  (qwen2, llama); others are refused at load time with the reason.

Options (``[backend_options]``; types, choices, defaults and help declared in
``runners.backends.HF``): ``dtype`` (float32 | bfloat16 | float16), ``device``
(cpu | cuda | cuda:N | mps), ``batch_size``, ``threads`` (torch CPU threads:
an integer, or ``"auto"`` = ``workers.auto_threads``: the physical cores this
process may use less one, shared among the workers, at least 1; absent:
torch's), ``attn_implementation`` (sdpa | eager), ``decode_loop`` (generate |
lean), ``decode_slots`` (lean: rows decoded at once, continuous batching).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import torch
import transformers
from transformers import GenerationConfig, StoppingCriteria

from guardrepro.decoding import DecodingParams
from guardrepro.errors import InferenceError, InputError
from guardrepro.run.runners.backends import HF
from guardrepro.run.runners.base import Generation, GenerationRequest, shared_timings
from guardrepro.run.runners.lean import LeanDecoder
from guardrepro.run.runners.lean_weights import LeanWeights, from_checkpoint, unsupported_reason
from guardrepro.run.runners.torch_load import open_checkpoint

log = logging.getLogger(__name__)


def _option_error(key: str, message: str) -> InputError:
    return InputError(message, field=f"backend_options.{key}")


def _validate(options: Mapping[str, Any]) -> dict[str, Any]:
    """The options checked against ``HF.options`` and filled (as
    ``create_runner`` hands them: not checked again); threads ``"auto"``
    becomes ``workers.auto_threads(1)`` (one process)."""
    out = dict(HF.options.check(options))
    if out["threads"] == "auto":
        from guardrepro.run.workers import auto_threads

        out["threads"] = auto_threads(1)
    return out


def _shared(chunk: Sequence[GenerationRequest], key: str) -> tuple[int, ...]:
    """The ``score_token_ids`` or ``label_token_ids`` every request of a chunk
    shares (one guard per run)."""
    sets = {getattr(r, key) for r in chunk}
    if len(sets) != 1:
        raise InferenceError(f"requests {[r.row_id for r in chunk]} ask for different {key}")
    return cast(tuple[int, ...], sets.pop())


def preload(checkpoint_dir: Path, options: Mapping[str, Any]) -> None:
    """Import, in this process, what loading ``checkpoint_dir`` and its tokenizer
    will import: the tokenizer classes, and the model class named by its
    ``config.json`` (transformers imports a model's modelling modules only when
    ``from_pretrained`` resolves its class) unless the lean decoder will read
    the weights itself (``decode_loop = "lean"`` on a model type it runs:
    ``lean_weights``). Run by the parent before worker processes fork
    (``run.workers.start_method``), so that each worker inherits the modules
    instead of importing them itself, side by side with the others. Reads the
    config only: no weights, no tokenizer, no tensor op (no torch thread pool
    starts before the fork)."""
    from transformers import AutoConfig, AutoTokenizer  # noqa: F401  (tokenizer classes)

    try:
        config = AutoConfig.from_pretrained(str(checkpoint_dir), local_files_only=True,
                                            trust_remote_code=False)
        if options.get("decode_loop") == "lean" and unsupported_reason(
                config, options.get("attn_implementation")) is None:
            import safetensors.torch  # noqa: F401  (what the lean weights are read with)

            return
        from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

        MODEL_FOR_CAUSAL_LM_MAPPING[type(config)]  # imports the modelling module
    except (OSError, ValueError, KeyError):
        return  # the worker's own load reports it, with its context


class _FirstTokenClock(StoppingCriteria):
    """Never stops generation; notes when the first token was produced."""

    def __init__(self, sync: Callable[[], None]) -> None:
        self.first: float | None = None
        self._sync = sync

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kw: Any) -> Any:
        if self.first is None:
            self._sync()
            self.first = time.perf_counter()
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)


class HFRunner:
    backend = HF.name

    def __init__(
        self,
        checkpoint_dir: Path,
        options: Mapping[str, Any],
        *,
        eos_token_ids: Sequence[int],
        pad_token_id: int | None,
        decode: Callable[[Sequence[int]], str],
    ) -> None:
        self.options = _validate(options)
        if not eos_token_ids:
            raise InputError("at least one EOS token id is needed", field="eos_token_ids")
        self.eos_token_ids = tuple(int(i) for i in eos_token_ids)
        self.pad_token_id = self.eos_token_ids[-1] if pad_token_id is None else int(pad_token_id)
        self.decode = decode
        self.checkpoint_dir = Path(checkpoint_dir)
        # safetensors only, threads, dtype, device, no checkpoint generation defaults
        self._loaded = open_checkpoint(self.checkpoint_dir, self.options, backend=HF.name)
        self.device, self.dtype = self._loaded.device, self._loaded.dtype
        self._step_margins: list[torch.Tensor] = []
        self._score_ids: list[int] = []
        self._score_logits: torch.Tensor | None = None
        self._label_ids: list[int] = []
        self._label_steps: list[torch.Tensor] = []
        self._lean: LeanDecoder | None = None
        try:
            if self.options["decode_loop"] == "lean":
                self._lean = LeanDecoder(self._lean_weights())
                self._lean.warm_up(self.pad_token_id)
            else:
                self.model  # noqa: B018  (loaded now: a load error is raised here)
        except BaseException:
            self._loaded.close()
            raise

    def _lean_weights(self) -> LeanWeights:
        """The lean decoder's tensors: read from the checkpoint's safetensors
        (no transformers model built: ``lean_weights``), or, where the files are
        not laid out as the decoder expects, taken from the loaded model."""
        weights, why = from_checkpoint(self.checkpoint_dir, self._loaded.files, self.dtype,
                                       self.device, self.options["attn_implementation"])
        if weights is not None:
            return weights
        log.info("hf runner: lean decoder weights from the transformers model (%s)", why)
        reason = unsupported_reason(self.model.config)
        if reason is not None:
            raise _option_error("decode_loop", f"lean decoding cannot run this model: {reason}")
        return LeanWeights.of_model(self.model)

    @property
    def model(self) -> Any:
        """The transformers model, loaded on first use (a lean run that reads its
        weights from the files never needs it; ``generate`` and teacher-forced
        passes do)."""
        model = self._loaded.load_model()
        if model.get_output_embeddings() is None:
            raise InputError("the model has no output embedding (lm_head)", field="checkpoint")
        return model

    def _capture(self, module: Any, inputs: Any, output: torch.Tensor) -> None:
        # The last position's logits of this forward pass are one decoding
        # step; keep only their top-1 minus top-2 gap, not the whole vocabulary.
        last = output[:, -1, :].detach().float()
        top2 = torch.topk(last, k=2, dim=-1).values
        if not self._step_margins and self._score_ids:  # first step: a logit guard's tokens
            self._score_logits = last[:, self._score_ids].cpu()
        if self._label_ids:
            self._label_steps.append(last[:, self._label_ids].cpu())
        self._step_margins.append((top2[:, 0] - top2[:, 1]).cpu())

    def describe(self) -> dict[str, Any]:
        info: dict[str, Any] = {
            "backend": self.backend,
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "dtype": self.options["dtype"],
            "device": self.options["device"],
            "batch_size": self.options["batch_size"],
            "attn_implementation": self.options["attn_implementation"],
        }
        if self.options["decode_loop"] != "generate":  # absent key: older provenance unchanged
            info["decode_loop"] = self.options["decode_loop"]
        if self.options["decode_slots"] is not None:  # likewise
            info["decode_slots"] = self.options["decode_slots"]
        if self.device.type == "cuda":
            info["device_name"] = torch.cuda.get_device_name(self.device)
            info["compute_capability"] = ".".join(
                str(v) for v in torch.cuda.get_device_capability(self.device)
            )
        return info

    def _generation_config(self, params: DecodingParams) -> GenerationConfig:
        common: dict[str, Any] = {
            "max_new_tokens": params.max_new_tokens,
            "min_new_tokens": 0,
            "eos_token_id": list(self.eos_token_ids),
            "pad_token_id": self.pad_token_id,
            "num_beams": 1,
            "repetition_penalty": 1.0,
            "no_repeat_ngram_size": 0,
            "return_dict_in_generate": True,
            "use_cache": True,
        }
        if params.mode == "greedy":
            return GenerationConfig(
                do_sample=False, top_k=None, top_p=None, temperature=None, **common
            )
        return GenerationConfig(
            do_sample=True, temperature=params.temperature, top_p=params.top_p, top_k=0, **common
        )

    def _sync(self) -> None:
        self._loaded.sync()

    def _peak_memory(self) -> int:
        return self._loaded.peak_memory()

    def generate(
        self, requests: Sequence[GenerationRequest], params: DecodingParams
    ) -> list[Generation]:
        config = self._generation_config(params)
        out: list[Generation] = []
        if params.mode == "sampled":
            for request in requests:
                if request.seed is None:
                    raise InputError(
                        f"sampled decoding needs a seed for request {request.row_id!r}",
                        field="seed",
                    )
                out.extend(self._generate_chunk([request], config, seed=request.seed))
            return out
        size = self.options["batch_size"]
        for start in range(0, len(requests), size):
            chunk = requests[start : start + size]
            if self._lean is not None:
                out.extend(self._lean_chunk(chunk, params))
            else:
                out.extend(self._generate_chunk(chunk, config, seed=None))
        return out

    def _lean_chunk(
        self, chunk: Sequence[GenerationRequest], params: DecodingParams
    ) -> list[Generation]:
        assert self._lean is not None
        ids = [r.row_id for r in chunk]
        for request in chunk:
            if not request.prompt_token_ids:
                raise InferenceError(f"request {request.row_id!r} has an empty prompt")
        start = time.perf_counter()
        try:
            decoded, prefill_s = self._lean.decode(
                [r.prompt_token_ids for r in chunk],
                eos_token_ids=self.eos_token_ids,
                max_new_tokens=params.max_new_tokens,
                label_ids=_shared(chunk, "label_token_ids"),
                slots=self.options["decode_slots"],
            )
        except (RuntimeError, IndexError, ValueError) as exc:
            raise InferenceError(f"lean greedy decoding failed for {ids}: {exc}") from exc
        self._sync()
        timings = shared_timings(prefill_s, time.perf_counter() - start, len(chunk))
        peak = self._peak_memory()
        return [
            Generation.from_tokens(request.row_id, d.token_ids, d.margins,
                                   eos_token_ids=self.eos_token_ids, decode=self.decode,
                                   timings=timings, peak_memory_bytes=peak,
                                   label_logits=d.label_logits if request.label_token_ids
                                   else None)
            for request, d in zip(chunk, decoded, strict=True)
        ]

    def _generate_chunk(
        self, chunk: Sequence[GenerationRequest], config: GenerationConfig, *, seed: int | None
    ) -> list[Generation]:
        ids = [r.row_id for r in chunk]
        for request in chunk:
            if not request.prompt_token_ids:
                raise InferenceError(f"request {request.row_id!r} has an empty prompt")
        width = max(len(r.prompt_token_ids) for r in chunk)
        input_ids = torch.full((len(chunk), width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(chunk), width), dtype=torch.long)
        for row, request in enumerate(chunk):
            n = len(request.prompt_token_ids)
            input_ids[row, width - n :] = torch.tensor(request.prompt_token_ids, dtype=torch.long)
            mask[row, width - n :] = 1
        clock = _FirstTokenClock(self._sync)
        self._step_margins = []
        self._score_ids, self._score_logits = list(_shared(chunk, "score_token_ids")), None
        self._label_ids, self._label_steps = list(_shared(chunk, "label_token_ids")), []
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        if seed is not None:
            torch.manual_seed(seed)
        model = self.model
        # the margins (and a logit guard's scores) of each step, from the head's output
        hook = model.get_output_embeddings().register_forward_hook(self._capture)
        start = time.perf_counter()
        try:
            with torch.inference_mode():
                result = model.generate(
                    input_ids=input_ids.to(self.device),
                    attention_mask=mask.to(self.device),
                    generation_config=config,
                    stopping_criteria=[clock],
                )
        except (RuntimeError, IndexError, ValueError) as exc:
            raise InferenceError(f"transformers generate failed for {ids}: {exc}") from exc
        finally:
            hook.remove()
            steps, self._step_margins = self._step_margins, []
            label_steps, self._label_steps = self._label_steps, []
        self._sync()
        end = time.perf_counter()
        first = clock.first if clock.first is not None else end
        timings = shared_timings(first - start, end - start, len(chunk))
        peak = self._peak_memory()
        generated = result.sequences[:, width:].tolist()
        if len(steps) < len(generated[0]):
            raise InferenceError(
                f"captured {len(steps)} logit steps for {len(generated[0])} tokens of {ids}"
            )
        margins = self._margins(steps[: len(generated[0])])
        scores = self._score_logits.tolist() if self._score_logits is not None else None
        labels = (torch.stack(label_steps[: len(generated[0])], dim=1).tolist()
                  if label_steps else None)  # (batch, steps, label ids)
        return [
            Generation.from_tokens(request.row_id, generated[row], margins[row],
                                   eos_token_ids=self.eos_token_ids, decode=self.decode,
                                   timings=timings, peak_memory_bytes=peak,
                                   score_logits=None if scores is None else scores[row],
                                   label_logits=None if labels is None else labels[row])
            for row, request in enumerate(chunk)
        ]

    @staticmethod
    def _margins(steps: list[torch.Tensor]) -> list[list[float]]:
        if not steps:
            return []
        return torch.stack(steps, dim=1).tolist()  # (batch, steps)

    def close(self) -> None:
        """Release the model and restore torch's thread count (a process-wide setting)."""
        self._lean = None
        self._loaded.close()
