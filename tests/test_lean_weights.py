"""The lean decoder without a transformers model: its prefill and the tensors it
reads from a checkpoint's files.

Expectations come from transformers itself, never from the decoder: the
model's own ``forward`` at batch 1 with a ``DynamicCache`` (as ``generate``
calls it) for the prefill's KV cache and logits, compared bit for bit, and
``from_pretrained``'s tensors for the weights read from the safetensors.
Models: tiny random Qwen2 and Llama (1, 2 and 4 kv heads for 4 query heads,
Llama also with attention biases) and the shipped toy guard.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from runner_helpers import ROOT, TOY  # noqa: E402
from test_lean import _tiny  # noqa: E402

from guardrepro.errors import InputError  # noqa: E402
from guardrepro.run.runners.backends import HF  # noqa: E402
from guardrepro.run.runners.lean import LeanDecoder  # noqa: E402
from guardrepro.run.runners.lean_weights import LeanWeights, from_checkpoint  # noqa: E402
from guardrepro.run.runners.registry import create_runner  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")
F32 = torch.float32
CPU = torch.device("cpu")


def _transformers_prefill(model: Any, prompt: list[int], prefix: Any = None) -> Any:
    """The KV cache and last-position logits of transformers' own forward."""
    start = 0 if prefix is None else prefix[0][0].shape[2]
    cache = transformers.DynamicCache(config=model.config)
    for i, (keys, values) in enumerate(prefix or []):
        cache.update(keys, values, i)
    out = model(input_ids=torch.tensor([prompt[start:]]), attention_mask=None,
                position_ids=torch.arange(start, len(prompt))[None, :], cache=cache,
                use_cache=True, logits_to_keep=1)
    return [(layer.keys, layer.values) for layer in cache.layers], out.logits[:, -1, :]


def _models() -> dict[str, Any]:
    models = {f"{kind}-kv{kv}": _tiny(kind, kv, seed=3) for kind in ("qwen2", "llama")
              for kv in (1, 2, 4)}
    torch.manual_seed(5)
    config = transformers.LlamaConfig(
        vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, attention_bias=True,
        max_position_embeddings=512, tie_word_embeddings=False, pad_token_id=0)
    biased = transformers.LlamaForCausalLM(config).float().eval()
    with torch.no_grad():
        for param in biased.parameters():
            param.normal_(0.0, 0.1)  # the biases too: non-zero, so a dropped one shows
    models["llama-biases"] = biased
    return models


@torch.inference_mode()
def test_prefill_is_transformers_forward_bit_for_bit() -> None:
    toy = transformers.AutoModelForCausalLM.from_pretrained(
        str(TOY), dtype=F32, attn_implementation="sdpa").eval()
    models = {**_models(), "toy-guard": toy}
    for name, model in models.items():
        decoder = LeanDecoder(model)
        vocab = int(model.config.vocab_size)
        prompt = torch.randint(1, vocab, (40,), generator=torch.Generator().manual_seed(0))
        tokens = prompt.tolist()
        # no prefix (causal SDPA, GQA in SDPA); a long, a half and a one-token-short
        # prefix (the masked path, kv heads repeated); a one-token remainder (no mask)
        for kept in (None, 20, 38, 39, 1):
            prefix = None if kept is None else _transformers_prefill(model, tokens[:kept])[0]
            ours_kv, ours = decoder._prefill(tokens, prefix)
            want_kv, want = _transformers_prefill(model, tokens, prefix)
            assert torch.equal(ours, want), (name, kept)
            assert len(ours_kv) == len(want_kv)
            for (k, v), (wk, wv) in zip(ours_kv, want_kv, strict=True):
                assert torch.equal(k, wk) and torch.equal(v, wv), (name, kept)


def _saved(model: Any, tmp: Path, name: str) -> Path:
    out = tmp / name
    model.save_pretrained(str(out), safe_serialization=True)
    return out


def _files(checkpoint: Path) -> list[Path]:
    return sorted(checkpoint.glob("*.safetensors"))


@torch.inference_mode()
def test_weights_read_from_the_files_are_from_pretrained_s(tmp_path: Path) -> None:
    cases = [(TOY, F32), (TOY, torch.bfloat16)]  # bf16 on disk, tied head
    for name, model in _models().items():
        cases.append((_saved(model, tmp_path, name), F32))
    for checkpoint, dtype in cases:
        weights, why = from_checkpoint(checkpoint, _files(checkpoint), dtype, CPU, "sdpa")
        assert weights is not None, (checkpoint, why)
        model = transformers.AutoModelForCausalLM.from_pretrained(
            str(checkpoint), dtype=dtype, attn_implementation="sdpa").eval()
        want = LeanWeights.of_model(model)
        assert torch.equal(weights.inv_freq, want.inv_freq)
        for ours, theirs in ((weights.embed, want.embed), (weights.norm, want.norm),
                             (weights.head, want.head)):
            assert ours.dtype == theirs.dtype == dtype and torch.equal(ours, theirs)
        for ours_layer, want_layer in zip(weights.layers, want.layers, strict=True):
            for field in ("norm_in", "q", "q_bias", "k", "k_bias", "v", "v_bias", "o",
                          "o_bias", "norm_post", "gate", "up", "down"):
                a, b = getattr(ours_layer, field), getattr(want_layer, field)
                assert (a is None) == (b is None), (checkpoint, field)
                assert a is None or (a.dtype == dtype and torch.equal(a, b)), (checkpoint, field)
        prompts = [list(range(3, 30)), [*range(3, 20), 7, 8, 9]]
        got, _ = LeanDecoder(weights).decode(prompts, eos_token_ids=[], max_new_tokens=6)
        expected, _ = LeanDecoder(model).decode(prompts, eos_token_ids=[], max_new_tokens=6)
        assert [(d.token_ids, d.margins) for d in got] == [
            (d.token_ids, d.margins) for d in expected]


def test_files_not_laid_out_as_expected_fall_back_with_the_reason(tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    base = _saved(_tiny("qwen2", 2, seed=3), tmp_path, "base")

    def variant(name: str, config: dict[str, Any] | None = None,
                tensors: dict[str, Any] | None = None) -> Path:
        out = tmp_path / name
        out.mkdir()
        raw = json.loads((base / "config.json").read_text())
        (out / "config.json").write_text(json.dumps({**raw, **(config or {})}))
        data = load_file(str(base / "model.safetensors"))
        save_file({**data, **(tensors or {})}, str(out / "model.safetensors"))
        return out

    extra = variant("extra", tensors={"model.layers.0.self_attn.rotary_emb.inv_freq":
                                      torch.ones(8)})
    tied = variant("tied", config={"tie_word_embeddings": True})  # the file keeps lm_head
    gelu = variant("gelu", config={"hidden_act": "gelu"})
    wide = variant("wide", tensors={"model.norm.weight": torch.ones(65)})
    gemma = variant("gemma", config={"model_type": "gemma"})
    quantized = variant("quantized", config={"quantization_config": {"quant_method": "gguf"}})
    for checkpoint, reason in ((extra, "rotary_emb.inv_freq"), (tied, "lm_head.weight"),
                               (gelu, "gelu"), (wide, "model.norm.weight"),
                               (gemma, "gemma"), (quantized, "quantization_config")):
        weights, why = from_checkpoint(checkpoint, _files(checkpoint), F32, CPU, "sdpa")
        assert weights is None and reason in why, (checkpoint.name, why)
    weights, why = from_checkpoint(base, _files(base), F32, CPU, "eager")
    assert weights is None and "eager" in why


def _decode(ids: Any) -> str:
    return " ".join(str(i) for i in ids)


def test_runner_falls_back_to_the_model_and_still_refuses_what_it_cannot_run(
        tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    base = _saved(_tiny("llama", 2, seed=3), tmp_path, "llama")
    options = {"dtype": "float32", "decode_loop": "lean", "threads": 1}
    direct = create_runner(HF, base, options, eos_token_ids=[0], pad_token_id=0,
                           decode=_decode)
    assert direct._loaded.model is None  # type: ignore[attr-defined]  # nothing built
    # a tensor the layout does not name: the transformers model is loaded (it ignores
    # it) and the decoder takes that model's tensors; same outputs
    data = load_file(str(base / "model.safetensors"))
    data["model.layers.0.self_attn.rotary_emb.inv_freq"] = torch.ones(8)
    save_file(data, str(base / "model.safetensors"))
    fallback = create_runner(HF, base, options, eos_token_ids=[0], pad_token_id=0,
                             decode=_decode)
    assert fallback._loaded.model is not None  # type: ignore[attr-defined]
    from guardrepro.decoding import DecodingParams
    from guardrepro.run.runners.base import GenerationRequest

    requests = [GenerationRequest(f"r{i}", tuple(range(3, 12 + 3 * i))) for i in range(3)]
    params = DecodingParams(mode="greedy", max_new_tokens=5)
    a = direct.generate(requests, params)
    b = fallback.generate(requests, params)
    assert [(g.token_ids, g.step_margins) for g in a] == [(g.token_ids, g.step_margins)
                                                          for g in b]
    # the model is built on first use (teacher-forced passes, sampled mode)
    assert direct.model is not None and direct._loaded.model is not None  # type: ignore
    direct.close()
    fallback.close()
    linear_rope = tmp_path / "llama"
    raw = json.loads((linear_rope / "config.json").read_text())
    raw["rope_parameters"] = {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}
    (linear_rope / "config.json").write_text(json.dumps(raw))
    with pytest.raises(InputError, match="lean decoding cannot run this model: rope_type"):
        create_runner(HF, linear_rope, options, eos_token_ids=[0], pad_token_id=0, decode=_decode)


def test_a_lean_run_imports_no_transformers_modelling_code(tmp_path: Path) -> None:
    """The toy profile run for two rows in a fresh process (workers = 1: the run
    is in this process) loads neither the Qwen2 modelling module nor
    transformers' ``modeling_utils``; the naive profile does."""
    import os

    from runner_helpers import toy_cohort

    from guardrepro.artifacts.fetch import fetch_lock

    fetch_lock(ROOT / "locks/toy-guard.toml", tmp_path / "home", progress=False)
    cohort = toy_cohort(tmp_path / "cohort.jsonl", [0, 1])
    script = (
        "import sys\n"
        "from guardrepro.run.pipeline import run_cohort\n"
        "from guardrepro.run.profile import RunProfile\n"
        "profile = RunProfile.load(sys.argv[1])\n"
        "if sys.argv[3] == 'generate':\n"
        "    profile = profile.with_backend_options(decode_loop='generate', batch_size=1)\n"
        "run_cohort(profile, sys.argv[2], sys.argv[4], progress=False)\n"
        "print(sorted(m for m in ('transformers.modeling_utils',"
        " 'transformers.models.qwen2.modeling_qwen2') if m in sys.modules))\n"
    )
    seen = {}
    for loop in ("lean", "generate"):
        out = subprocess.run(
            [sys.executable, "-c", script, str(ROOT / "runners/toy-hf.toml"), str(cohort),
             loop, str(tmp_path / f"run-{loop}")],
            capture_output=True, text=True, cwd=ROOT, check=True,
            env={**os.environ, "GUARDREPRO_HOME": str(tmp_path / "home")})
        seen[loop] = out.stdout.strip().splitlines()[-1]
    assert seen == {"lean": "[]", "generate": "['transformers.modeling_utils', "
                    "'transformers.models.qwen2.modeling_qwen2']"}
    lean = (tmp_path / "run-lean/records.jsonl").read_text().splitlines()
    naive = (tmp_path / "run-generate/records.jsonl").read_text().splitlines()
    assert [json.loads(x)["output_token_ids"] for x in lean] == [
        json.loads(x)["output_token_ids"] for x in naive]
