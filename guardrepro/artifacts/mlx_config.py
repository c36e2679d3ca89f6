"""Per-architecture checks of a transformers ``config.json`` before mlx-lm reads it.

Input: a checkpoint's ``config.json`` (a mapping). Output: the keys mlx-lm
must read explicitly, as a list of problems (each ``(field, message)``) for
the architecture's ``model_type``.

What mlx-lm 0.32 reads, by ``model_type`` (its ``ModelArgs`` classes), and
what this module therefore requires:

- ``qwen2``: no ``head_dim`` (it derives ``hidden_size // heads``), so a
  declared ``head_dim`` must equal that; ``rope_theta`` defaults to 1e6
  (transformers: 1e4), so it must be explicit; no sliding window.
- ``qwen3``: reads ``head_dim`` (required; any value) and ``rope_theta``
  (also from ``rope_parameters``); no sliding window.
- ``llama``: reads ``head_dim`` (default ``hidden_size // heads``) and
  ``rope_theta`` (default 1e4: must be explicit); rope scaling only through a
  top-level ``rope_scaling``.
- ``gemma``: reads ``head_dim`` (required) and ``rope_theta`` (default 1e4:
  explicit); its MLP uses the exact (erf) GELU, so ``hidden_activation`` /
  ``hidden_act`` must be ``gelu``; transformers' default tanh approximation
  is refused.
- ``gemma2``: as ``gemma`` plus the soft-capping values and
  ``query_pre_attn_scalar`` (mlx-lm's defaults 50 / 30 / 144 differ from a
  2B checkpoint's 256), which must be explicit; mlx-lm implements no sliding
  window, so ``sliding_window`` must cover ``max_position_embeddings``.

Any other ``model_type`` is refused (``unsupported``): normalisation is only
claimed where it was written and tested.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

Problem = tuple[str, str]


def _derived_head_dim(config: Mapping[str, Any]) -> int | None:
    heads, hidden = config.get("num_attention_heads"), config.get("hidden_size")
    if isinstance(heads, int) and isinstance(hidden, int) and heads > 0:
        return hidden // heads
    return None


def _need(config: Mapping[str, Any], key: str, why: str) -> list[Problem]:
    return [] if config.get(key) is not None else [(key, f"missing; {why}")]


def _no_sliding(config: Mapping[str, Any]) -> list[Problem]:
    if config.get("use_sliding_window"):
        return [("use_sliding_window", "is true; mlx-lm's model ignores it")]
    return []


def _rope(config: Mapping[str, Any], default: str) -> list[Problem]:
    return _need(config, "rope_theta", f"mlx-lm would silently use its default {default}")


def _qwen2(config: Mapping[str, Any]) -> list[Problem]:
    out = _rope(config, "1e6") + _no_sliding(config)
    head_dim, derived = config.get("head_dim"), _derived_head_dim(config)
    if head_dim is not None and derived is not None and head_dim != derived:
        out.append(("head_dim", f"{head_dim} != hidden_size/num_attention_heads ({derived}); "
                                "mlx-lm's qwen2 derives it from the latter"))
    return out


def _qwen3(config: Mapping[str, Any]) -> list[Problem]:
    return (_need(config, "head_dim", "mlx-lm's qwen3 requires it") + _rope(config, "(none)")
            + _no_sliding(config))


def _llama(config: Mapping[str, Any]) -> list[Problem]:
    return _rope(config, "1e4")


def _gelu(config: Mapping[str, Any]) -> list[Problem]:
    act = config.get("hidden_activation") or config.get("hidden_act")
    if act != "gelu":
        return [("hidden_activation", f"{act!r}: mlx-lm's gemma uses the exact GELU; only "
                                      "'gelu' gives the same model")]
    return []


def _gemma(config: Mapping[str, Any]) -> list[Problem]:
    return _need(config, "head_dim", "mlx-lm's gemma requires it") + _rope(config, "1e4") + \
        _gelu(config)


def _gemma2(config: Mapping[str, Any]) -> list[Problem]:
    out = _need(config, "head_dim", "mlx-lm's gemma2 requires it") + _rope(config, "1e4")
    for key, default in (("attn_logit_softcapping", "50"), ("final_logit_softcapping", "30"),
                         ("query_pre_attn_scalar", "144")):
        out += _need(config, key, f"mlx-lm would silently use {default}")
    window, context = config.get("sliding_window"), config.get("max_position_embeddings")
    if isinstance(window, int) and isinstance(context, int) and window < context:
        out.append(("sliding_window", f"{window} < max_position_embeddings {context}; mlx-lm's "
                                      "gemma2 has no sliding window (longer prompts differ)"))
    return out


ARCHITECTURES: Mapping[str, Callable[[Mapping[str, Any]], list[Problem]]] = {
    "qwen2": _qwen2,
    "qwen3": _qwen3,
    "llama": _llama,
    "gemma": _gemma,
    "gemma2": _gemma2,
}


def architecture_problems(config: Mapping[str, Any]) -> list[Problem]:
    """What mlx-lm would read wrongly or ignore in ``config`` (empty: none)."""
    model_type = config.get("model_type")
    check = ARCHITECTURES.get(str(model_type))
    if check is None:
        return [("model_type", f"{model_type!r} is not one of the architectures whose MLX "
                               f"loading is checked ({', '.join(ARCHITECTURES)})")]
    return check(config)
