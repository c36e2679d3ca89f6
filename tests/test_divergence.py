"""Teacher-forced divergence against a hand computation on tiny models."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from guardrepro.experiments.divergence import (
    ForcedRow,
    forced_logits,
    load_reference,
    log_softmax,
    row_divergence,
    save_reference,
    summarize,
    token_kl,
)
from guardrepro.run.prompts import PromptTokenizer
from guardrepro.run.runners.backends import HF, MLX
from guardrepro.run.runners.registry import create_runner
from scripts.toy.tiny import build_tiny_qwen2

ROW = ForcedRow("row-1", prompt_ids=(5, 17, 33, 8, 12, 40), output_ids=(40, 7, 9, 2),
                decision_index=2)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("tiny")
    # same corpus and vocabulary, different random weights
    return build_tiny_qwen2(base / "ref", seed=0), build_tiny_qwen2(base / "cand", seed=1)


def _hf_runner(directory: Path) -> Any:
    tok = PromptTokenizer(directory)
    return create_runner(HF, directory, {"dtype": "float32", "device": "cpu", "threads": 1},
                         eos_token_ids=tok.eos_token_ids, pad_token_id=tok.pad_token_id,
                         decode=tok.decode)


def _hand_log_softmax(row: list[float]) -> list[float]:
    top = max(row)
    lse = top + math.log(sum(math.exp(x - top) for x in row))
    return [x - lse for x in row]


def _hand_kl(p_logits: list[float], q_logits: list[float]) -> float:
    lp, lq = _hand_log_softmax(p_logits), _hand_log_softmax(q_logits)
    return sum(math.exp(a) * (a - b) for a, b in zip(lp, lq, strict=True))


def test_forced_positions_are_the_ones_that_produced_the_output(models: tuple[Path, Path]
                                                               ) -> None:
    runner = _hf_runner(models[0])
    got = forced_logits(runner, ROW)
    ids = list(ROW.prompt_ids) + list(ROW.output_ids[:-1])
    with torch.no_grad():
        full = runner.model(torch.tensor([ids])).logits[0].numpy()
    n = len(ROW.prompt_ids)
    assert got.shape == (len(ROW.output_ids), full.shape[1])
    np.testing.assert_allclose(got, full[n - 1 : n - 1 + len(ROW.output_ids)], atol=1e-5)
    runner.close()


def test_kl_matches_a_hand_computation(models: tuple[Path, Path]) -> None:
    ref_runner, cand_runner = _hf_runner(models[0]), _hf_runner(models[1])
    ref_logits = forced_logits(ref_runner, ROW)
    cand_logits = forced_logits(cand_runner, ROW)
    item, kl = row_divergence(ROW, log_softmax(ref_logits).astype(np.float32), cand_logits)
    hand = [_hand_kl(list(map(float, p)), list(map(float, q)))
            for p, q in zip(ref_logits, cand_logits, strict=True)]
    assert all(h > 0 for h in hand)
    np.testing.assert_allclose(kl, hand, rtol=1e-4, atol=1e-7)
    assert item["mean_kl"] == pytest.approx(sum(hand) / len(hand), rel=1e-4)
    assert item["max_kl"] == pytest.approx(max(hand), rel=1e-4)
    assert item["decision_kl"] == pytest.approx(hand[2], rel=1e-4)
    agree = sum(int(np.argmax(p) == np.argmax(q)) for p, q in zip(ref_logits, cand_logits,
                                                                  strict=True))
    assert item["top1_agree"] == agree
    top = sorted(map(float, cand_logits[2]), reverse=True)
    assert item["decision_margin"] == pytest.approx(top[0] - top[1], rel=1e-6)
    ref_top = sorted(map(float, ref_logits[2]), reverse=True)
    assert item["reference_decision_margin"] == pytest.approx(ref_top[0] - ref_top[1], abs=1e-4)
    # a model against itself: zero divergence, full agreement
    same, same_kl = row_divergence(ROW, log_softmax(ref_logits), ref_logits)
    assert np.allclose(same_kl, 0.0, atol=1e-9) and same["top1_agree"] == len(ROW.output_ids)
    overall = summarize([item, same], [kl, same_kl])
    pooled = hand + [0.0] * len(hand)
    assert overall["mean_kl"] == pytest.approx(sum(pooled) / len(pooled), rel=1e-4)
    assert overall["tokens"] == 8 and overall["decision_rows"] == 2
    assert min(pooled) <= overall["p99_kl"] <= max(pooled)
    ref_runner.close()
    cand_runner.close()


def test_kl_by_hand_on_tiny_arrays() -> None:
    p = np.array([[1.0, 2.0, 3.0]])
    q = np.array([[3.0, 2.0, 1.0]])
    expected = _hand_kl([1.0, 2.0, 3.0], [3.0, 2.0, 1.0])
    assert token_kl(log_softmax(p), log_softmax(q))[0] == pytest.approx(expected, rel=1e-12)
    # 2 * (e^3 - e^1) / (e^1 + e^2 + e^3): the closed form of this pair
    closed = 2 * (math.e ** 3 - math.e) / (math.e + math.e ** 2 + math.e ** 3)
    assert expected == pytest.approx(closed, rel=1e-12)


def test_reference_file_round_trip(tmp_path: Path) -> None:
    rows = [ROW, ForcedRow("row-2", (1, 2), (3,), None)]
    logprobs = [log_softmax(np.random.default_rng(0).normal(size=(4, 6))),
                log_softmax(np.random.default_rng(1).normal(size=(1, 6)))]
    path = tmp_path / "ref.npz"
    save_reference(path, rows, logprobs, {"run": "x"})
    loaded = load_reference(path)
    assert list(loaded.rows) == rows and loaded.meta == {"run": "x"}
    for a, b in zip(loaded.logprobs, logprobs, strict=True):
        np.testing.assert_allclose(a, b.astype(np.float32))
    assert not list(tmp_path.glob(".ref.npz.*"))  # no temporary left behind


def test_mlx_forced_logits_match_transformers(models: tuple[Path, Path]) -> None:
    pytest.importorskip("mlx_lm")
    hf = _hf_runner(models[0])
    tok = PromptTokenizer(models[0])
    mlx = create_runner(MLX, models[0], {}, eos_token_ids=tok.eos_token_ids,
                        pad_token_id=tok.pad_token_id, decode=tok.decode)
    np.testing.assert_allclose(forced_logits(mlx, ROW), forced_logits(hf, ROW), atol=1e-3)
    hf.close()
    mlx.close()
