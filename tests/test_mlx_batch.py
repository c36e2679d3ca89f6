"""MLX batched greedy decoding gives the batch-1 loop's tokens, and the runner
falls back to batch 1 when it does not.

Expectations come from the MLX runner at ``batch_size`` 1 (one request at a
time, the path the published runs used), never from the batched decoder.
Tiny random Qwen2 checkpoints (float32 and bfloat16) with prompts of
different lengths; an EOS set chosen from the free-running outputs makes rows
of one batch stop at different steps while others run to ``max_new_tokens``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mlx.core", reason="mlx is not installed (pip install 'guardrepro[mlx]')")
pytest.importorskip("mlx_lm", reason="mlx-lm is not installed (pip install 'guardrepro[mlx]')")
pytest.importorskip("torch", reason="torch writes the tiny checkpoints")

from mlx_tiny import PROMPTS, build_source

from guardrepro.decoding import DecodingParams
from guardrepro.run.prompts import PromptTokenizer
from guardrepro.run.runners import mlx_batch
from guardrepro.run.runners.base import GenerationRequest
from guardrepro.run.runners.mlx_runner import MLXRunner

pytestmark = pytest.mark.mlx
STEPS = DecodingParams(max_new_tokens=20)


@pytest.fixture(scope="module", params=["float32", "bfloat16"])
def model_dir(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    # init std 0.2: varied greedy outputs (see test_mlx_runner)
    return build_source(tmp_path_factory.mktemp("m") / request.param, dtype=request.param,
                        initializer_range=0.2, rope_theta=500.0)


def _runner(directory: Path, batch_size: int, eos: list[int] | None = None) -> MLXRunner:
    tok = PromptTokenizer(directory)
    return MLXRunner(directory, {"batch_size": batch_size},
                     eos_token_ids=eos or tok.eos_token_ids, pad_token_id=tok.pad_token_id,
                     decode=tok.decode)


def _requests(directory: Path) -> list[GenerationRequest]:
    tok = PromptTokenizer(directory)
    reqs = [GenerationRequest(f"r{i}", tok.encode_chat(p)) for i, p in enumerate(PROMPTS)]
    reqs.append(GenerationRequest("short", tok.encode_chat("hi")))
    assert len({len(r.prompt_token_ids) for r in reqs}) >= 3  # really a padded batch
    return reqs


def _key(gen: Any) -> tuple[Any, ...]:
    return gen.row_id, gen.token_ids, gen.finish_reason, gen.text


def _mixed_stop_eos(directory: Path, reqs: list[GenerationRequest]) -> list[int]:
    """EOS ids that stop some rows early (first occurrences at different steps)."""
    free = _runner(directory, 1, eos=[10**6]).generate(reqs, STEPS)
    return sorted({free[0].token_ids[2], free[1].token_ids[7]})


def test_batched_tokens_equal_batch_one_with_rows_stopping_apart(model_dir: Path) -> None:
    reqs = _requests(model_dir)
    eos = _mixed_stop_eos(model_dir, reqs)
    single = _runner(model_dir, 1, eos).generate(reqs, STEPS)
    stops = [len(g.token_ids) for g in single]
    assert len(set(stops)) > 1 and STEPS.max_new_tokens in stops, stops
    assert {g.finish_reason for g in single} == {"stop", "length"}
    batched = _runner(model_dir, 8, eos)
    got, _ = batched._generate_batch(reqs, STEPS, reuse=False)  # the batched path, no check
    assert [_key(g) for g in got] == [_key(g) for g in single]
    for a, b in zip(got, single, strict=True):
        assert len(a.step_margins) == len(b.step_margins)
        assert a.step_margins[0] == b.step_margins[0]  # prefilled alone, as at batch 1
        assert a.step_margins == pytest.approx(b.step_margins, abs=1e-4)


def test_runner_verifies_its_first_batch_then_stays_batched(model_dir: Path) -> None:
    reqs = _requests(model_dir)
    single = _runner(model_dir, 1).generate(reqs, STEPS)
    runner = _runner(model_dir, 3)
    assert runner.batching == "unchecked"
    before = runner.describe()
    got = runner.generate(reqs, STEPS)  # batches of 3, 2: the first is checked
    assert runner.batching == "verified on 3 rows"
    assert runner.describe() == before  # provenance does not depend on the outcome
    assert before["batch_size"] == 3 and "first batch checked" in before["batching"]
    assert [_key(g) for g in got] == [_key(g) for g in single]


def test_runner_falls_back_when_batched_tokens_differ(
    model_dir: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # A batched kernel that rounds a row's argmax differently cannot be produced on
    # demand on this CPU, so the real batched decoder's output is altered on one row.
    real = mlx_batch.decode_batch

    def drifting(*args: Any, **kwargs: Any) -> list[mlx_batch.Decoded]:
        out = real(*args, **kwargs)
        bad = dataclasses.replace(out[1], token_ids=[*out[1].token_ids[:-1], 10**6])
        return [out[0], bad, *out[2:]]

    monkeypatch.setattr(mlx_batch, "decode_batch", drifting)
    reqs = _requests(model_dir)
    single = _runner(model_dir, 1).generate(reqs, STEPS)
    runner = _runner(model_dir, 2)
    with caplog.at_level("WARNING"):
        got = runner.generate(reqs, STEPS)
    state = runner.batching
    assert "first batch checked" in runner.describe()["batching"]
    assert state.startswith("fell back to batch 1") and "1 of 2 rows" in state and "r1" in state
    assert state in caplog.text
    assert [_key(g) for g in got] == [_key(g) for g in single]  # batch-1 results everywhere


def test_sampled_mode_and_single_rows_stay_at_batch_one(model_dir: Path) -> None:
    reqs = _requests(model_dir)[:1]
    runner = _runner(model_dir, 4)
    runner.generate(reqs, STEPS)
    assert runner.batching == "unchecked"  # one row: nothing was batched
    sampled = DecodingParams(mode="sampled", temperature=0.7, top_p=0.9, max_new_tokens=5)
    seeded = [dataclasses.replace(r, seed=3) for r in _requests(model_dir)[:2]]
    runner.generate(seeded, sampled)
    assert runner.batching == "unchecked"


def test_empty_prompts_are_refused() -> None:
    with pytest.raises(ValueError, match="at least one token"):
        mlx_batch.decode_batch(object(), [[1], []], eos_token_ids=[0], max_new_tokens=2,
                               prefill_step_size=8)
