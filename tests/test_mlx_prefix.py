"""MLX prompt-prefix reuse gives the tokens of a full prefill, and the runner
switches it off when it does not.

Expectations come from the MLX runner with ``prefix_reuse = false`` at batch
1 (every prompt prefilled from scratch, the path the published runs used),
never from the reuse path. The prompts are built from one chat prompt so the
shared prefix lengths are known by construction: an edited copy (shares P
tokens), a copy that diverges before ``MIN_PREFIX`` (shares 10), one that
differs at its first token (shares 0), an identical copy (reuses all but its
last token) and a longer copy (reuses the whole base). An EOS set chosen from
the free-running outputs makes rows stop at different steps.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("mlx.core", reason="mlx is not installed (pip install 'guardrepro[mlx]')")
pytest.importorskip("mlx_lm", reason="mlx-lm is not installed (pip install 'guardrepro[mlx]')")
pytest.importorskip("torch", reason="torch writes the tiny checkpoints")

from mlx_tiny import PROMPTS, build_source

from guardrepro.decoding import DecodingParams
from guardrepro.errors import InputError
from guardrepro.run.prompts import PromptTokenizer
from guardrepro.run.runners import mlx_batch, mlx_runner
from guardrepro.run.runners.base import GenerationRequest
from guardrepro.run.runners.greedy import Prefix
from guardrepro.run.runners.mlx_runner import MLXRunner

pytestmark = pytest.mark.mlx
STEPS = DecodingParams(max_new_tokens=12)
P = 30  # the edited copy's first edited position


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # init std 0.2: varied greedy outputs (see test_mlx_runner)
    return build_source(tmp_path_factory.mktemp("m") / "float32", initializer_range=0.2,
                        rope_theta=500.0)


def _runner(directory: Path, options: dict[str, Any] | None = None,
            eos: list[int] | None = None) -> MLXRunner:
    tok = PromptTokenizer(directory)
    return MLXRunner(directory, options or {}, eos_token_ids=eos or tok.eos_token_ids,
                     pad_token_id=tok.pad_token_id, decode=tok.decode)


def _prompts(directory: Path) -> tuple[list[GenerationRequest], list[int]]:
    """The rows and, by construction, the positions each may reuse."""
    base = list(PromptTokenizer(directory).encode_chat(" ".join(PROMPTS[:2])))
    n = len(base)
    assert n > P + 10
    edit = [*base[:P], base[P] + 1, *base[P + 1:]]
    short = [*base[:10], *[base[10] + 1] * 30]
    fresh = [base[0] + 1, *base[1:]]
    tail = [*base, *base[5:15]]
    rows = {"orig": base, "edit": edit, "short": short, "fresh": fresh, "same": list(base),
            "tail": tail}
    reqs = [GenerationRequest(k, tuple(v)) for k, v in rows.items()]
    return reqs, [0, P, 0, 0, n - 1, n]


def _key(gen: Any) -> tuple[Any, ...]:
    return gen.row_id, gen.token_ids, gen.finish_reason, gen.text


def _expected(directory: Path, reqs: list[GenerationRequest]) -> tuple[list[Any], list[int]]:
    """The full-prefill results and an EOS set that stops rows at different steps."""
    free = _runner(directory, {"prefix_reuse": False}, eos=[10**6]).generate(reqs, STEPS)
    eos = sorted({free[0].token_ids[2], free[1].token_ids[6]})
    single = _runner(directory, {"prefix_reuse": False}, eos).generate(reqs, STEPS)
    stops = [len(g.token_ids) for g in single]
    assert len(set(stops)) > 1 and STEPS.max_new_tokens in stops, stops
    return single, eos


def _counting_copies(monkeypatch: pytest.MonkeyPatch, perturb: bool = False) -> list[int]:
    """Record (and with ``perturb`` corrupt) every prefix copy the reuse path makes."""
    real = mlx_batch.copy_prefix
    calls: list[int] = []

    def copy(cache: Any, length: int) -> list[Any]:
        calls.append(length)
        out = real(cache, length)
        if perturb:
            for layer in out:
                layer.values = layer.values * -4.0
        return out

    monkeypatch.setattr(mlx_batch, "copy_prefix", copy)
    return calls


def test_reuse_at_batch_one_gives_full_prefill_tokens(
    model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reqs, reusable = _prompts(model_dir)
    single, eos = _expected(model_dir, reqs)
    monkeypatch.setattr(mlx_runner, "REUSE_CHECK_ROWS", 0)  # the reuse path's own results
    calls = _counting_copies(monkeypatch)
    runner = _runner(model_dir, eos=eos)
    got = runner.generate(reqs, STEPS)
    assert calls == [n for n in reusable if n]
    assert runner.reuse_stats == {"rows": 6, "prompt_tokens": sum(len(r.prompt_token_ids)
                                                                  for r in reqs),
                                  "reused_tokens": sum(reusable)}
    assert [_key(g) for g in got] == [_key(g) for g in single]
    for a, b in zip(got, single, strict=True):
        assert a.step_margins == pytest.approx(b.step_margins, abs=1e-4)


def test_reuse_within_a_batch_gives_full_prefill_tokens(model_dir: Path) -> None:
    reqs, reusable = _prompts(model_dir)
    single, eos = _expected(model_dir, reqs)
    runner = _runner(model_dir, eos=eos)
    prompts = [list(r.prompt_token_ids) for r in reqs]
    for reuse, want in ((True, reusable), (False, [0] * len(reqs))):
        out = mlx_batch.decode_batch(runner.model, prompts, eos_token_ids=eos,
                                     max_new_tokens=STEPS.max_new_tokens,
                                     prefill_step_size=16, reuse=reuse)
        assert [d.reused for d in out] == want
        assert [(list(g.token_ids), g.finish_reason) for g in single] == \
            [(d.token_ids, d.finish_reason) for d in out]


def test_reused_cache_is_a_copy(model_dir: Path) -> None:
    import mlx.core as mx

    runner = _runner(model_dir)
    reqs, _ = _prompts(model_dir)
    base, edit = (list(r.prompt_token_ids) for r in reqs[:2])
    cache, _ = mlx_batch.prefill(runner.model, base, 2048)
    before = [np.array(c.keys[..., : c.offset, :]) for c in cache]
    mine, _ = mlx_batch.prefill(runner.model, edit, 8, Prefix(P, cache))
    mx.eval([c.state for c in mine])
    for layer, old, new in zip(cache, before, mine, strict=True):
        assert np.array_equal(np.array(layer.keys[..., : layer.offset, :]), old)
        assert new.offset == len(edit) and new.keys is not layer.keys
        assert np.array_equal(np.array(new.keys[..., :P, :]), old[..., :P, :])
    with pytest.raises(ValueError, match="prefix of 3 positions"):
        mlx_batch.prefill(runner.model, edit, 8, Prefix(3, cache))


def test_runner_checks_its_first_reusing_rows(model_dir: Path) -> None:
    reqs, _ = _prompts(model_dir)
    single, eos = _expected(model_dir, reqs)
    runner = _runner(model_dir, eos=eos)
    before = runner.describe()
    assert runner.prefix_reuse == "unchecked" and "first 4" in before["prefix_reuse"]
    got = runner.generate(reqs, STEPS)
    assert runner.prefix_reuse == "checked on 3 rows so far"  # edit, same, tail
    assert [_key(g) for g in got] == [_key(g) for g in single]
    again = [GenerationRequest(f"{r.row_id}2", r.prompt_token_ids) for r in reqs]
    got = runner.generate(again, STEPS)
    assert runner.prefix_reuse.startswith("verified on ")
    assert [g.token_ids for g in got] == [g.token_ids for g in single]
    assert runner.describe() == before  # provenance does not depend on the outcome
    batched = _runner(model_dir, {"batch_size": 3}, eos)
    got = batched.generate(reqs, STEPS)  # first batch checks batching, the second reuse
    assert batched.batching == "verified on 3 rows"
    assert batched.prefix_reuse == "checked on 1 rows so far"  # tail on same
    assert [_key(g) for g in got] == [_key(g) for g in single]


def test_reuse_switches_off_when_tokens_differ(
    model_dir: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    reqs, _ = _prompts(model_dir)
    single, eos = _expected(model_dir, reqs)
    calls = _counting_copies(monkeypatch, perturb=True)  # reused values made wrong
    runner = _runner(model_dir, eos=eos)
    with caplog.at_level("WARNING"):
        got = runner.generate(reqs, STEPS)
    state = runner.prefix_reuse
    assert state.startswith("off: tokens with a reused prompt prefix differ"), state
    assert "(edit)" in state and state in caplog.text
    assert calls == [P]  # nothing reused after the first failed check
    assert [_key(g) for g in got] == [_key(g) for g in single]  # full-prefill results


def test_batched_reuse_switches_off_when_tokens_differ(
    model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reqs, reusable = _prompts(model_dir)
    single, eos = _expected(model_dir, reqs)
    calls = _counting_copies(monkeypatch, perturb=True)
    runner = _runner(model_dir, {"batch_size": 3}, eos)
    got = runner.generate([*reqs, *reqs[3:]], STEPS)  # batches: 3 checked, 3 reusing, 3
    assert runner.batching == "verified on 3 rows"
    state = runner.prefix_reuse
    assert state.startswith("off: tokens with a reused prompt prefix differ"), state
    assert "(tail)" in state and "of 1 checked rows" in state
    assert calls == [reusable[-1]]  # tail on same; the third batch prefills from scratch
    want = [*single, *single[3:]]
    assert [g.token_ids for g in got] == [g.token_ids for g in want]


def test_option_turns_reuse_off(model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reqs, _ = _prompts(model_dir)
    calls = _counting_copies(monkeypatch)
    runner = _runner(model_dir, {"prefix_reuse": False})
    assert runner.prefix_reuse == runner.describe()["prefix_reuse"] == \
        "off: prefix_reuse = false"
    runner.generate(reqs[:2], STEPS)
    sampled = DecodingParams(mode="sampled", temperature=0.7, top_p=0.9, max_new_tokens=4)
    seeded = [GenerationRequest(r.row_id, r.prompt_token_ids, seed=1) for r in reqs[:2]]
    on = _runner(model_dir)
    on.generate(seeded, sampled)  # sampled rows prefill from scratch
    assert calls == [] and on.prefix_reuse == "unchecked"
    with pytest.raises(InputError, match="prefix_reuse"):
        _runner(model_dir, {"prefix_reuse": "yes"})
