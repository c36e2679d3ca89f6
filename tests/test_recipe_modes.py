"""The microscaling recipe modes (mxfp4): validation and a checked conversion."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from guardrepro.artifacts.quantize.recipe import load_recipe
from guardrepro.errors import InputError

REPO = Path(__file__).resolve().parents[1]


def _recipe(tmp: Path, mode: str, bits: int, group: int) -> Path:
    path = tmp / f"{mode}-{bits}-{group}.toml"
    path.write_text(f'[recipe]\nname = "x"\nquantize = true\nbits = {bits}\n'
                    f'group_size = {group}\nmode = "{mode}"\ndtype = "float32"\n'
                    'source_dtype = "any"\n', encoding="utf-8")
    return path


def test_mode_shapes_are_validated(tmp_path: Path) -> None:
    assert load_recipe(REPO / "quantize/mxfp4.toml").mode == "mxfp4"
    assert load_recipe(_recipe(tmp_path, "mxfp8", 8, 32)).bits == 8
    for mode, bits, group, field in (("mxfp4", 8, 32, "recipe.bits"),
                                     ("mxfp4", 4, 64, "recipe.group_size"),
                                     ("nf4", 4, 64, "recipe.mode")):
        with pytest.raises(InputError) as err:
            load_recipe(_recipe(tmp_path, mode, bits, group))
        assert err.value.field == field


def test_mxfp4_conversion_is_inspected(tmp_path: Path) -> None:
    pytest.importorskip("mlx_lm")
    import mlx.core as mx
    from mlx_tiny import build_source

    from guardrepro.artifacts.quantize.convert import quantize

    source = build_source(tmp_path / "src", dtype="bfloat16")
    result = quantize(REPO / "quantize/mxfp4-f32.toml", source, tmp_path / "mx", unpinned=True)
    assert len(result.quantized) == 15  # every linear layer of the tiny model and the embedding
    config = json.loads((tmp_path / "mx" / "config.json").read_text())
    assert config["quantization"] == {"group_size": 32, "bits": 4, "mode": "mxfp4"}
    weights = mx.load(str(tmp_path / "mx" / "model.safetensors"))
    # q_proj 128 -> 128: 128 * 4 / 32 = 16 packed uint32, 128 / 32 = 4 uint8 exponents
    assert weights["model.layers.0.self_attn.q_proj.weight"].shape == (128, 16)
    assert weights["model.layers.0.self_attn.q_proj.scales"].shape == (128, 4)
    assert weights["model.layers.0.self_attn.q_proj.scales"].dtype == mx.uint8
    assert not [k for k in weights if k.endswith(".biases")]
    assert weights["model.norm.weight"].dtype == mx.float32
