"""The lean greedy decoder gives ``generate``'s tokens, row for row.

Expectations come from transformers' own ``model.generate(do_sample=False)``
run once per prompt (batch 1: the naive loop), never from the decoder. Models:
tiny random Qwen2 and Llama (GQA and plain attention) built in memory, and
the shipped toy guard on toy benchmark rows. EOS sets are chosen from the
naive outputs so that rows of one batch stop at different lengths, and some
run to ``max_new_tokens``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from guardrepro.run.runners.greedy import PrefixStore  # noqa: E402
from guardrepro.run.runners.lean import LeanDecoder, _slice  # noqa: E402
from guardrepro.run.runners.lean_weights import unsupported_reason  # noqa: E402

# tiny models: one torch thread (tests/conftest.py, one_torch_thread)
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _tiny(kind: str, kv_heads: int, seed: int) -> Any:
    torch.manual_seed(seed)
    common: dict[str, Any] = dict(
        vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=kv_heads, head_dim=16,
        max_position_embeddings=512, rope_theta=10000.0, tie_word_embeddings=False,
        pad_token_id=0, bos_token_id=None, eos_token_id=None,
    )
    if kind == "qwen2":
        model = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**common))
    else:
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**common))
    with torch.no_grad():  # std 0.1 so greedy outputs vary from step to step
        for param in model.parameters():
            if param.dim() == 2:
                param.normal_(0.0, 0.1, generator=torch.Generator().manual_seed(seed))
                seed += 1
    return model.float().eval()


def naive(model: Any, prompt: Sequence[int], eos: Sequence[int] | None, steps: int) -> list[int]:
    """``generate`` for one prompt: the baseline every fast path must reproduce."""
    model.generation_config = transformers.GenerationConfig()
    config = transformers.GenerationConfig(
        do_sample=False, max_new_tokens=steps, eos_token_id=list(eos) if eos else None,
        pad_token_id=0, num_beams=1)
    with torch.inference_mode():
        out = model.generate(torch.tensor([list(prompt)]), generation_config=config)
    return list(out[0, len(prompt):].tolist())


def _eos_for_mixed_stops(outputs: list[list[int]]) -> list[int]:
    """EOS ids that end row 0 at step 2 and row 1 at step 6 (first occurrences)."""
    return sorted({outputs[0][2], outputs[1][6]})


def _check_same(
    model: Any, prompts: list[list[int]], eos: list[int], steps: int
) -> list[list[int]]:
    expected = [naive(model, p, eos, steps) for p in prompts]
    decoded, _ = LeanDecoder(model).decode(prompts, eos_token_ids=eos, max_new_tokens=steps)
    for index, (want, got) in enumerate(zip(expected, decoded, strict=True)):
        assert got.token_ids == want, f"row {index}"
        stopped = bool(want) and want[-1] in eos
        assert got.finish_reason == ("stop" if stopped else "length"), f"row {index}"
        assert len(got.margins) == len(want)
    return expected


@pytest.mark.parametrize(("kind", "kv_heads"), [("qwen2", 2), ("qwen2", 4), ("llama", 1)])
def test_tiny_random_models_match_generate_with_rows_stopping_apart(
    kind: str, kv_heads: int
) -> None:
    model = _tiny(kind, kv_heads, seed=7)
    gen = torch.Generator().manual_seed(3)
    lengths = [5, 17, 9, 30, 12]  # a left-padded batch
    prompts = [torch.randint(1, 96, (n,), generator=gen).tolist() for n in lengths]
    free = [naive(model, p, None, 12) for p in prompts]
    eos = _eos_for_mixed_stops(free)
    stops = [len(out) for out in _check_same(model, prompts, eos, 12)]
    assert len(set(stops)) > 1, f"rows must stop at different lengths: {stops}"
    assert stops[0] <= 3 and stops[1] <= 7


@pytest.mark.parametrize(("kind", "kv_heads"), [("qwen2", 2), ("llama", 1)])
def test_prefixes_shared_with_earlier_prompts_are_reused_and_keep_generate_tokens(
    kind: str, kv_heads: int
) -> None:
    model = _tiny(kind, kv_heads, seed=23)
    gen = torch.Generator().manual_seed(5)
    base = torch.randint(1, 95, (50,), generator=gen).tolist()

    def edit(at: int) -> list[int]:  # an edited variant: one token changed at ``at``
        out = list(base)
        out[at] = out[at] % 95 + 1
        return out

    prompts = [
        base,
        edit(35),  # shares 35 tokens with the base
        [*edit(25), 7, 8, 9],  # shares 25 with either earlier prompt
        base[:10] + [1] * 12,  # shares only 10 (< MIN_PREFIX): prefilled alone
        list(base),  # a duplicate: reuses all but its last token
        [*edit(35), 4, 4],  # extends edit(35): reuses all 50 of its tokens
    ]
    # the longest prefix each prompt shares with an earlier one, by hand
    expected = [None, 35, 25, None, 49, 50]
    decoder = LeanDecoder(model)
    done: PrefixStore[Any] = PrefixStore(None)
    for prompt, want in zip(prompts, expected, strict=True):
        kv = _slice(done.find(prompt))
        assert (None if kv is None else kv[0][0].shape[2]) == want
        done.add(prompt, decoder._prefill(prompt)[0])
    free = [naive(model, p, None, 12) for p in prompts]
    eos = _eos_for_mixed_stops(free)
    stops = [len(out) for out in _check_same(model, prompts, eos, 12)]
    assert len(set(stops)) > 1, f"rows must stop at different lengths: {stops}"


def test_margins_are_the_top_two_gap_of_generate_scores() -> None:
    model = _tiny("qwen2", 2, seed=11)
    prompts = [[5, 6, 7, 8], [9, 10, 11, 12, 13, 14, 15]]
    decoded, _ = LeanDecoder(model).decode(prompts, eos_token_ids=[0], max_new_tokens=6)
    for prompt, got in zip(prompts, decoded, strict=True):
        config = transformers.GenerationConfig(
            do_sample=False, max_new_tokens=6, eos_token_id=[0], pad_token_id=0,
            output_logits=True, return_dict_in_generate=True)
        with torch.inference_mode():
            out = model.generate(torch.tensor([prompt]), generation_config=config)
        top2 = [torch.topk(step[0].float(), 2).values for step in out.logits]
        want = [float(t[0] - t[1]) for t in top2]
        assert got.margins == pytest.approx(want, abs=1e-4)
        # batch row 0 is prefilled alone exactly as generate does: its first margin is exact
        assert got.margins[0] == want[0]


def test_a_single_prompt_is_bit_identical_to_generate() -> None:
    model = _tiny("qwen2", 2, seed=5)
    prompt = list(range(3, 40))
    want = naive(model, prompt, None, 16)
    decoded, prefill_s = LeanDecoder(model).decode([prompt], eos_token_ids=[], max_new_tokens=16)
    assert decoded[0].token_ids == want and decoded[0].finish_reason == "length"
    assert prefill_s > 0.0  # measured: a real prefill takes time


def test_unsupported_models_are_named() -> None:
    def fake(**config: Any) -> Any:
        base = {"model_type": "qwen2", "rope_parameters": {"rope_type": "default"},
                "layer_types": ["full_attention"], "_attn_implementation": "sdpa"}
        return SimpleNamespace(config=SimpleNamespace(**{**base, **config}))

    assert unsupported_reason(fake().config) is None
    assert "gpt2" in str(unsupported_reason(fake(model_type="gpt2").config))
    assert "yarn" in str(unsupported_reason(fake(rope_parameters={"rope_type": "yarn"}).config))
    assert "sliding" in str(unsupported_reason(fake(layer_types=["sliding_attention"]).config))
    assert "eager" in str(unsupported_reason(fake(_attn_implementation="eager").config))
    assert "eager" in str(unsupported_reason(fake().config, "eager"))  # the option wins
    with pytest.raises(ValueError, match="gpt2"):
        LeanDecoder(fake(model_type="gpt2"))
    with pytest.raises(ValueError, match="at least one token"):
        LeanDecoder(_tiny("qwen2", 2, seed=1)).decode([[1], []], eos_token_ids=[0],
                                                       max_new_tokens=2)


@pytest.fixture(scope="module")
def toy() -> Any:
    from scripts.toy.quality import BENCH_DIR, ToyGuard

    guard = ToyGuard()
    samples: list[Any] = []
    path = BENCH_DIR / "TS-Bench" / "agentdojo-traj" / "banking.json"
    samples.extend(json.loads(path.read_text(encoding="utf-8"))[:4])  # safe and unsafe
    return guard, [guard.prompt_ids(s) for s in samples]


def test_toy_guard_rows_match_generate_including_mixed_stops(toy: Any) -> None:
    guard, prompts = toy
    assert len({len(p) for p in prompts}) > 1  # really a padded batch
    outputs = _check_same(guard.model, prompts, guard.eos, 64)
    assert all(len(out) < 64 for out in outputs)  # the toy guard ends its answers itself
    # an extra stop id whose first occurrence differs between rows: they now end apart
    def first(out: list[int], token: int) -> int:
        return out.index(token) if token in out else len(out)

    token = next(t for t in outputs[0] if len({first(out, t) for out in outputs}) > 1)
    # greedy with one more stop id = the same tokens cut after its first occurrence
    want = [out[: first(out, token) + 1] for out in outputs]
    assert len({len(out) for out in want}) > 1
    decoded, _ = LeanDecoder(guard.model).decode(
        prompts, eos_token_ids=sorted({*guard.eos, token}), max_new_tokens=64)
    assert [d.token_ids for d in decoded] == want
