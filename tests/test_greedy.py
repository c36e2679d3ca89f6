"""The decoders' shared pieces: prefix length, prefix store, step bookkeeping.

Expectations are by hand or from a token-by-token scan."""

from __future__ import annotations

import random

from guardrepro.run.runners.greedy import PrefixStore, common_prefix, record_step


def scan(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def test_common_prefix_equals_the_token_by_token_scan() -> None:
    rng = random.Random(0)
    for _ in range(300):
        base = [rng.randrange(5) for _ in range(rng.randrange(0, 40))]
        other = base[: rng.randrange(0, len(base) + 1)] + [rng.randrange(5)
                                                           for _ in range(rng.randrange(4))]
        assert common_prefix(base, other) == scan(base, other)


def test_the_store_gives_the_longest_prefix_newest_on_ties_and_keeps_a_token() -> None:
    store: PrefixStore[str] = PrefixStore(2, min_prefix=3)
    head = list(range(10))
    store.add([*head, 50], "a")
    store.add([*head[:6], 60], "b")
    found = store.find([*head, 70])
    assert found is not None and (found.length, found.cache) == (10, "a")
    store.add([*head, 80], "c")  # capacity 2: "a" leaves; "b" shares 6, "c" 10
    found = store.find([*head, 70])
    assert found is not None and (found.length, found.cache) == (10, "c")
    store.add([*head, 90], "d")  # "b" leaves; a tie of 10 between "c" and "d"
    found = store.find([*head, 70])
    assert found is not None and found.cache == "d"
    assert store.find(head[:4]).length == 3  # type: ignore[union-attr]  # the last token runs
    assert store.find([1, 2, 3]) is None  # shares nothing
    assert PrefixStore[str](None, min_prefix=0).find(head) is None  # reuse off


def test_record_step_appends_one_token_per_live_row_and_stops_at_eos() -> None:
    tokens: list[list[int]] = [[5], [], [7]]
    margins: list[list[float]] = [[0.5], [], [0.1]]
    finish = ["length"] * 3
    keep = record_step([2, 9], [1.5, 0.25], [0, 2], {2}, tokens, margins, finish)
    assert keep == [1]  # batch row 1 (prompt 2) goes on; prompt 0 stopped
    assert tokens == [[5, 2], [], [7, 9]] and margins == [[0.5, 1.5], [], [0.1, 0.25]]
    assert finish == ["stop", "length", "length"]
