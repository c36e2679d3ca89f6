"""An over-long row is refused from its length, before tokenizing.

A 54 MB history with ``run --limit 1`` on the toy guard took 84 s and 9.7 GB
of RSS to tokenize before the context check refused it; the length bound
refuses it in about 3 s. The bound (prompts.PromptTokenizer.check_chars): one
token stands for at most L x S characters, L the longest vocabulary entry and
S what the normalizer can shrink; the tests check it against the tokenizer's
own counts on adversarial text."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")

from recordsets import cohort_line

from guardrepro.errors import PromptError
from guardrepro.run.prompts import PromptTokenizer, normalizer_shrink
from guardrepro.schema import canonical_json

ROOT = Path(__file__).resolve().parents[1]
TOY = ROOT / "guardrepro" / "data" / "toy_guard"


@pytest.fixture(scope="module")
def tok() -> PromptTokenizer:
    return PromptTokenizer(TOY)


@pytest.mark.parametrize(("normalizer", "shrink"), [
    (None, 1), ({"type": "NFC"}, 4), ({"type": "NFKD"}, 1),
    ({"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"},
                                          {"type": "NFKC"}]}, 4),
    ({"type": "Replace", "pattern": {"String": " "}, "content": "▁"}, 1),
    ({"type": "Replace", "pattern": {"String": "abc"}, "content": "x"}, 3),
    ({"type": "Replace", "pattern": {"Regex": "\\s+"}, "content": " "}, None),
    ({"type": "Replace", "pattern": {"String": "a"}, "content": ""}, None),
    ({"type": "StripAccents"}, None), ({"type": "Precompiled"}, None),
    ({"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "StripAccents"}]}, None),
])
def test_what_each_normalizer_may_shrink(normalizer: Any, shrink: int | None) -> None:
    assert normalizer_shrink(normalizer) == shrink


def _tokens(tok: PromptTokenizer, text: str) -> int:
    return len(tok.encode_messages([{"role": "user", "content": text}]))


def test_the_bound_holds_on_adversarial_text(tok: PromptTokenizer) -> None:
    """Text made of the longest vocabulary entries, and combining sequences that
    NFC composes, still needs at least chars / (L x S) tokens."""
    vocab = tok._tok.get_vocab()  # the tokenizer's own entries, longest first
    longest = sorted(vocab, key=len, reverse=True)[:20]
    decoded = [tok.decode([vocab[t]], skip_special_tokens=False) for t in longest]
    per_token = tok.max_token_chars() * normalizer_shrink({"type": "NFC"})  # type: ignore[operator]
    assert tok.max_token_chars() == max(len(t) for t in vocab)
    for text in ("".join(decoded) * 20, "e\u0301" * 3000, "\u1100\u1161\u11a8" * 2000,
                 "\u03b1\u0314\u0301\u0345" * 1500, "lorem ipsum " * 2000):
        assert _tokens(tok, text) * per_token >= len(text)


def test_a_row_too_long_is_refused_before_any_token(tok: PromptTokenizer,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from guardrepro.artifacts.template import GuardTemplate
    from guardrepro.guards.registry import get_guard
    from guardrepro.run.pipeline import prepare_rows
    from guardrepro.schema import CohortRow, sha256_text

    text = (TOY / "template.txt").read_text(encoding="utf-8")
    guard = get_guard("toy-guard", GuardTemplate(text, sha256_text(text)))
    line = cohort_line("b0", "original", "banking", 1.0)
    line["sample"]["history"] = "word " * 200_000  # 1 M characters, over 3,840 x 52
    row = CohortRow.from_dict(line)

    def no_tokens(*args: object, **kwargs: object) -> tuple[int, ...]:
        raise AssertionError("tokenized")

    monkeypatch.setattr(tok, "encode_messages", no_tokens)
    with pytest.raises(PromptError) as info:
        prepare_rows(guard, tok, [row], 256, cohort_path="c.jsonl")
    message = str(info.value)
    assert "c.jsonl: row 0 (b0:original): field 'sample.history' holds 1,000,000" in message
    assert "refused before tokenizing" in message


def test_a_row_within_the_bound_goes_on_to_the_token_count(tok: PromptTokenizer) -> None:
    fits = [{"role": "user", "content": "x" * 1000}]
    tok.check_chars(fits, {"sample.history": "x" * 1000}, 256)  # no error: measured later
    budget = (tok.max_context - 256) * tok.max_token_chars() * 4
    edge = [{"role": "user", "content": "x" * budget}]
    tok.check_chars(edge, {"sample.history": "x" * budget}, 256)
    with pytest.raises(PromptError, match="refused before tokenizing"):
        tok.check_chars([{"role": "user", "content": "x" * (budget + 1)}], {}, 256)


@pytest.mark.faults
def test_run_limit_1_on_a_50_mb_row_fails_fast_naming_row_and_field(tmp_path: Path) -> None:
    line = cohort_line("b0", "original", "banking", 1.0)
    line["sample"]["history"] = "lorem ipsum dolor " * 2_800_000  # 50.4 MB
    cohort = tmp_path / "c.jsonl"
    cohort.write_text(canonical_json(line) + "\n", encoding="utf-8")
    env = {"PYTHONPATH": str(ROOT), "GUARDREPRO_HOME": str(tmp_path / "home"),
           "PATH": "/usr/bin:/bin"}
    fetch = subprocess.run([sys.executable, "-m", "guardrepro", "fetch",
                            str(ROOT / "locks" / "toy-guard.toml"), "--no-progress"],
                           env=env, capture_output=True, text=True, timeout=300)
    assert fetch.returncode == 0, fetch.stderr
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "guardrepro", "run", "--profile",
                           str(ROOT / "runners" / "toy-hf.toml"), "--cohort", str(cohort),
                           "--out", str(tmp_path / "run"), "--limit", "1", "--no-progress"],
                          env=env, capture_output=True, text=True, timeout=300)
    seconds = time.monotonic() - start
    assert done.returncode == 2, done.stderr
    assert f"{cohort}: row 0 (b0:original): field 'sample.history' holds 50,400,000" in (
        done.stderr)
    assert seconds < 60, seconds  # 84 s (and 9.7 GB) tokenizing before the bound
    assert not (tmp_path / "run").exists()
