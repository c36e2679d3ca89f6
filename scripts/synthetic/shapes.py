"""Model shapes for the synthetic benchmark: a Qwen2 config, nothing downloaded.

Input: a shape name (``tiny``, ``qwen2.5-7b``) or a JSON file of Qwen2 config
keys (``--config``). Output: a ``Shape``: the config keys (transformers
``Qwen2Config`` spelling, ``rope_theta`` at top level as mlx-lm and vLLM read
it), the EOS ids to suppress and force, and derived sizes (parameters, KV
bytes per token).

``qwen2.5-7b`` is Qwen2.5-7B-Instruct's published ``config.json`` (TS-Guard is
a fine-tune of it and keeps the shape). ``tiny`` keeps its layout (GQA,
biases on q/k/v only, untied head, SiLU MLP) at a few million parameters and a
32k context, with head dimension 64 (vLLM's CPU attention needs a supported
head size).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from guardrepro.errors import InputError

QWEN25_7B: dict[str, Any] = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "hidden_size": 3584,
    "intermediate_size": 18944,
    "num_hidden_layers": 28,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "vocab_size": 152064,
    "max_position_embeddings": 32768,
    "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "use_sliding_window": False,
    "sliding_window": 131072,
    "max_window_layers": 28,
    "attention_dropout": 0.0,
    "initializer_range": 0.02,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "torch_dtype": "bfloat16",
}
TINY: dict[str, Any] = {
    **QWEN25_7B,
    "hidden_size": 128,
    "intermediate_size": 384,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "vocab_size": 16384,
    "max_position_embeddings": 32768,
    "rope_theta": 1000000.0,
    "max_window_layers": 2,
    "bos_token_id": 16382,
    "eos_token_id": 16383,
    "torch_dtype": "float32",
}
SHAPES = {"tiny": TINY, "qwen2.5-7b": QWEN25_7B}
# TS-Guard stops on both (UPSTREAM.md); the tiny shape's two top ids play their part
EOS_IDS = {"qwen2.5-7b": (151645, 151643), "tiny": (16383, 16382)}
REQUIRED = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
            "num_key_value_heads", "vocab_size", "max_position_embeddings")


@dataclass(frozen=True)
class Shape:
    name: str
    config: dict[str, Any]
    eos_ids: tuple[int, ...]  # the first is the one forced at a row's length

    @property
    def head_dim(self) -> int:
        return int(self.config.get("head_dim")
                   or self.config["hidden_size"] // self.config["num_attention_heads"])

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        c = self.config
        return 2 * c["num_hidden_layers"] * c["num_key_value_heads"] * self.head_dim * dtype_bytes

    def parameters(self) -> int:
        c = self.config
        h, i, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
        kv = c["num_key_value_heads"] * self.head_dim
        attn = h * h + 2 * h * kv + h * h + h + 2 * kv  # q, k, v, o weights; q/k/v biases
        layer = attn + 3 * h * i + 2 * h
        head = 0 if c.get("tie_word_embeddings") else v * h
        return c["num_hidden_layers"] * layer + v * h + head + h

    def write_config(self, directory: Path) -> Path:
        """A checkpoint directory holding only ``config.json`` (vLLM dummy load)."""
        from guardrepro.artifacts.store import atomic_write_bytes

        directory.mkdir(parents=True, exist_ok=True)
        config = {**self.config, "dtype": self.config["torch_dtype"]}
        atomic_write_bytes(directory / "config.json",
                           (json.dumps(config, indent=2, sort_keys=True) + "\n").encode())
        return directory


def load_shape(name: str | None, config_path: Path | None) -> Shape:
    """The named shape, or the JSON config at ``config_path`` over ``tiny``'s keys."""
    if config_path is not None:
        try:
            given = json.loads(config_path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise InputError(f"cannot read a JSON config: {exc}", file=str(config_path)) from exc
        if not isinstance(given, dict):
            raise InputError("expected a JSON object of config keys", file=str(config_path))
        for key in REQUIRED:
            value = given.get(key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(f"expected an integer >= 1, got {value!r}",
                                 file=str(config_path), field=key)
        vocab = given["vocab_size"]
        eos = given.get("eos_token_id", vocab - 1)
        eos_ids = tuple(eos) if isinstance(eos, list) else (int(eos),)
        if not all(isinstance(i, int) and 0 <= i < vocab for i in eos_ids):
            raise InputError(f"eos ids {eos_ids} outside the vocabulary of {vocab}",
                             file=str(config_path), field="eos_token_id")
        return Shape(config_path.stem, {**TINY, **given}, eos_ids)
    if name not in SHAPES:
        raise InputError(f"unknown shape {name!r}; choose from {', '.join(SHAPES)}",
                         field="shape")
    return Shape(name, dict(SHAPES[name]), EOS_IDS[name])


def build_hf(shape: Shape, seed: int = 0) -> Any:
    """A randomly initialised transformers Qwen2 model of ``shape`` (float32, eval)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    keys = {k: v for k, v in shape.config.items() if k not in ("architectures", "torch_dtype")}
    torch.manual_seed(seed)
    config = Qwen2Config(**keys)
    config._attn_implementation = "sdpa"
    return Qwen2ForCausalLM(config).float().eval()


def build_mlx(shape: Shape, seed: int = 0) -> Any:
    """A randomly initialised mlx-lm Qwen2 model of ``shape`` (float32)."""
    import mlx.core as mx
    from mlx_lm.models import qwen2

    c = shape.config
    mx.random.seed(seed)
    args = qwen2.ModelArgs(
        model_type="qwen2", hidden_size=c["hidden_size"], num_hidden_layers=c["num_hidden_layers"],
        intermediate_size=c["intermediate_size"], num_attention_heads=c["num_attention_heads"],
        rms_norm_eps=c["rms_norm_eps"], vocab_size=c["vocab_size"],
        num_key_value_heads=c["num_key_value_heads"],
        max_position_embeddings=c["max_position_embeddings"], rope_theta=c["rope_theta"],
        tie_word_embeddings=c["tie_word_embeddings"])
    model = qwen2.Model(args)
    mx.eval(model.parameters())
    return model
