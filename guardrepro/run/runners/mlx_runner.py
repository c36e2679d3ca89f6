"""The MLX backend: a verified MLX artifact (or HF-layout checkpoint) run with mlx-lm.

Input: a local checkpoint directory (normally an artifact written by
``guardrepro quantize`` and verified through its lock), the profile's
``[backend_options]``, the checkpoint's EOS ids and the project's decode
function (see ``guardrepro.run.runners.registry`` for the constructor contract),
then batches of ``GenerationRequest`` whose prompts are already token ids.

Output: one ``Generation`` per request: generated ids (including the EOS id
that stopped it), ``decode`` of the ids without that EOS, finish reason,
per-step top1-top2 logit gap computed from the raw float32 logits, timings
and MLX's peak memory for the request.

Invariants:
- The model is loaded with ``mlx_lm.load`` from local files, no remote code.
  A config that mlx-lm would misread (``rope_theta`` only inside
  ``rope_parameters``) is corrected in memory through ``model_config`` and the
  correction is part of ``describe()``; the files are never modified.
- Greedy mode is an argmax over the raw logits at every step: no temperature,
  top-k, top-p or repetition penalty; ties go to the lowest id (``mx.argmax``).
  Sampled mode draws from ``softmax(logits / temperature)`` restricted to the
  top-p nucleus (mlx-lm's sampler), seeded per request with ``mx.random.seed``.
- Decoding stops at the first id in the EOS set or after ``max_new_tokens``.
- ``check_prompt(text, ids)`` tokenizes the rendered prompt with mlx-lm's own
  tokenizer wrapper (its ``apply_chat_template``) and raises
  ``InferenceError`` unless the ids equal the given ones; a request that
  carries ``prompt_text`` is checked before generation and the outcome is
  kept in ``prompt_checks[row_id]``.
- ``batch_size`` 1 (the default) runs requests one at a time, as the
  published Q8 run did. ``batch_size`` N > 1 (greedy only; sampled mode
  stays at batch 1) decodes N requests together (``runners.mlx_batch``:
  each prompt prefilled alone, decoding batched over a left-padded cache).
  Batched tokens are not guaranteed to equal batch 1 for every recipe, so
  the runner checks: its first batch is also decoded at batch 1, and unless
  every row's tokens and finish reason are identical it logs the differing
  rows, returns the batch-1 results and runs batch 1 from then on.
  The attribute ``batching`` says which happened (``"unchecked"`` before the
  first batch, ``"verified on N rows"``, or ``"fell back to batch 1: ..."``);
  ``describe()`` (hashed into provenance, so fixed per configuration) states
  the rule, or the load-time fallback of a model whose caches cannot be
  merged or of an mlx-lm whose batch generation ignores the padding mask
  (mlx-lm <= 0.31.3, mlx-lm issue #1906: ``mlx_batch.version_reason``).
- ``prefix_reuse`` (default on; greedy only): a prompt that shares at least
  ``MIN_PREFIX`` leading tokens with a recent prompt (the last
  ``PREFIX_STORE`` prompts at batch 1, the earlier prompts of its batch when
  batched) prefills only its remainder on top of copies of that prompt's
  cached positions (``runners.mlx_batch``). The same rule as batching keeps
  tokens identical: the first ``REUSE_CHECK_ROWS`` rows that reuse a prefix
  are also prefilled from scratch; the from-scratch results are returned,
  and unless every row's tokens and finish reason agree, reuse is switched
  off for the rest of the run with a warning naming the rows. The attribute
  ``prefix_reuse`` says which happened (``"unchecked"``, ``"checked on k
  rows so far"``, ``"verified on N rows"`` or ``"off: ..."``); ``describe()``
  states the rule. The first batch of a batched run (checked against batch
  1) prefills from scratch on both sides.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from guardrepro.decoding import DecodingParams
from guardrepro.errors import InferenceError, InputError
from guardrepro.run.runners import mlx_batch
from guardrepro.run.runners.backends import MLX
from guardrepro.run.runners.base import Generation, GenerationRequest, Timings, shared_timings
from guardrepro.run.runners.greedy import MIN_PREFIX, Prefix, PrefixStore
from guardrepro.run.runners.weights import require_safetensors
from guardrepro.versions import package_version

DECODER_VERSION = "guardrepro-mlx-loop-1"
log = logging.getLogger(__name__)
PREFIX_STORE = 4  # recent prompts whose caches a batch-1 prompt may reuse
REUSE_CHECK_ROWS = 4  # rows reusing a prefix that are also prefilled from scratch


def _validate(options: Mapping[str, Any]) -> dict[str, Any]:
    """The options checked against their declaration (``runners.backends.MLX``)
    and filled with its defaults."""
    return MLX.options.check(options)


class MLXRunner:
    """Runner protocol implementation on mlx-lm (see module docstring)."""

    backend = MLX.name

    def __init__(
        self,
        checkpoint_dir: Path,
        options: Mapping[str, Any],
        *,
        eos_token_ids: Sequence[int],
        pad_token_id: int | None,
        decode: Callable[[Sequence[int]], str],
    ) -> None:
        opts = _validate(options)
        self.batch_size: int = opts["batch_size"]
        self.prefill_step_size: int = opts["prefill_step_size"]
        device = opts["device"]
        self.checkpoint_dir = Path(checkpoint_dir)
        require_safetensors(self.checkpoint_dir, "mlx")
        self.eos_token_ids = tuple(int(i) for i in eos_token_ids)
        if not self.eos_token_ids:
            raise InputError("the EOS id set is empty", field="eos_token_ids")
        self.pad_token_id = pad_token_id
        self._decode = decode
        self.prompt_checks: dict[str, str] = {}

        import mlx.core as mx
        from mlx_lm import load

        from guardrepro.artifacts.quantize.convert import normalize_mlx_config

        if device != "default":
            try:
                mx.set_default_device(mx.gpu if device == "gpu" else mx.cpu)
            except ValueError as exc:  # e.g. "gpu" with the CPU-only Linux wheel
                raise InputError(str(exc), field="backend_options.device") from exc
        config_path = self.checkpoint_dir / "config.json"
        try:
            config = json.loads(config_path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise InputError(f"cannot read config: {exc}", file=str(config_path)) from exc
        normalized, self.config_changes = normalize_mlx_config(config, file=str(config_path))
        overrides = {k: v for k, v in normalized.items() if config.get(k) != v}
        loaded: Any = load(str(self.checkpoint_dir), model_config=overrides,
                           trust_remote_code=False)
        self.model, self.tokenizer = loaded
        self.quantization = config.get("quantization")
        self.dtypes = sorted({str(p.dtype).removeprefix("mlx.core.")
                              for _, p in _leaves(self.model.parameters())})
        want = opts["dtype"]
        if want is not None:
            floats = [d for d in self.dtypes if d in ("bfloat16", "float16", "float32")]
            if floats != [want]:
                raise InputError(f"profile asks for dtype {want!r} but the checkpoint's "
                                 f"floating tensors are {floats}", field="backend_options.dtype")
        self.device = str(mx.default_device())
        self.batching = "batch 1" if self.batch_size == 1 else "unchecked"
        self._batch_rule = ("batch 1" if self.batch_size == 1 else
                            "greedy batches; first batch checked against batch 1")
        if self.batch_size > 1:
            reason = (mlx_batch.version_reason(package_version("mlx-lm"))
                      or mlx_batch.unsupported_reason(self.model))
            if reason is not None:
                self._fall_back(reason)
                self._batch_rule = self.batching
        self._prefixes: PrefixStore[list[Any]] = PrefixStore(PREFIX_STORE)
        self._reuse_verified = 0
        self.reuse_stats = {"rows": 0, "prompt_tokens": 0, "reused_tokens": 0}
        if not opts["prefix_reuse"]:
            self.prefix_reuse = self._reuse_rule = "off: prefix_reuse = false"
        elif (reason := mlx_batch.unsupported_reason(self.model)) is not None:
            self.prefix_reuse = self._reuse_rule = f"off: {reason}"
        else:
            self.prefix_reuse = "unchecked"
            self._reuse_rule = (f"greedy prompts reuse a shared prefix of >= "
                                f"{MIN_PREFIX} tokens; the first "
                                f"{REUSE_CHECK_ROWS} such rows checked against a full prefill")

    # ------------------------------------------------------------ protocol

    def describe(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "mlx": package_version("mlx"),
            "mlx_lm": package_version("mlx-lm"),
            "device": self.device,
            "quantization": self.quantization,
            "tensor_dtypes": self.dtypes,
            "config_normalisation": list(self.config_changes),
            "batch_size": self.batch_size,
            "batching": self._batch_rule,
            "prefill_step_size": self.prefill_step_size,
            "prefix_reuse": self._reuse_rule,
            "eos_token_ids": list(self.eos_token_ids),
            "decoder": DECODER_VERSION,
        }

    def generate(self, requests: Sequence[GenerationRequest],
                 params: DecodingParams) -> list[Generation]:
        out: list[Generation] = []
        for request in requests:
            if request.prompt_messages is not None:
                self.check_prompt(request.prompt_messages, request.prompt_token_ids,
                                  row_id=request.row_id)
            elif request.prompt_text is not None:
                self.check_prompt(request.prompt_text, request.prompt_token_ids,
                                  row_id=request.row_id)
        size = self.batch_size
        for start in range(0, len(requests), size):
            chunk = requests[start : start + size]
            if params.mode != "greedy" or len(chunk) == 1 or not self._batching_on():
                out.extend(self._generate_one(r, params) for r in chunk)
            elif self.batching == "unchecked":
                out.extend(self._checked_batch(chunk, params))
            else:
                out.extend(self._reusing_batch(chunk, params))
        return out

    def close(self) -> None:
        import mlx.core as mx

        self._prefixes.clear()
        self.model = None
        self.tokenizer = None
        mx.clear_cache()

    # ------------------------------------------------------------ checks

    def chat_ids(self, text: str | Sequence[tuple[str, str]]) -> tuple[int, ...]:
        """The rendered prompt (one user message, or a conversation of
        (role, content) pairs) tokenized by mlx-lm's tokenizer wrapper."""
        messages = ([{"role": "user", "content": text}] if isinstance(text, str)
                    else [{"role": r, "content": c} for r, c in text])
        ids = self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=True)
        if isinstance(ids, Mapping):
            ids = ids["input_ids"]
        return tuple(int(i) for i in ids)

    def check_prompt(self, text: str | Sequence[tuple[str, str]], token_ids: Sequence[int],
                     *, row_id: str = "") -> bool:
        """Raise InferenceError unless mlx-lm tokenizes ``text`` to ``token_ids``."""
        mine = self.chat_ids(text)
        given = tuple(int(i) for i in token_ids)
        if mine != given:
            at = next((i for i, (a, b) in enumerate(zip(mine, given, strict=False)) if a != b),
                      min(len(mine), len(given)))
            self.prompt_checks[row_id] = "mismatch"
            raise InferenceError(
                f"row {row_id!r}: mlx-lm's chat template gives different prompt ids "
                f"({len(mine)} vs {len(given)} tokens, first difference at {at})")
        self.prompt_checks[row_id] = "match"
        return True

    # ------------------------------------------------------------ decoding

    def _batching_on(self) -> bool:
        return self.batch_size > 1 and not self.batching.startswith("fell back")

    def _fall_back(self, reason: str) -> None:
        self.batching = f"fell back to batch 1: {reason}"
        log.warning("MLX batch_size %d: %s", self.batch_size, self.batching)

    def _checked_batch(self, chunk: Sequence[GenerationRequest],
                       params: DecodingParams) -> list[Generation]:
        """The first batch, decoded batched and at batch 1: the batch-1 results,
        and batching stays on only if every row's tokens agree."""
        batched, _ = self._generate_batch(chunk, params, reuse=False)
        single = [self._decode_one(r, params, None)[0] for r in chunk]
        differ = [b.row_id for b, s in zip(batched, single, strict=True)
                  if (b.token_ids, b.finish_reason) != (s.token_ids, s.finish_reason)]
        if differ:
            self._fall_back(f"batched tokens differ from batch 1 on {len(differ)} of "
                            f"{len(chunk)} rows of the first batch ({', '.join(differ[:5])})")
        else:
            self.batching = f"verified on {len(chunk)} rows"
        return single

    # ------------------------------------------------------------ prefix reuse

    def _reuse_on(self, params: DecodingParams) -> bool:
        return params.mode == "greedy" and not self.prefix_reuse.startswith("off")

    def _reuse_checking(self) -> bool:
        return self._reuse_verified < REUSE_CHECK_ROWS

    def _verify_reuse(self, reused: Sequence[Generation], scratch: Sequence[Generation]) -> None:
        """Compare rows decoded on a reused prefix with the same rows prefilled
        from scratch; any difference switches reuse off for the run."""
        differ = [a.row_id for a, b in zip(reused, scratch, strict=True)
                  if (a.token_ids, a.finish_reason) != (b.token_ids, b.finish_reason)]
        if differ:
            self._prefixes.clear()
            self.prefix_reuse = (
                f"off: tokens with a reused prompt prefix differ from a full prefill on "
                f"{len(differ)} of {len(reused)} checked rows ({', '.join(differ[:5])})")
            log.warning("MLX prefix reuse %s", self.prefix_reuse)
            return
        self._reuse_verified += len(reused)
        self.prefix_reuse = (f"verified on {self._reuse_verified} rows"
                             if not self._reuse_checking()
                             else f"checked on {self._reuse_verified} rows so far")

    def _count(self, request: GenerationRequest, reused: int) -> None:
        self.reuse_stats["rows"] += 1
        self.reuse_stats["prompt_tokens"] += len(request.prompt_token_ids)
        self.reuse_stats["reused_tokens"] += reused

    def _generate_one(self, request: GenerationRequest, params: DecodingParams) -> Generation:
        """One request at batch 1, on a stored prefix when reuse is on (checked
        against a full prefill while the first rows are verified)."""
        if not self._reuse_on(params):
            return self._decode_one(request, params, None)[0]
        prefix = self._prefixes.find(request.prompt_token_ids)
        gen, cache = self._decode_one(request, params, prefix)
        if prefix is not None and self._reuse_checking():
            scratch, cache = self._decode_one(request, params, None)
            self._verify_reuse([gen], [scratch])
            gen, prefix = scratch, None
        if self._reuse_on(params):
            self._prefixes.add(request.prompt_token_ids, cache)
        self._count(request, 0 if prefix is None else prefix.length)
        return gen

    def _reusing_batch(self, chunk: Sequence[GenerationRequest],
                       params: DecodingParams) -> list[Generation]:
        """A batch after the first, on prefixes shared within it when reuse is on
        (checked against a full prefill while the first rows are verified)."""
        reuse = self._reuse_on(params)
        gens, reused = self._generate_batch(chunk, params, reuse=reuse)
        rows = [i for i, n in enumerate(reused) if n]
        if rows and self._reuse_checking():
            scratch, _ = self._generate_batch(chunk, params, reuse=False)
            self._verify_reuse([gens[i] for i in rows], [scratch[i] for i in rows])
            gens, reused = scratch, [0] * len(chunk)
        if reuse:
            for request, n in zip(chunk, reused, strict=True):
                self._count(request, n)
        return gens

    def _generate_batch(self, chunk: Sequence[GenerationRequest], params: DecodingParams,
                        *, reuse: bool) -> tuple[list[Generation], list[int]]:
        """The chunk decoded together, and per row the prompt positions reused."""
        import mlx.core as mx

        for request in chunk:
            if not request.prompt_token_ids:
                raise InferenceError(f"row {request.row_id!r}: empty prompt")
        mx.reset_peak_memory()
        start = time.perf_counter()
        try:
            decoded = mlx_batch.decode_batch(
                self.model, [list(r.prompt_token_ids) for r in chunk],
                eos_token_ids=self.eos_token_ids, max_new_tokens=params.max_new_tokens,
                prefill_step_size=self.prefill_step_size, reuse=reuse,
                label_ids=_label_ids(chunk))
        except (RuntimeError, ValueError) as exc:
            ids = [r.row_id for r in chunk]
            raise InferenceError(f"rows {ids}: MLX batched generation failed: {exc}") from exc
        total = time.perf_counter() - start
        decode_s = (total - sum(d.prefill_s for d in decoded)) / len(chunk)
        peak = int(mx.get_peak_memory())
        out = [Generation.from_tokens(
            request.row_id, d.token_ids, d.margins, eos_token_ids=self.eos_token_ids,
            decode=self._decode, timings=Timings(prefill_s=d.prefill_s, decode_s=decode_s,
                                                 total_s=d.prefill_s + decode_s),
            peak_memory_bytes=peak, label_logits=d.label_logits if request.label_token_ids
            else None) for request, d in zip(chunk, decoded, strict=True)]
        return out, [d.reused for d in decoded]

    def logits(self, token_ids: Sequence[int]) -> Any:
        """Teacher-forced float32 logits, shape (len(token_ids), vocab) (tests, probes)."""
        import mlx.core as mx

        out = self.model(mx.array([list(token_ids)]))[0].astype(mx.float32)
        mx.eval(out)
        return out

    def _decode_one(self, request: GenerationRequest, params: DecodingParams,
                    prefix: Prefix[list[Any]] | None) -> tuple[Generation, list[Any]]:
        """One request decoded alone (on ``prefix`` when given): its result and
        its cache (prompt positions first, then the generated ones)."""
        import mlx.core as mx
        ids = list(request.prompt_token_ids)
        if not ids:
            raise InferenceError(f"row {request.row_id!r}: empty prompt")
        sampler = None
        if params.mode == "sampled":
            from mlx_lm.sample_utils import make_sampler

            if request.seed is None:
                raise InferenceError(f"row {request.row_id!r}: sampled decoding needs a seed")
            mx.random.seed(request.seed)
            sampler = make_sampler(temp=params.temperature, top_p=params.top_p)
        eos = set(self.eos_token_ids)
        mx.reset_peak_memory()
        start = time.perf_counter()
        try:
            cache, logits = mlx_batch.prefill(self.model, ids, self.prefill_step_size, prefix)
            tokens: list[int] = []
            margins: list[float] = []
            columns = mx.array(list(request.label_token_ids)) if request.label_token_ids else None
            labels: list[list[float]] = []
            prefill_done: float | None = None
            while True:
                top2 = mx.topk(logits, 2)
                if sampler is None:
                    token = mx.argmax(logits)
                else:
                    logprobs = logits - mx.logsumexp(logits, keepdims=True)
                    token = sampler(logprobs[None])[0]
                mx.eval(token, top2)
                if prefill_done is None:
                    prefill_done = time.perf_counter()
                pair: Any = top2.tolist()
                margins.append(float(abs(pair[0] - pair[1])))
                if columns is not None:
                    labels.append([float(v) for v in logits[columns].tolist()])
                chosen: Any = token.item()
                tokens.append(int(chosen))
                if tokens[-1] in eos:
                    break
                if len(tokens) >= params.max_new_tokens:
                    break
                logits = self.model(mx.array([[tokens[-1]]]), cache=cache)[0, -1]
                logits = logits.astype(mx.float32)
        except (RuntimeError, ValueError) as exc:
            raise InferenceError(f"row {request.row_id!r}: MLX generation failed: {exc}") from exc
        end = time.perf_counter()
        assert prefill_done is not None
        return Generation.from_tokens(
            request.row_id, tokens, margins, eos_token_ids=eos, decode=self._decode,
            timings=shared_timings(prefill_done - start, end - start),
            peak_memory_bytes=int(mx.get_peak_memory()),
            label_logits=labels if columns is not None else None,
        ), cache


def _label_ids(chunk: Sequence[GenerationRequest]) -> tuple[int, ...]:
    """The label ids the chunk's requests share (one guard per run)."""
    sets = {r.label_token_ids for r in chunk}
    if len(sets) != 1:
        raise InferenceError(f"rows {[r.row_id for r in chunk]} ask for different label tokens")
    return sets.pop()


def _leaves(tree: Any) -> list[tuple[str, Any]]:
    """Flatten an mlx parameter tree (dicts and lists) into (path, array) pairs."""
    from mlx.utils import tree_flatten

    flat: Any = tree_flatten(tree)
    return list(flat)
