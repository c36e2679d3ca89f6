"""The one protocol every inference backend implements.

Contract: ``generate`` takes a whole batch of requests whose prompts are
already token ids (the chat template was applied once, by
``guardrepro.run.prompts``, so no backend can render a different prompt) and
returns one ``Generation`` per request, in request order. Greedy decoding
must not sample, must not apply top-k, top-p or a repetition penalty, and
must stop on any of the checkpoint's EOS ids. ``step_margins[i]`` is the
gap between the largest and second-largest logit (equivalently logprob)
at generated position ``i``; the guard adapter picks the decision position.
A backend failure for one request raises ``InferenceError``; the caller
records it as an ``inference_error`` row.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from guardrepro.schema import DecodingParams, Timings


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
