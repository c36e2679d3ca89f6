"""``Generation.from_tokens``: the one way a decoder's ids become a Generation."""

from __future__ import annotations

from collections.abc import Sequence

from guardrepro.run.runners.base import Generation, shared_timings
from guardrepro.schema import Timings

T = Timings(0.0, 0.0, 0.0)


def _decode(ids: Sequence[int]) -> str:
    return "".join(chr(ord("a") + i) for i in ids)


def test_cut_after_the_first_eos_of_any_kind() -> None:
    # a batch row that ran on past its EOS (7) into padding and another EOS (9)
    g = Generation.from_tokens("r", [0, 1, 7, 9, 9], [5.0, 4.0, 3.0, 2.0, 1.0],
                               eos_token_ids=(9, 7), decode=_decode, timings=T)
    assert (g.token_ids, g.text, g.finish_reason, g.step_margins) == (
        (0, 1, 7), "ab", "stop", (5.0, 4.0, 3.0))
    assert g.score_logits is None and g.peak_memory_bytes is None


def test_no_eos_is_length_and_keeps_everything() -> None:
    g = Generation.from_tokens("r", [2, 3], [0.5, 0.25], eos_token_ids=(9,), decode=_decode,
                               timings=T, peak_memory_bytes=10, score_logits=[1.5, -2.0])
    assert (g.token_ids, g.text, g.finish_reason, g.step_margins) == ((2, 3), "cd", "length",
                                                                      (0.5, 0.25))
    assert (g.peak_memory_bytes, g.score_logits) == (10, (1.5, -2.0))


def test_an_immediate_eos_decodes_to_nothing() -> None:
    g = Generation.from_tokens("r", [9], [1.0], eos_token_ids=(9,), decode=_decode, timings=T)
    assert (g.token_ids, g.text, g.finish_reason) == ((9,), "", "stop")


def test_shared_timings_split_a_batch_clock() -> None:
    # 4 requests: 2 s to the first tokens, 10 s in all -> 0.5 + 2.0 = 2.5 s each
    assert shared_timings(2.0, 10.0, 4) == Timings(0.5, 2.0, 2.5)
    assert shared_timings(1.0, 3.0) == Timings(1.0, 2.0, 3.0)
