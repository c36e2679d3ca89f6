"""The one protocol every inference backend implements.

Contract: ``generate`` takes a whole batch of requests whose prompts are
already token ids (the chat template was applied once, by
``guardrepro.run.prompts``, so no backend can render a different prompt) and
returns one ``Generation`` per request, in request order. Greedy decoding
must not sample, must not apply top-k, top-p or a repetition penalty, and
must stop on any of the checkpoint's EOS ids. ``step_margins[i]`` is the
gap between the largest and second-largest logit (equivalently logprob)
at generated position ``i``; the guard adapter picks the decision position.
``label_logits[i]``, when the requests name ``label_token_ids`` and the
backend reads them, is the raw logits (or logprobs) of those ids, in that
order, at generated position ``i``: what ``guards.decision`` reads P(unsafe)
from.
A backend failure for one request raises ``InferenceError``; the caller
records it as an ``inference_error`` row.

``Generation.from_tokens`` is how a decoder's raw output becomes a
``Generation``: the ids cut after the first EOS id (kept, finish ``"stop"``)
or kept whole (``"length"``), the text decoded without that EOS, the margins
cut to the kept ids; ``shared_timings`` splits a batch's clock among its
requests.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from guardrepro.decoding import DecodingParams
from guardrepro.schema import Timings


@dataclass(frozen=True)
class GenerationRequest:
    """One prompt to generate for. ``prompt_text`` is the rendered guard prompt
    (before the chat template): a backend with its own tokenizer (MLX) checks
    that it tokenizes it to exactly ``prompt_token_ids`` and fails the row if not."""

    row_id: str
    prompt_token_ids: tuple[int, ...]
    seed: int | None = None
    prompt_text: str | None = None
    # A conversation guard's messages (role, content): a backend with its own
    # tokenizer checks these instead of ``prompt_text`` as one user message.
    prompt_messages: tuple[tuple[str, str], ...] | None = None
    # A logit guard's score tokens: a backend that supports it returns their raw
    # logits at the first generated position in ``Generation.score_logits``.
    score_token_ids: tuple[int, ...] = ()
    # Every decision label's token ids (``guards.decision.label_union``): a
    # backend that supports it returns their logits at every generated position
    # in ``Generation.label_logits``.
    label_token_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class Generation:
    row_id: str
    token_ids: tuple[int, ...]
    text: str
    finish_reason: str  # "stop" (an EOS id was produced) or "length" (max_new_tokens)
    step_margins: tuple[float, ...]
    timings: Timings  # this request's equal share of its batch's wall time
    peak_memory_bytes: int | None = None
    score_logits: tuple[float, ...] | None = None
    label_logits: tuple[tuple[float, ...], ...] | None = None

    @classmethod
    def from_tokens(
        cls,
        row_id: str,
        tokens: Sequence[int],
        margins: Sequence[float],
        *,
        eos_token_ids: Collection[int],
        decode: Callable[[Sequence[int]], str],
        timings: Timings,
        peak_memory_bytes: int | None = None,
        score_logits: Sequence[float] | None = None,
        label_logits: Sequence[Sequence[float]] | None = None,
    ) -> Generation:
        """The generation of ``tokens``, the ids a decoder produced (a batch row
        may run on past its EOS): up to and including the first EOS id
        (finish ``"stop"``), else all of them (``"length"``); ``text`` is
        ``decode`` of the kept ids without the EOS, ``step_margins`` the first
        ``len(token_ids)`` of ``margins`` (and of ``label_logits``)."""
        ids = [int(t) for t in tokens]
        eos = set(eos_token_ids)
        stop = next((i for i, t in enumerate(ids) if t in eos), None)
        kept, finish = (ids, "length") if stop is None else (ids[: stop + 1], "stop")
        return cls(
            row_id=row_id,
            token_ids=tuple(kept),
            text=decode(kept if stop is None else kept[:-1]),
            finish_reason=finish,
            step_margins=tuple(float(m) for m in margins[: len(kept)]),
            timings=timings,
            peak_memory_bytes=peak_memory_bytes,
            score_logits=None if score_logits is None else tuple(score_logits),
            label_logits=None if label_logits is None else tuple(
                tuple(float(v) for v in step) for step in label_logits[: len(kept)]),
        )


def shared_timings(prefill_s: float, total_s: float, requests: int = 1) -> Timings:
    """A batch's seconds to its first tokens (``prefill_s``) and in all
    (``total_s``), shared equally by its ``requests``."""
    return Timings(prefill_s=prefill_s / requests, decode_s=(total_s - prefill_s) / requests,
                   total_s=total_s / requests)


@runtime_checkable
class Runner(Protocol):
    """A loaded model that generates for batches of tokenized prompts."""

    backend: str

    def describe(self) -> Mapping[str, Any]:
        """Backend configuration for provenance: versions, dtype, device,
        batch size, any determinism-relevant setting. Hashed into the run's
        provenance, so it must not contain timings or paths that vary."""
        ...

    def generate(
        self, requests: Sequence[GenerationRequest], params: DecodingParams
    ) -> list[Generation]:
        ...

    def close(self) -> None:
        ...
