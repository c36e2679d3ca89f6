"""The synthetic benchmark's cohort and forced lengths (scripts/synthetic).

Expectations come from the published profile (UPSTREAM.md: prompts 988-13,087
tokens, median 1,979; outputs 110-2,048, median 215) and from the edit rules
stated in ``scripts/synthetic/cohort.py``, checked position by position here;
token identity is the lean decoder against transformers' ``generate`` at
batch 1, two independent implementations.

Rules the profile must meet: minimum and maximum exactly the target's, the
median within 5% for 32 rows and within 1% for 256; every variant exactly as
long as its base.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scripts.synthetic import cohort, run_hf  # noqa: E402
from scripts.synthetic.shapes import build_hf, load_shape  # noqa: E402

SHAPE = load_shape("tiny", None)
VOCAB = SHAPE.config["vocab_size"]


@pytest.mark.parametrize(("rows", "tolerance"), [(32, 0.05), (256, 0.01)])
def test_length_profile_is_the_published_one(rows: int, tolerance: float) -> None:
    built = cohort.build(rows, VOCAB, SHAPE.eos_ids)
    prompts = [len(r.prompt) for r in built]
    outputs = [r.output_tokens for r in built]
    assert (min(prompts), max(prompts)) == (988, 13087)
    assert (min(outputs), max(outputs)) == (110, 2048)
    assert abs(statistics.median(prompts) / 1979 - 1) <= tolerance
    assert abs(statistics.median(outputs) / 215 - 1) <= tolerance
    assert len(built) == rows and len({r.row_id for r in built}) == rows


def test_variants_edit_as_the_real_ones_do() -> None:
    built = cohort.build(8, VOCAB, SHAPE.eos_ids)
    assert all(t < min(SHAPE.eos_ids) for r in built for t in r.prompt)  # no EOS inside
    heads = {r.prompt[: cohort.HEAD] for r in built}
    assert len(heads) == 1  # one template head for every row
    for b in range(2):
        original, marker, alias, combined = (r.prompt for r in built[4 * b : 4 * b + 4])
        n = len(original)
        assert len(marker) == len(alias) == len(combined) == n

        def diff(other: tuple[int, ...], base: tuple[int, ...] = original) -> list[int]:
            return [i for i, (x, y) in enumerate(zip(other, base, strict=True)) if x != y]

        body = n - cohort.HEAD - cohort.TAIL
        tools_end = cohort.HEAD + int(body * 0.2)
        history_end = tools_end + int(body * 0.65)
        m = diff(marker)
        # a few tokens (random replacements may coincide: at most MARKER), inside the history
        assert 1 <= len(m) <= cohort.MARKER and m == sorted(m)
        assert all(tools_end <= i < history_end for i in m) and m[-1] - m[0] < cohort.MARKER
        a = diff(alias)
        # the tool name: once in the tool descriptions, twice in the history, once in the action
        assert 1 <= len(a) <= 4 * cohort.NAME
        assert cohort.HEAD <= a[0] < tools_end and a[-1] >= history_end
        assert sum(tools_end <= i < history_end for i in a) >= 2
        assert set(diff(combined)) == set(m) | set(a)
        # what the prefixes share: alias/combined diverge in the tool descriptions
        assert diff(combined, alias) == m


def _model() -> Any:
    """The tiny shape's seeded random model, run on one torch thread as the benchmark runs it."""
    import torch

    torch.set_num_threads(1)
    return build_hf(SHAPE)


def _rows(lengths: list[int], prompt_tokens: int) -> list[cohort.Row]:
    built = cohort.build(4, VOCAB, SHAPE.eos_ids, prompt_tokens=prompt_tokens)
    return [dataclasses.replace(r, output_tokens=n) for r, n in zip(built, lengths, strict=True)]


def _check(rows: list[cohort.Row], batch: int) -> None:
    model, load_s = _model(), 0.0
    naive = run_hf.naive(model, load_s, rows, SHAPE)
    lean = run_hf.lean(model, load_s, rows, SHAPE, batch)
    for result in (naive, lean):
        for r in rows:
            out = result.tokens[r.row_id]
            assert len(out) == r.output_tokens, (result.backend, r.row_id)
            assert out[-1] == SHAPE.eos_ids[0]
            assert not set(out[:-1]) & set(SHAPE.eos_ids)  # suppressed before the end
        assert result.forced_ok() == len(rows)
    assert lean.identical(naive.tokens) == (len(rows), len(rows))
    report = lean.report(naive.tokens, "hf-generate")
    assert report["identical"] == {"vs": "hf-generate", "rows": 4, "of": 4}
    assert report["generated_tokens"] == sum(r.output_tokens for r in rows)
    json.dumps(report)


def test_forced_lengths_and_batch_identity_short_prompts() -> None:
    rows = _rows([3, 17, 1, 9], 760)
    _check(rows, 4)


def test_the_toy_profiles_two_workers_and_each_concurrency_keep_generate_tokens() -> None:
    """The benchmark's hf-lean (2 forked workers of one thread, the rows split as a
    run splits them, 2 slots each: continuous batching) and --concurrency 1,3 give
    generate's tokens on every row; the report's wall is load + the workers' fork
    to exit."""
    rows = _rows([3, 17, 1, 9], 760)
    model, load_s = _model(), 0.0
    naive = run_hf.naive(model, load_s, rows, SHAPE)
    lean = run_hf.lean_workers(model, load_s, rows, SHAPE, 2, 2)
    assert lean.identical(naive.tokens) == (4, 4) and lean.forced_ok() == 4
    report = lean.report(naive.tokens, "hf-generate")
    assert report["wall_s"] >= report["load_s"] and report["workers"] == 2
    checks = run_hf.concurrency_check(model, rows, SHAPE, [1, 3], naive.tokens)
    assert [(c["concurrency"], c["decoded_together"], c["identical"], c["of"])
            for c in checks] == [(1, 1, 4, 4), (3, 3, 4, 4)]


def test_fresh_processes_read_the_saved_checkpoint_and_keep_generate_tokens(
        tmp_path: Path) -> None:
    """Each hf configuration in a process of its own, reading the checkpoint saved
    once (the naive loop through the hf runner's loader, the lean workers through
    ``lean_weights``): the saved weights are the seeded model's, both processes
    give the tokens of ``generate`` run here on those weights, and start-up plus
    generation fit within the wall timed from outside."""
    import argparse

    import torch

    from scripts import bench_synthetic as bench

    rows = _rows([3, 17, 1, 9], 760)
    checkpoint = bench.save_checkpoint(SHAPE, tmp_path / "checkpoint")
    here = run_hf.load_saved(checkpoint, 1)
    built = build_hf(SHAPE).state_dict()
    saved = here.state_dict()
    assert built.keys() == saved.keys()
    assert all(torch.equal(built[k], saved[k]) for k in built)
    reference = run_hf.naive(here, 0.0, rows, SHAPE).tokens
    args = argparse.Namespace(batch=2, workers=2)
    for backend in ("hf-generate", "hf-lean"):
        result = bench.run_fresh(backend, checkpoint, SHAPE, rows, args, tmp_path)
        assert result.identical(reference) == (4, 4) and result.forced_ok() == 4
        report = result.report(reference, "generate here")
        assert 0 < report["load_s"] < report["wall_s"]
        assert report["load_s"] + report["generation_s"] <= report["wall_s"]
    assert "2 worker(s)" in result.what and result.what.endswith("fresh process")


def test_the_paired_summary_is_the_per_round_ratios() -> None:
    from scripts import bench_synthetic as bench

    def round_(naive: tuple[float, float], lean: tuple[float, float],
               same: int) -> list[dict[str, Any]]:
        return [{"backend": "hf-generate", "generation_s": naive[0], "wall_s": naive[1]},
                {"backend": "hf-lean", "generation_s": lean[0], "wall_s": lean[1],
                 "identical": {"vs": "hf-generate", "rows": same, "of": 4}}]

    rounds = [round_((20, 24), (8, 10), 4), round_((18, 21), (6, 7), 4),
              round_((21, 25), (7, 10), 3)]
    summary = bench.paired_summary(rounds)
    assert summary is not None
    # by hand: 20/8, 18/6, 21/7 and 24/10, 21/7, 25/10
    assert summary["generation_ratios"] == [2.5, 3.0, 3.0]
    assert summary["wall_ratios"] == [2.4, 3.0, 2.5]
    assert (summary["generation_median"], summary["wall_median"]) == (3.0, 2.5)
    assert summary["identical_every_round"] is False
    assert "worst 2.50x" in summary["line"] and "worst 2.40x" in summary["line"]
    assert bench.paired_summary([rounds[0][:1]]) is None  # no lean run: nothing to pair


@pytest.mark.slow
def test_forced_lengths_and_batch_identity_at_13k_prompts() -> None:
    """The published maximum: the lean decoder stays token-identical to
    ``generate`` with 13,087-token prompts (positions, RoPE, masks at length)."""
    rows = _rows([5, 12, 2, 8], 13087)
    _check(rows, 4)


def test_reuse_rule_keeps_cheap_prefixes_only() -> None:
    from guardrepro.run.runners.lean import LeanDecoder

    model = _model()
    decoder = LeanDecoder(model)
    assert decoder.worth_reusing(700, 760)  # short prompt: projections dominate
    assert decoder.worth_reusing(12500, 13087)  # most of a long prompt is shared
    assert not decoder.worth_reusing(620, 13087)  # the template head only, at 13k


def _gpu_check(tmp_path: Path, *args: str) -> Any:
    import os
    import subprocess

    env = {**os.environ, "PYTHON": sys.executable}
    return subprocess.run(["bash", str(ROOT / "scripts/gpu_check.sh"), *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_gpu_check_dry_run_prints_the_plan_and_checks_inputs(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = _gpu_check(tmp_path, "--dry-run", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    text = done.stdout
    for stage in ("[synthetic, limit 270 s]", "[toy-run, limit 150 s]", "[toy-gate, limit 30 s]"):
        assert stage in text
    assert "--shape qwen2.5-7b --rows 256 --backends vllm" in text
    assert "7615.6 M parameters, 28 layers" in text  # Qwen2.5-7B's published size
    # 28 layers x 4 KV heads x 128 x (K, V) x 2 bytes
    assert f"KV cache (bf16): {28 * 4 * 128 * 2 * 2} bytes a token" in text
    assert "toy cohort 256 rows" in text  # built from the shipped toy data
    profile = (out / "toy-vllm-gpu.toml").read_text()
    assert 'device = "cuda"' in profile and "cpu_kvcache_space_gib" not in profile
    assert "dry run: plan printed, inputs checked" in text


def test_gpu_check_without_a_gpu_fails_fast_with_the_list(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    out = tmp_path / "out"
    done = _gpu_check(tmp_path, str(out))
    assert done.returncode == 2
    assert "bring:" in done.stderr and "CUDA device" in done.stderr
    report = json.loads((out / "gpu_check.json").read_text())
    assert report["status"] == "unavailable"
    assert any("CUDA device" in m for m in report["missing"])
    assert not (out / "synthetic.json").exists()  # nothing ran
