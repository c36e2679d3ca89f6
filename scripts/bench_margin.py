"""Benchmark the decision-token lookup: the prefix scan, bisection and tokenizer offsets.

Input: ``--lengths`` (comma list of output lengths in tokens; default
48,512,2048,8192), ``--repeats`` (default 20). The output is the toy guard
tokenizer's encoding of a repeated English sentence cut to each length; the
character offset looked up is near the end (the worst case for a scan).

Output: one table on stdout, a line per (length, method): milliseconds per
lookup (minimum over the repeats) and the ratio to the prefix scan measured
in the same run, plus whether the method returned the scan's index.

Methods:

- ``scan``: the definition, one decode per prefix until the decoded prefix
  passes the offset (quadratic in the output length); the baseline.
- ``bisection``: ``guardrepro.run.attempts.token_index_at``, what runs:
  O(log n) prefix decodes.
- ``offsets``: one encode of the decoded text with the tokenizer's offset
  mapping gives every prefix length in one linear pass; the candidate is
  confirmed with two prefix decodes (falls back to bisection when the
  re-encoding is not the generated ids). Exact and linear. Measured on the
  development machine: slower than bisection at 48 tokens (0.08 against
  0.05 ms), even at 512, 1.2-1.35x faster at 2,048-8,192 tokens (2.4 against
  2.8 ms, 9.9 against 13.3 ms). Either costs milliseconds per row at most,
  next to seconds of generation, so the package keeps the one path that
  needs nothing but ``decode``: bisection.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from typing import Any

from guardrepro.run.attempts import token_index_at
from guardrepro.run.prompts import PromptTokenizer
from scripts.toy.quality import GUARD_DIR

SENTENCE = "The agent called tool_3f with the account balance and the transfer note. "


def scan(ids: Sequence[int], offset: int, decode: Callable[[Sequence[int]], str]) -> int | None:
    for i in range(len(ids)):
        if len(decode(ids[: i + 1])) > offset:
            return i
    return None


def by_offsets(tok: PromptTokenizer, ids: Sequence[int], offset: int) -> int | None:
    inner: Any = tok._tok
    enc = inner(tok.decode(ids), add_special_tokens=False, return_offsets_mapping=True)
    if list(enc["input_ids"]) == list(ids):
        guess = next((i for i, (_, end) in enumerate(enc["offset_mapping"]) if end > offset),
                     None)
        if guess is not None and len(tok.decode(ids[: guess + 1])) > offset and (
                guess == 0 or len(tok.decode(ids[:guess])) <= offset):
            return guess
    return token_index_at(ids, offset, tok.decode)


def best_ms(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    times, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return min(times) * 1000.0, out


def measure_length(tok: PromptTokenizer, length: int, repeats: int) -> list[str]:
    inner: Any = tok._tok
    ids = inner.encode(SENTENCE * (length // 8 + 1), add_special_tokens=False)[:length]
    offset = len(tok.decode(ids)) - 3
    scan_repeats = max(1, repeats if length <= 2048 else repeats // 10)
    base_ms, want = best_ms(lambda: scan(ids, offset, tok.decode), scan_repeats)
    lines = [f"{length:>7}  {'scan':<10} {base_ms:>9.3f}  {1.0:>7.1f}x  True"]
    methods: dict[str, Callable[[], Any]] = {
        "bisection": lambda: token_index_at(ids, offset, tok.decode),
        "offsets": lambda: by_offsets(tok, ids, offset),
    }
    for name, fn in methods.items():
        ms, got = best_ms(fn, repeats)
        lines.append(f"{length:>7}  {name:<10} {ms:>9.3f}  {base_ms / ms:>7.1f}x  {got == want}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="48,512,2048,8192")
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args(argv)
    tok = PromptTokenizer(GUARD_DIR)
    print(f"{'tokens':>7}  {'method':<10} {'ms':>9}  {'vs scan':>8}  same")
    for length in (int(n) for n in args.lengths.split(",")):
        for line in measure_length(tok, length, args.repeats):
            print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
