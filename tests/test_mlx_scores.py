"""P(unsafe) on the MLX backend, checked against the MLX model's own logits.

The toy guard (float32 MLX artifact of the shipped checkpoint) runs four
rows of the toy cohort through the MLX runner at batch 2 (prefix reuse
off), the path a run takes: the first batch is decoded batched and at batch 1
(the runner checks one against the other and returns batch 1), the second
batched, so both of the runner's label-logit paths give records. For
each row the test runs the MLX model itself over the prompt and the row's
output in one forward pass, takes the full-vocabulary softmax, and works the
label probabilities out by hand (``label_probs``: a second implementation of
docs/PROTOCOL.md section 22). The rows cover every rating (``0.0``, ``0.5``
read two tokens after the decision position, ``1.0``) and both flags.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("mlx.core", reason="mlx is not installed (pip install 'guardrepro[mlx]')")
pytest.importorskip("mlx_lm", reason="mlx-lm is not installed (pip install 'guardrepro[mlx]')")

from label_probs import ts_expected
from runner_helpers import toy_cohort, toy_guard

pytestmark = pytest.mark.mlx
# toy-64 cohort rows: attacked / rating 0.0, no flag, attacked / 1.0, attacked / 0.5
ROWS = (0, 1, 8, 64)


@pytest.fixture(scope="module")
def toy_run(tmp_path_factory: pytest.TempPathFactory, toy_mlx_f32: Path) -> dict[str, Any]:
    """The runner's attempts on ``ROWS`` and what produced them."""
    from guardrepro.decoding import DecodingParams
    from guardrepro.run.attempts import generate_chunk
    from guardrepro.run.prepare import prepare_rows
    from guardrepro.run.prompts import PromptTokenizer
    from guardrepro.run.runners.backends import MLX
    from guardrepro.run.runners.registry import create_runner
    from guardrepro.rundir.cohort import read_cohort

    base = tmp_path_factory.mktemp("mlx-scores")
    rows = read_cohort(toy_cohort(base / "cohort.jsonl", ROWS))
    guard = toy_guard()
    tok = PromptTokenizer(toy_mlx_f32)
    prepared = prepare_rows(guard, tok, rows, 96)
    runner: Any = create_runner(MLX, toy_mlx_f32, {"batch_size": 2, "prefix_reuse": False},
                                eos_token_ids=tok.eos_token_ids,
                                pad_token_id=tok.pad_token_id, decode=tok.decode)
    history = generate_chunk(runner, guard, prepared, DecodingParams(max_new_tokens=96),
                             tok.decode)
    batching = runner.batching
    runner.close()
    return {"dir": toy_mlx_f32, "tok": tok, "prepared": prepared, "history": history,
            "batching": batching}


def _softmax_rows(model: Any, ids: list[int], start: int) -> np.ndarray:
    """Float64 softmax of the MLX model's float32 logits from position ``start``."""
    import mlx.core as mx

    logits = np.array(model(mx.array([ids]))[0].astype(mx.float32), dtype=np.float64)[start:]
    logits -= logits.max(axis=1, keepdims=True)
    exp = np.exp(logits)
    return exp / exp.sum(axis=1, keepdims=True)


def test_every_ok_mlx_record_carries_the_models_p_unsafe(toy_run: dict[str, Any]) -> None:
    import mlx_lm

    # both label-logit paths gave records: batch 1 (the first batch, checked) and batched
    assert toy_run["batching"] == "verified on 2 rows"
    model: Any = mlx_lm.load(str(toy_run["dir"]))[0]
    tok = toy_run["tok"]
    ratings, inside = set(), 0
    for p in toy_run["prepared"]:
        attempt, gen, scores = toy_run["history"][p.row.row_id][-1]
        assert attempt.status == "ok" and gen is not None
        got = scores.decision
        assert got is not None and got.reason is None
        assert got.label_probs is not None and got.p_unsafe is not None
        assert 0.0 <= got.p_unsafe <= 1.0
        assert sum(got.label_probs.values()) == pytest.approx(1.0, abs=1e-12)
        ids = list(p.token_ids) + list(gen.token_ids)
        probs = _softmax_rows(model, ids, len(p.token_ids) - 1)
        want, p_unsafe = ts_expected(gen.text, gen.token_ids, probs, tok.decode, tok.plain_ids)
        # incremental float32 decode vs one teacher-forced pass: measured max |dp| 2.2e-16
        # here (the same float32 logits); 1e-5 leaves room for another BLAS's rounding
        for label, value in want.items():
            assert got.label_probs[label] == pytest.approx(value, abs=1e-5), label
        assert got.p_unsafe == pytest.approx(p_unsafe, abs=1e-5)
        ratings.add(gen.text.split("<Harmfulness_Rating>", 1)[1][:3])
        inside += 0.0 < got.p_unsafe < 1.0
    assert ratings == {"0.0", "0.5", "1.0"} and inside >= 2
