"""The torch loading every transformers-based runner shares
(``runners.torch_load``): safetensors only, options applied, the checkpoint's
generation defaults dropped, torch's thread count restored on close."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from guardrepro.errors import InputError, MissingArtifactError
from guardrepro.run.runners.torch_load import load_causal_lm

TOY = Path(__file__).resolve().parents[1] / "guardrepro" / "data" / "toy_guard"


def test_the_toy_guard_loads_with_the_options_and_no_checkpoint_defaults() -> None:
    before = torch.get_num_threads()
    wanted = 1 if before != 1 else 2
    loaded = load_causal_lm(TOY, {"dtype": "float32", "device": "cpu", "threads": wanted},
                            backend="test")
    try:
        assert torch.get_num_threads() == wanted
        assert (loaded.device.type, loaded.dtype) == ("cpu", torch.float32)
        assert not loaded.model.training
        assert {p.dtype for p in loaded.model.parameters()} == {torch.float32}
        # the checkpoint's generation_config.json names EOS ids 2 and 0 and pad 0
        shipped = json.loads((TOY / "generation_config.json").read_text())
        assert shipped["eos_token_id"] == [2, 0]
        config = loaded.model.generation_config
        assert (config.eos_token_id, config.pad_token_id) == (None, None)
        assert loaded.peak_memory() > 0
    finally:
        loaded.close()
    assert torch.get_num_threads() == before
    assert loaded.model is None


def test_pickled_weights_are_refused_before_transformers_reads_them(tmp_path: Path) -> None:
    for name in ("config.json", "generation_config.json"):
        shutil.copy2(TOY / name, tmp_path / name)
    (tmp_path / "pytorch_model.bin").write_bytes(b"not read")
    with pytest.raises(MissingArtifactError, match=r"pytorch_model\.bin.*the kv runner loads "
                                                   r"safetensors only"):
        load_causal_lm(tmp_path, {}, backend="kv")


def test_a_checkpoint_transformers_cannot_load_names_its_directory(tmp_path: Path) -> None:
    shutil.copy2(TOY / "model.safetensors", tmp_path / "model.safetensors")
    (tmp_path / "config.json").write_text('{"model_type": "no-such-model"}', encoding="utf-8")
    before = torch.get_num_threads()
    with pytest.raises(InputError, match="cannot load the checkpoint with transformers") as info:
        load_causal_lm(tmp_path, {"threads": 1 if before != 1 else 2}, backend="hf")
    assert info.value.file == str(tmp_path)
    assert torch.get_num_threads() == before  # restored on the way out
