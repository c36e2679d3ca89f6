"""The lean decoder's KV groups (``runners.lean_kv``): rows of very different
lengths decode in separate groups, so a short row never reads a long row's
padded columns, and tokens stay ``generate``'s at batch 1.

The grouping rule's expectations are worked out by hand below; token
expectations come from transformers' ``generate(do_sample=False)`` run once
per prompt (``test_lean.naive``).
"""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from test_lean import naive  # noqa: E402

from guardrepro.run.runners.lean import LeanDecoder  # noqa: E402
from guardrepro.run.runners.lean_kv import fits, partition  # noqa: E402

# tiny models: one torch thread (tests/conftest.py, one_torch_thread)
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_partition_by_hand() -> None:
    """988, 1,570 and 2,122 together: 3 x 2,122 = 6,366 columns for 4,680 needed
    (1.36x <= 1.5x). 13,087 joining them: 4 x 13,087 = 52,348 for 17,767 (2.9x,
    34,581 columns over the slack of 2,048): a group of its own."""
    assert partition([988, 13087, 1570, 2122]) == [[0, 2, 3], [1]]
    # short prompts: 2 x 30 = 60 columns for 35 (1.7x) but only 25 over: together
    assert partition([30, 5]) == [[1, 0]]
    assert partition([7]) == [[0]]
    # 2 x 5,000 = 10,000 for 6,000: 1.67x and 4,000 over the slack: apart
    assert not fits(1, 1000, 1000, 1, 5000, 5000)
    assert fits(1, 4000, 4000, 1, 5000, 5000)  # 10,000 for 9,000


def _model() -> Any:
    torch.manual_seed(0)
    config = transformers.Qwen2Config(
        vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        max_position_embeddings=4096, rope_theta=10000.0, tie_word_embeddings=False,
        pad_token_id=0, bos_token_id=None, eos_token_id=None)
    model = transformers.Qwen2ForCausalLM(config).float().eval()
    with torch.no_grad():
        for seed, param in enumerate(p for p in model.parameters() if p.dim() == 2):
            param.normal_(0.0, 0.1, generator=torch.Generator().manual_seed(seed))
    return model


def _spy(decoder: LeanDecoder) -> list[list[int]]:
    """Record each attention call's group size (layer 0) while decoding."""
    sizes: list[list[int]] = []
    real = decoder._attention

    def attention(i: int, group: Any, *args: Any) -> Any:
        if i == 0:
            sizes.append([len(group.rows), group.used])
        return real(i, group, *args)

    decoder._attention = attention  # type: ignore[method-assign]
    return sizes


@pytest.mark.parametrize("slots", [None, 2])
def test_rows_of_very_different_lengths_decode_apart_with_generate_tokens(
        slots: int | None) -> None:
    """Prompts of 12, 2,600, 20, 2,400 and 9 tokens: the two long ones and the
    three short ones make separate groups (3 x 2,600 columns for ~2,640 needed is
    far over the rule), rows leave the groups at different steps, and with 2
    slots rows join groups as others finish. Every row: generate's tokens."""
    model = _model()
    gen = torch.Generator().manual_seed(4)
    prompts = [torch.randint(1, 96, (n,), generator=gen).tolist()
               for n in (12, 2600, 20, 2400, 9)]
    steps = [5, 9, 3, 7, 6]
    expected = [naive(model, p, None, n) for p, n in zip(prompts, steps, strict=True)]
    eos = sorted({expected[0][4], expected[2][2]})  # rows 0 and 2 stop early
    expected = [naive(model, p, eos, 9) for p in prompts]
    decoder = LeanDecoder(model)
    sizes = _spy(decoder)
    decoded, _ = decoder.decode(prompts, eos_token_ids=eos, max_new_tokens=9, slots=slots)
    for index, (want, got) in enumerate(zip(expected, decoded, strict=True)):
        assert got.token_ids == want, f"row {index}"
    # no group ever held a short row beside a long one: a group's width is either
    # under 100 columns or over 2,400, never a short row padded to a long width
    assert all(used < 100 or used >= 2400 for _, used in sizes)
    if slots is None:  # all five at once: the short rows' group first, then the long
        assert sizes[0][1] < 100 and sizes[1][1] >= 2400
        assert sizes[1][0] == 2  # both long rows run to the limit of 9 tokens
