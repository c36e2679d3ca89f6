"""Continuous batching in the lean decoder (``slots``): rows that join the batch
as others finish get ``generate``'s tokens at batch 1, row for row.

Expectations come from transformers' ``model.generate(do_sample=False)`` run
once per prompt (the naive loop), never from the decoder. The mixed-length
test forces each row's output length (EOS suppressed until the length, then
forced, the rule of ``scripts/synthetic/run_hf.forcing``) on the naive side
through a logits processor and on the lean side through ``adjust``, so lengths
of 1 to 2,048 tokens are exact on a tiny random model.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from test_lean import _eos_for_mixed_stops, _tiny, naive  # noqa: E402

from guardrepro.run.runners.lean import LeanDecoder  # noqa: E402
from guardrepro.run.runners.lean_kv import GROW  # noqa: E402
from scripts.synthetic.run_hf import forcing  # noqa: E402

# tiny models: one torch thread (see the fixture) keeps the 2,048-step test's
# cost flat on a loaded machine
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _prompts(lengths: Sequence[int], seed: int, vocab: int = 96) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(1, vocab, (n,), generator=gen).tolist() for n in lengths]


@pytest.mark.parametrize("slots", [1, 2, 3])
def test_rows_joining_as_others_finish_keep_generate_tokens(slots: int) -> None:
    """Five prompts of 5-30 tokens through 1-3 slots: later rows join a batch whose
    columns are longer (prompt 9 after 17) and shorter (30 after 9) than their
    prompt, rows stop at different steps (EOS chosen from the naive outputs) or
    run to the limit."""
    model = _tiny("qwen2", 2, seed=7)
    prompts = _prompts([5, 17, 9, 30, 12], seed=3)
    eos = _eos_for_mixed_stops([naive(model, p, None, 12) for p in prompts])
    expected = [naive(model, p, eos, 12) for p in prompts]
    assert len({len(e) for e in expected}) > 1  # rows stop apart
    decoded, _ = LeanDecoder(model).decode(prompts, eos_token_ids=eos, max_new_tokens=12,
                                           slots=slots)
    for index, (want, got) in enumerate(zip(expected, decoded, strict=True)):
        assert got.token_ids == want, f"row {index}"
        assert got.finish_reason == ("stop" if want[-1] in eos else "length"), f"row {index}"
        assert len(got.margins) == len(want)


def test_joining_rows_reuse_prefixes_of_the_last_prompts() -> None:
    """With 2 slots, a prompt reuses the longest prefix among the last 2 prompts
    prefilled. By hand: base and edit(30) fill the slots (edit(30) reuses 30 of
    base); both finish together, then edit(20) (20 shared with either) and the
    last prompt join; the last shares 35 tokens with base, 30 with edit(30) and
    20 with edit(20), and base has left the window by then: 30."""
    model = _tiny("llama", 1, seed=23)
    base = _prompts([40], seed=5, vocab=95)[0]

    def edit(at: int) -> list[int]:
        out = list(base)
        out[at] = out[at] % 95 + 1
        return out

    prompts = [base, edit(30), edit(20), [*base[:35], *([3] * 5)]]
    decoder = LeanDecoder(model)
    decoded, _ = decoder.decode(prompts, eos_token_ids=[], max_new_tokens=4, slots=2)
    assert decoder.reused == [0, 30, 20, 30]
    for prompt, got in zip(prompts, decoded, strict=True):
        assert got.token_ids == naive(model, prompt, None, 4)


def _forced_naive(model: Any, prompt: list[int], length: int, eos: Sequence[int]) -> list[int]:
    adjust = forcing([length], eos)

    def processor(input_ids: Any, scores: Any) -> Any:
        return adjust(input_ids.shape[1] - len(prompt), [0], scores)

    model.generation_config = transformers.GenerationConfig()
    config = transformers.GenerationConfig(do_sample=False, max_new_tokens=length,
                                           eos_token_id=list(eos), pad_token_id=0, num_beams=1)
    with torch.inference_mode():
        out = model.generate(torch.tensor([prompt]), generation_config=config,
                             logits_processor=transformers.LogitsProcessorList([processor]))
    return list(out[0, len(prompt):].tolist())


def test_mixed_output_lengths_from_1_to_2048_tokens() -> None:
    """Forced lengths 1, 2,048, 3, 300, 1, 40 and 120 through 3 slots: the 2,048-token
    row holds one slot while the others pass through the rest, the buffer's
    leading padding is dropped as rows leave (more than ``GROW`` columns), and
    every row has exactly its length and ``generate``'s tokens."""
    torch.manual_seed(0)
    config = transformers.Qwen2Config(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, head_dim=16,
        max_position_embeddings=2304, rope_theta=10000.0, tie_word_embeddings=False,
        pad_token_id=0, bos_token_id=None, eos_token_id=None)
    model = transformers.Qwen2ForCausalLM(config).float().eval()
    with torch.no_grad():
        for seed, param in enumerate(p for p in model.parameters() if p.dim() == 2):
            param.normal_(0.0, 0.3, generator=torch.Generator().manual_seed(seed))
    lengths = [1, 2048, 3, 300, 1, 40, 120]
    prompts = _prompts([12, 30, 7, 150, 9, 64, 20], seed=11, vocab=64)
    eos = [63, 62]
    decoded, _ = LeanDecoder(model).decode(
        prompts, eos_token_ids=eos, max_new_tokens=max(lengths), slots=3,
        adjust=forcing(lengths, eos))
    assert [len(d.token_ids) for d in decoded] == lengths
    assert all(d.finish_reason == "stop" and d.token_ids[-1] == 63 for d in decoded)
    assert max(lengths) > 2 * GROW  # the long row outlives several trims
    for index, (prompt, length) in enumerate(zip(prompts, lengths, strict=True)):
        assert decoded[index].token_ids == _forced_naive(model, prompt, length, eos), index
