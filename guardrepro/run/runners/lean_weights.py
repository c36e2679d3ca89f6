"""The tensors the lean decoder (``runners.lean``) computes with, taken from a
loaded transformers model or read straight from a checkpoint's safetensors.

Input: a loaded ``Qwen2ForCausalLM`` / ``LlamaForCausalLM`` (``of_model``), or
a verified checkpoint directory, a dtype and a device (``from_checkpoint``).
Output: a ``LeanWeights``: the model's config, the token embedding, each
layer's tensors, the final norm, the output head and RoPE's inverse
frequencies.

Why read the files directly: building the transformers model imports its
modelling stack (``modeling_utils``, masking, activations, ``torch._dynamo``,
``torch.distributed.tensor``): about 2 s of a 5 s run of the toy guard on the
2-core development machine, paid by every ``guardrepro run`` process
(docs/THROUGHPUT.md, "Start-up"). The lean decoder needs only the tensors.

Invariants:

- The same tensors ``from_pretrained(dtype=...)`` would hold: safetensors only
  (``weights.require_safetensors`` first), each tensor cast with ``Tensor.to``
  as transformers casts it, the config parsed by transformers' own config
  class (``AutoConfig``: the same defaults), the output head tied to the
  embedding exactly when ``tie_word_embeddings`` says so, and RoPE's inverse
  frequencies by the default rule transformers applies (``1 / base **
  (arange(0, dim, 2) / dim)`` in float32).
- Nothing is guessed: a checkpoint whose tensor names or shapes are not
  exactly the ones this architecture has (``expected_names``), a tied model
  whose file also holds an output head, an activation other than SiLU, a
  ``quantization_config`` (of any method, even one that leaves plain
  tensors), or a config the lean decoder refuses (``unsupported_reason``) gives ``None`` with
  the reason, and the caller loads the transformers model as before.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from operator import attrgetter
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

SUPPORTED_MODEL_TYPES = ("qwen2", "llama")
ACTIVATIONS: Mapping[str, Callable[[torch.Tensor], torch.Tensor]] = {"silu": F.silu}


def unsupported_reason(config: Any, attn_implementation: str | None = None) -> str | None:
    """Why a model of ``config`` cannot use the lean decoder, or None when it can."""
    model_type = getattr(config, "model_type", None)
    if model_type not in SUPPORTED_MODEL_TYPES:
        return f"model_type {model_type!r} (the lean decoder supports {SUPPORTED_MODEL_TYPES})"
    rope = getattr(config, "rope_parameters", None) or {}
    if rope.get("rope_type", "default") != "default":
        return f"rope_type {rope.get('rope_type')!r} (only the default RoPE)"
    if any(t != "full_attention" for t in getattr(config, "layer_types", None) or []):
        return "sliding-window layers"
    attn = attn_implementation or getattr(config, "_attn_implementation", None) or "sdpa"
    if attn != "sdpa":
        return f"attn_implementation {attn!r} (only sdpa)"
    if getattr(config, "mlp_bias", False):
        return "MLP biases"
    return None


# Each tensor field of ``LayerWeights``: its path below a decoder layer, as a
# module attribute and, after ``model.layers.<i>.``, as a checkpoint tensor name.
LAYER_TENSORS: Mapping[str, str] = {
    "norm_in": "input_layernorm.weight",
    "q": "self_attn.q_proj.weight", "q_bias": "self_attn.q_proj.bias",
    "k": "self_attn.k_proj.weight", "k_bias": "self_attn.k_proj.bias",
    "v": "self_attn.v_proj.weight", "v_bias": "self_attn.v_proj.bias",
    "o": "self_attn.o_proj.weight", "o_bias": "self_attn.o_proj.bias",
    "norm_post": "post_attention_layernorm.weight",
    "gate": "mlp.gate_proj.weight", "up": "mlp.up_proj.weight", "down": "mlp.down_proj.weight",
}


@dataclass(frozen=True)
class LayerWeights:
    """One decoder layer's tensors (a loaded model's own, not copies)."""

    norm_in: torch.Tensor
    q: torch.Tensor
    q_bias: torch.Tensor | None
    k: torch.Tensor
    k_bias: torch.Tensor | None
    v: torch.Tensor
    v_bias: torch.Tensor | None
    o: torch.Tensor
    o_bias: torch.Tensor | None
    norm_post: torch.Tensor
    gate: torch.Tensor
    up: torch.Tensor
    down: torch.Tensor
    act: Callable[[torch.Tensor], torch.Tensor]

    @classmethod
    def of(cls, layer: Any) -> LayerWeights:
        """A loaded decoder layer's own tensors (an absent bias is None)."""
        return cls(**{field: attrgetter(path)(layer) for field, path in LAYER_TENSORS.items()},
                   act=layer.mlp.act_fn)


@dataclass(frozen=True)
class LeanWeights:
    """What the lean decoder computes with (see the module docstring)."""

    config: Any
    embed: torch.Tensor
    layers: list[LayerWeights]
    norm: torch.Tensor
    head: torch.Tensor
    inv_freq: torch.Tensor
    device: torch.device

    @classmethod
    def of_model(cls, model: Any) -> LeanWeights:
        """The tensors of a loaded transformers model (shared, never copied)."""
        reason = unsupported_reason(model.config)
        if reason is not None:
            raise ValueError(f"the lean decoder cannot run this model: {reason}")
        inner = model.model
        layers = list(inner.layers)[: model.config.num_hidden_layers]
        return cls(model.config, inner.embed_tokens.weight, [LayerWeights.of(x) for x in layers],
                   inner.norm.weight, model.lm_head.weight,
                   inner.rotary_emb.inv_freq, next(model.parameters()).device)


def default_inv_freq(config: Any) -> torch.Tensor:
    """RoPE's inverse frequencies by transformers' default rule (float32)."""
    base = config.rope_parameters["rope_theta"]
    dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))


def _layer_shapes(config: Any) -> dict[str, tuple[int, ...] | None]:
    """Each ``LAYER_TENSORS`` field's shape in a layer of ``config`` (None: absent)."""
    hidden, inner = int(config.hidden_size), int(config.intermediate_size)
    heads, kv_heads = int(config.num_attention_heads), int(config.num_key_value_heads)
    head_dim = int(getattr(config, "head_dim", None) or hidden // heads)
    q, kv = heads * head_dim, kv_heads * head_dim
    qkv_bias = config.model_type == "qwen2" or bool(getattr(config, "attention_bias", False))
    o_bias = config.model_type == "llama" and bool(getattr(config, "attention_bias", False))
    return {
        "norm_in": (hidden,), "norm_post": (hidden,),
        "q": (q, hidden), "q_bias": (q,) if qkv_bias else None,
        "k": (kv, hidden), "k_bias": (kv,) if qkv_bias else None,
        "v": (kv, hidden), "v_bias": (kv,) if qkv_bias else None,
        "o": (hidden, q), "o_bias": (hidden,) if o_bias else None,
        "gate": (inner, hidden), "up": (inner, hidden), "down": (hidden, inner),
    }


def expected_names(config: Any) -> dict[str, tuple[int, ...]]:
    """Every tensor name of a Qwen2 / Llama checkpoint of ``config`` and its shape
    (the output head only when it is not tied to the embedding)."""
    hidden, vocab = int(config.hidden_size), int(config.vocab_size)
    names: dict[str, tuple[int, ...]] = {
        "model.embed_tokens.weight": (vocab, hidden),
        "model.norm.weight": (hidden,),
    }
    if not config.tie_word_embeddings:
        names["lm_head.weight"] = (vocab, hidden)
    shapes = _layer_shapes(config)
    for i in range(int(config.num_hidden_layers)):
        names.update({f"model.layers.{i}.{LAYER_TENSORS[field]}": shape
                      for field, shape in shapes.items() if shape is not None})
    return names


def _read(files: list[Path], dtype: torch.dtype, device: torch.device
          ) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    tensors: dict[str, torch.Tensor] = {}
    for path in files:
        for name, tensor in load_file(str(path), device="cpu").items():
            if name in tensors:
                raise ValueError(f"tensor {name!r} is in more than one file")
            tensors[name] = tensor.to(dtype).to(device)
    return tensors


def from_checkpoint(checkpoint_dir: Path, files: list[Path], dtype: torch.dtype,
                    device: torch.device, attn_implementation: str
                    ) -> tuple[LeanWeights | None, str]:
    """The lean decoder's tensors read from ``files`` (the directory's verified
    safetensors), or ``None`` and why not (see the module docstring)."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(str(checkpoint_dir), local_files_only=True,
                                        trust_remote_code=False)
    if getattr(config, "quantization_config", None) is not None:  # transformers' to read
        return None, "a quantization_config"
    reason = unsupported_reason(config, attn_implementation)
    if reason is not None:
        return None, reason
    act = ACTIVATIONS.get(str(config.hidden_act))
    if act is None:
        return None, f"hidden_act {config.hidden_act!r}"
    expected = expected_names(config)
    tensors = _read(files, dtype, device)
    shapes = {name: tuple(t.shape) for name, t in tensors.items()}
    if shapes != expected:
        odd = sorted(set(shapes) ^ set(expected)) or sorted(
            n for n in expected if shapes[n] != expected[n])
        return None, f"tensor names or shapes not those of {config.model_type} ({odd[:3]})"

    def layer(i: int) -> LayerWeights:  # the names are checked above; an absent bias is None
        found: dict[str, Any] = {field: tensors.get(f"model.layers.{i}.{path}")
                                 for field, path in LAYER_TENSORS.items()}
        return LayerWeights(**found, act=act)

    layers = [layer(i) for i in range(int(config.num_hidden_layers))]
    embed = tensors["model.embed_tokens.weight"]
    head = embed if config.tie_word_embeddings else tensors["lm_head.weight"]
    return LeanWeights(config, embed, layers, tensors["model.norm.weight"], head,
                       default_inv_freq(config).to(device), device), ""
