"""The transformers runner and the backend registry on a tiny random Qwen2 (fp32).

Expectations come from a hand-written argmax loop over the model's full
forward logits (no KV cache, no generate), never from the runner itself.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from runner_helpers import build_diverse_tiny, chatml  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

from guardrepro.decoding import DecodingParams  # noqa: E402
from guardrepro.errors import (  # noqa: E402
    DependencyMissingError,
    InputError,
    MissingArtifactError,
)
from guardrepro.run.runners.backends import HF, MLX  # noqa: E402
from guardrepro.run.runners.base import GenerationRequest, Runner  # noqa: E402
from guardrepro.run.runners.registry import backend_of, create_runner  # noqa: E402

EOS = (2, 0)
PROMPTS = [
    "hello agent tool",
    "The agent reads the tool output and decides whether to call send_money.",
    "x",
]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_diverse_tiny(tmp_path_factory.mktemp("hf") / "tiny")


@pytest.fixture(scope="module")
def tok(tiny: Path) -> Tokenizer:
    return Tokenizer.from_file(str(tiny / "tokenizer.json"))


def _decode(tok: Tokenizer):  # type: ignore[no-untyped-def]
    return lambda ids: tok.decode(list(ids), skip_special_tokens=True)


def _runner(tiny: Path, tok: Tokenizer, eos=EOS, **options):  # type: ignore[no-untyped-def]
    opts = {"dtype": "float32", "threads": 1, **options}
    return create_runner(HF, tiny, opts, eos_token_ids=eos, pad_token_id=0, decode=_decode(tok))


def _requests(tok: Tokenizer) -> list[GenerationRequest]:
    return [
        GenerationRequest(f"r{i}", tuple(tok.encode(chatml(p)).ids)) for i, p in enumerate(PROMPTS)
    ]


def _manual_greedy(model_dir: Path, prompt: tuple[int, ...], steps: int):  # type: ignore[no-untyped-def]
    """Argmax over full-sequence forward logits, recomputed from scratch each step."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    ids = list(prompt)
    out, margins = [], []
    with torch.no_grad():
        for _ in range(steps):
            logits = model(torch.tensor([ids])).logits[0, -1].float()
            top = torch.topk(logits, 2).values
            token = int(torch.argmax(logits))
            out.append(token)
            margins.append(float(top[0] - top[1]))
            ids.append(token)
    return out, margins


def test_runner_satisfies_protocol_and_describes_itself(tiny: Path, tok: Tokenizer) -> None:
    runner = _runner(tiny, tok, batch_size=2)
    assert isinstance(runner, Runner)
    info = runner.describe()
    assert info["backend"] == "hf" and info["dtype"] == "float32" and info["device"] == "cpu"
    # threads change no token: set (1 here) but not part of the provenance
    assert info["batch_size"] == 2 and "threads" not in info and torch.get_num_threads() == 1
    assert info["torch"] == torch.__version__
    json.dumps(info)  # hashed into provenance: must be JSON
    runner.close()


def test_greedy_twice_identical(tiny: Path, tok: Tokenizer) -> None:
    params = DecodingParams(max_new_tokens=16)
    first = _runner(tiny, tok).generate(_requests(tok), params)
    again = _runner(tiny, tok).generate(_requests(tok), params)
    assert [g.token_ids for g in first] == [g.token_ids for g in again]
    assert [g.row_id for g in first] == ["r0", "r1", "r2"]
    assert len(set(first[0].token_ids)) > 3  # a varied sequence, not one repeated token


def test_greedy_ignores_checkpoint_generation_config(
    tiny: Path, tok: Tokenizer, tmp_path: Path
) -> None:
    """A checkpoint asking for sampling, top-k, a repetition penalty and n-gram
    blocking still decodes as a pure argmax."""
    from transformers import AutoModelForCausalLM

    ckpt = tmp_path / "ckpt"
    shutil.copytree(tiny, ckpt)
    gen = {
        "eos_token_id": [2, 0],
        "pad_token_id": 0,
        "do_sample": False,
        "top_k": 3,
        "temperature": 0.7,
        "repetition_penalty": 2.0,
        "no_repeat_ngram_size": 1,
    }
    (ckpt / "generation_config.json").write_text(json.dumps(gen))
    steps = 24
    prompt = _requests(tok)[0].prompt_token_ids
    expected, margins = _manual_greedy(ckpt, prompt, steps)
    assert len(set(expected)) < len(expected)  # repeats: the penalties would change it

    # The checkpoint's config really is hostile: transformers' own default generate differs.
    model = AutoModelForCausalLM.from_pretrained(str(ckpt), dtype=torch.float32)
    naive = model.generate(torch.tensor([prompt]), max_new_tokens=steps, eos_token_id=[999])
    assert naive[0, len(prompt) :].tolist() != expected

    got = _runner(ckpt, tok, eos=(999,)).generate(
        [GenerationRequest("a", prompt)], DecodingParams(max_new_tokens=steps)
    )[0]
    assert list(got.token_ids) == expected
    assert got.finish_reason == "length"
    assert got.step_margins == pytest.approx(margins, abs=1e-4)
    assert min(margins) > 1e-3  # no near-ties that could make the comparison luck


def test_eos_stops_and_is_kept(tiny: Path, tok: Tokenizer) -> None:
    prompt = _requests(tok)[1].prompt_token_ids
    expected, _ = _manual_greedy(tiny, prompt, 20)
    # first token (from position 3 on) that did not occur earlier: make it the EOS
    stop = next(i for i in range(3, 20) if expected[i] not in expected[:i])
    eos_id = expected[stop]
    got = _runner(tiny, tok, eos=(9999, eos_id)).generate(
        [GenerationRequest("a", prompt)], DecodingParams(max_new_tokens=20)
    )[0]
    assert list(got.token_ids) == expected[: stop + 1]
    assert got.finish_reason == "stop"
    assert got.text == tok.decode(expected[:stop], skip_special_tokens=True)
    assert len(got.step_margins) == stop + 1


def test_max_new_tokens_gives_length(tiny: Path, tok: Tokenizer) -> None:
    runner = _runner(tiny, tok, eos=(9999,))
    gens = runner.generate(_requests(tok), DecodingParams(max_new_tokens=5))
    for g in gens:
        assert len(g.token_ids) == 5 and g.finish_reason == "length"
        assert len(g.step_margins) == 5
        # measured, not defaulted: a real prefill and decode take time
        assert 0 < g.timings.prefill_s <= g.timings.total_s
        assert g.peak_memory_bytes is not None and g.peak_memory_bytes > 0


def test_fp32_left_padded_batch_equals_batch_one(tiny: Path, tok: Tokenizer) -> None:
    params = DecodingParams(max_new_tokens=12)
    reqs = _requests(tok)
    assert len({len(r.prompt_token_ids) for r in reqs}) == 3  # real padding happens
    one = _runner(tiny, tok, batch_size=1).generate(reqs, params)
    runner = _runner(tiny, tok, batch_size=3)
    before = time.perf_counter()
    batched = runner.generate(reqs, params)
    wall = time.perf_counter() - before
    assert [g.token_ids for g in batched] == [g.token_ids for g in one]
    for a, b in zip(one, batched, strict=True):
        assert a.step_margins == pytest.approx(b.step_margins, abs=1e-4)
    # amortised timings: one chunk of 3 shares its wall time, so the rows sum to at most it
    assert len({g.timings for g in batched}) == 1
    t = batched[0].timings
    assert t.prefill_s + t.decode_s == pytest.approx(t.total_s)
    assert 0 < sum(g.timings.total_s for g in batched) <= wall


def test_sampled_mode_is_seeded_per_request(tiny: Path, tok: Tokenizer) -> None:
    params = DecodingParams(mode="sampled", temperature=1.0, top_p=1.0, max_new_tokens=12)
    prompt = _requests(tok)[0].prompt_token_ids
    runner = _runner(tiny, tok, batch_size=4)
    reqs = [GenerationRequest(n, prompt, seed=s) for n, s in (("a", 1), ("b", 2), ("c", 1))]
    a, b, c = runner.generate(reqs, params)
    assert a.token_ids == c.token_ids  # same seed, same draw, even after another request
    assert a.token_ids != b.token_ids
    greedy = runner.generate([GenerationRequest("g", prompt)], DecodingParams(max_new_tokens=12))
    assert greedy[0].token_ids != a.token_ids
    with pytest.raises(InputError, match="seed"):
        runner.generate([GenerationRequest("x", prompt)], params)


def test_sampled_tiny_top_p_keeps_only_the_argmax(tiny: Path, tok: Tokenizer) -> None:
    """top_p really filters: a nucleus of one token makes sampling greedy for any seed."""
    reqs = _requests(tok)[:2]
    greedy = _runner(tiny, tok).generate(reqs, DecodingParams(max_new_tokens=10))
    params = DecodingParams(mode="sampled", temperature=1.0, top_p=1e-6, max_new_tokens=10)
    for seed in (1, 2):
        seeded = [GenerationRequest(r.row_id, r.prompt_token_ids, seed=seed) for r in reqs]
        sampled = _runner(tiny, tok).generate(seeded, params)
        assert [g.token_ids for g in sampled] == [g.token_ids for g in greedy]


def test_bad_options_and_checkpoints(tiny: Path, tok: Tokenizer, tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"backend_options\.dtpye"):
        _runner(tiny, tok, dtpye="float32")
    with pytest.raises(InputError, match=r"backend_options\.batch_size"):
        _runner(tiny, tok, batch_size=0)
    with pytest.raises(InputError, match=r"backend_options\.device"):
        _runner(tiny, tok, device="tpu")
    bare = tmp_path / "bare"
    shutil.copytree(tiny, bare)
    (bare / "model.safetensors").unlink()
    with pytest.raises(MissingArtifactError, match="safetensors"):
        _runner(bare, tok)


def test_registry_suggests_closest_backend() -> None:
    with pytest.raises(InputError, match="did you mean 'mlx'"):
        backend_of("mlxx")


def test_registry_names_the_extra_when_a_dependency_is_missing(
    tiny: Path, tok: Tokenizer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # None in sys.modules makes `import mlx` fail exactly as when it is not installed.
    for name in ("mlx", "mlx.core", "mlx_lm", "guardrepro.run.runners.mlx_runner"):
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.delitem(sys.modules, "guardrepro.run.runners.mlx_runner")
    with pytest.raises(DependencyMissingError, match=r"pip install 'guardrepro\[mlx\]'"):
        create_runner(MLX, tiny, {}, eos_token_ids=EOS, pad_token_id=0, decode=_decode(tok))
