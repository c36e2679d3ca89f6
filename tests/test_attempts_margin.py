"""The decision-token lookup: bisection gives the linear scan's index.

Expectation: the definition itself, evaluated token by token (one decode of
every prefix), on real tokenizers: the shipped toy guard's byte-level BPE and
the tiny test tokenizer, over random token sequences that include ids which
decode to partial UTF-8 sequences.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

import pytest
from tokenizers import Tokenizer

from guardrepro.run.attempts import token_index_at
from scripts.toy.quality import GUARD_DIR


def linear(ids: Sequence[int], offset: int, decode: Callable[[Sequence[int]], str]) -> int | None:
    for i in range(len(ids)):
        if len(decode(ids[: i + 1])) > offset:
            return i
    return None


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_bisection_equals_the_linear_scan_on_the_toy_tokenizer(seed: int) -> None:
    tok = Tokenizer.from_file(str(GUARD_DIR / "tokenizer.json"))
    decode = lambda ids: tok.decode(list(ids), skip_special_tokens=True)  # noqa: E731
    rng = random.Random(seed)
    vocab = tok.get_vocab_size()
    text = "<Harmfulness_Rating>0.5<\\Harmfulness_Rating> é 😀 tool_3f"
    sequences = [tok.encode(text).ids, [rng.randrange(vocab) for _ in range(60)]]
    calls = 0

    def counted(ids: Sequence[int]) -> str:
        nonlocal calls
        calls += 1
        return decode(ids)

    for ids in sequences:
        length = len(decode(ids))
        for offset in range(-1, length + 2):
            assert token_index_at(ids, offset, decode) == linear(ids, offset, decode), offset
        calls = 0
        token_index_at(ids, length // 2, counted)
        assert calls <= len(ids).bit_length() + 1  # logarithmic, not one per token


def test_empty_output_has_no_decision_token() -> None:
    assert token_index_at([], 0, lambda ids: "") is None


def test_the_margin_benchmark_methods_agree_with_the_scan() -> None:
    from guardrepro.run.prompts import PromptTokenizer
    from scripts.bench_margin import measure_length

    lines = measure_length(PromptTokenizer(GUARD_DIR), 40, 1)
    assert [line.split()[1] for line in lines] == ["scan", "bisection", "offsets"]
    assert all(line.split()[-1] == "True" for line in lines)
