"""Run profiles: strict TOML, paths relative to the file, decoding modes."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from guardrepro.decoding import DecodingParams
from guardrepro.errors import InputError, MissingArtifactError
from guardrepro.run.profile import RunProfile

REPO = Path(__file__).resolve().parent.parent

BASE = """name = "p"
backend = "hf"

[guard]
name = "ts-guard"
template_lock = "locks/t.toml"
template_file = "src/agent/agent_prompts.py"

[checkpoint]
dir = "ckpt"

[backend_options]
dtype = "float32"
batch_size = 2
"""


def load(tmp_path: Path, text: str) -> RunProfile:
    path = tmp_path / "sub" / "p.toml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return RunProfile.load(path)


def test_loads_with_paths_relative_to_the_profile(tmp_path: Path) -> None:
    profile = load(tmp_path, BASE)
    assert profile.backend == "hf" and profile.name == "p"
    assert profile.guard.template_lock == tmp_path / "sub" / "locks" / "t.toml"
    assert profile.guard.template_file == "src/agent/agent_prompts.py"
    assert profile.checkpoint.dir == tmp_path / "sub" / "ckpt"
    assert not profile.checkpoint.pinned
    assert profile.backend_options == {"dtype": "float32", "batch_size": 2}
    assert profile.decoding == DecodingParams()  # greedy, 2048 by default
    assert profile.text_sha256 == hashlib.sha256(BASE.encode()).hexdigest()
    assert profile.with_backend_options(batch_size=1).backend_options["batch_size"] == 1


def test_missing_paths_are_reported_when_resolving(tmp_path: Path) -> None:
    profile = load(tmp_path, BASE)
    with pytest.raises(MissingArtifactError, match=r"guard\.template_lock: file not found"):
        profile.check_paths()
    (tmp_path / "sub" / "locks").mkdir()
    (tmp_path / "sub" / "locks" / "t.toml").write_text("")
    with pytest.raises(MissingArtifactError, match=r"checkpoint\.dir: directory not found"):
        profile.check_paths()
    (tmp_path / "sub" / "ckpt").mkdir()
    profile.check_paths()


def test_sampled_mode_takes_the_authors_defaults(tmp_path: Path) -> None:
    profile = load(tmp_path, BASE + '\n[decoding]\nmode = "sampled"\nseed = 3\n')
    assert profile.decoding == DecodingParams(
        mode="sampled", temperature=0.1, top_p=0.9, max_attempts=3, seed=3
    )
    profile = load(tmp_path, BASE + '\n[decoding]\nmode = "sampled"\ntemperature = 1\n')
    assert profile.decoding.temperature == 1.0 and profile.decoding.top_p == 0.9


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda t: "surprise = 1\n" + t, "surprise"),
        (lambda t: t.replace('backend = "hf"', 'backend = "hff"'), "backend"),
        (lambda t: t.replace('name = "p"\n', ""), "name"),
        (lambda t: t.replace('dir = "ckpt"', 'dir = "ckpt"\nlock = "x.toml"'), "checkpoint"),
        (lambda t: t.replace('dir = "ckpt"', ""), "checkpoint"),
        (
            lambda t: t.replace('template_file = "src/agent/agent_prompts.py"\n', ""),
            "guard.template_file",
        ),
        (
            lambda t: t.replace('name = "ts-guard"', 'name = "ts-guard"\ntemplate_path = "a.txt"'),
            "guard.template_path",
        ),
        (lambda t: t + "\n[decoding]\nmax_new_tokens = 0\n", "decoding.max_new_tokens"),
        (lambda t: t + "\n[decoding]\ntemperature = 0.5\n", "decoding.mode"),
        (lambda t: t + "\n[decoding]\nmax_new_tokens = true\n", "decoding.max_new_tokens"),
        (lambda t: t + "\n[decoding]\ntop_k = 20\n", "decoding.top_k"),
        (lambda t: "require_batch_invariance = 1\n" + t, "require_batch_invariance"),
        (lambda t: "backend_options = 3\n" + t.split("[backend_options]")[0], "backend_options"),
    ],
)
def test_strict_errors_name_file_and_field(tmp_path: Path, change, field: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InputError) as err:
        load(tmp_path, change(BASE))
    assert err.value.field == field
    assert err.value.file == str(tmp_path / "sub" / "p.toml")


def test_backend_typo_suggests(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="did you mean 'vllm'"):
        load(tmp_path, BASE.replace('backend = "hf"', 'backend = "vlm"'))


def test_invalid_toml(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="invalid TOML"):
        load(tmp_path, "name = \n")


@pytest.mark.parametrize("name", ["hf-cpu.toml", "toy-hf.toml"])
def test_shipped_hf_profiles_load(name: str) -> None:
    profile = RunProfile.load(REPO / "runners" / name)
    assert profile.backend == "hf" and profile.decoding.mode == "greedy"
    assert profile.backend_options["dtype"] == "float32"
    if name == "hf-cpu.toml":
        assert profile.decoding.max_new_tokens == 2048
        assert profile.guard.name == "ts-guard" and profile.checkpoint.pinned


def _guard_profile(tmp_path: Path, guard: str, decoding: str) -> RunProfile:
    text = (f'name = "p"\nbackend = "hf"\n[guard]\nname = "{guard}"\n'
            f'[checkpoint]\ndir = "ckpt"\n[decoding]\n{decoding}\n')
    return load(tmp_path, text)


def test_omitted_decoding_keys_come_from_the_guard_adapter(tmp_path: Path) -> None:
    # budgets declared by the adapters: toy guard 256, Llama Guard 3 20 tokens
    toy = _guard_profile(tmp_path, "toy-guard", 'mode = "greedy"')
    assert toy.decoding == DecodingParams(mode="greedy", max_new_tokens=256)
    toy_sampled = _guard_profile(tmp_path, "toy-guard", 'mode = "sampled"')
    assert toy_sampled.decoding == DecodingParams(
        mode="sampled", max_new_tokens=256, temperature=0.1, top_p=0.9, max_attempts=3
    )
    llama = _guard_profile(tmp_path, "llama-guard-3", "max_new_tokens = 7")
    assert llama.decoding == DecodingParams(mode="greedy", max_new_tokens=7)
    assert _guard_profile(tmp_path, "llama-guard-3", "").decoding.max_new_tokens == 20


def test_sampled_mode_of_a_guard_without_published_values_needs_them(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="temperature > 0") as info:
        _guard_profile(tmp_path, "qwen3guard", 'mode = "sampled"')
    assert info.value.field == "decoding.mode"
    given = _guard_profile(tmp_path, "qwen3guard", 'mode = "sampled"\ntemperature = 0.7\n'
                           "top_p = 0.8")
    assert given.decoding == DecodingParams(mode="sampled", max_new_tokens=64, temperature=0.7,
                                            top_p=0.8, max_attempts=1)


# (profile, guard, lock, backend, dtype, device, max_new_tokens): the guards' shipped
# profiles; the budgets are the adapters' (Llama Guard 3 20, Qwen3Guard 64, ShieldGemma 1)
GUARD_PROFILES = [
    ("llama-guard-3-1b-hf", "llama-guard-3", "llama-guard-3-1b", "hf", "float32", "cpu", 20),
    ("llama-guard-3-1b-vllm", "llama-guard-3", "llama-guard-3-1b", "vllm", "bfloat16", "cuda", 20),
    ("llama-guard-3-8b-hf", "llama-guard-3", "llama-guard-3-8b", "hf", "float32", "cpu", 20),
    ("llama-guard-3-8b-vllm", "llama-guard-3", "llama-guard-3-8b", "vllm", "bfloat16", "cuda", 20),
    ("qwen3guard-gen-0.6b-hf", "qwen3guard", "qwen3guard-gen-0.6b", "hf", "float32", "cpu", 64),
    ("qwen3guard-gen-0.6b-vllm", "qwen3guard", "qwen3guard-gen-0.6b", "vllm", "bfloat16", "cuda",
     64),
    ("qwen3guard-gen-4b-hf", "qwen3guard", "qwen3guard-gen-4b", "hf", "float32", "cpu", 64),
    ("qwen3guard-gen-4b-vllm", "qwen3guard", "qwen3guard-gen-4b", "vllm", "bfloat16", "cuda", 64),
    ("qwen3guard-gen-8b-hf", "qwen3guard", "qwen3guard-gen-8b", "hf", "float32", "cpu", 64),
    ("qwen3guard-gen-8b-vllm", "qwen3guard", "qwen3guard-gen-8b", "vllm", "bfloat16", "cuda", 64),
    ("shieldgemma-2b-hf", "shieldgemma", "shieldgemma-2b", "hf", "float32", "cpu", 1),
    ("shieldgemma-2b-hf-cuda", "shieldgemma", "shieldgemma-2b", "hf", "bfloat16", "cuda", 1),
    ("hf-cpu", "ts-guard", "ts-guard", "hf", "float32", "cpu", 2048),
    ("vllm-bf16", "ts-guard", "ts-guard", "vllm", "bfloat16", "cuda", 2048),
]


@pytest.mark.parametrize(("name", "guard", "lock", "backend", "dtype", "device", "budget"),
                         GUARD_PROFILES)
def test_shipped_guard_profiles_load_and_validate(name: str, guard: str, lock: str,
                                                  backend: str, dtype: str, device: str,
                                                  budget: int) -> None:
    from guardrepro.artifacts.locks import load_lock

    profile = RunProfile.load(REPO / "runners" / f"{name}.toml")
    assert (profile.name, profile.backend, profile.guard.name) == (name, backend, guard)
    assert profile.checkpoint.lock == (REPO / "locks" / f"{lock}.toml").resolve()
    assert load_lock(profile.checkpoint.lock).name == lock
    profile.check_paths()
    assert (profile.decoding.mode, profile.decoding.max_new_tokens) == ("greedy", budget)
    if backend == "hf":
        from guardrepro.run.runners.hf_runner import _validate

        options = _validate(profile.backend_options)
        assert (options["dtype"], options["device"]) == (dtype, device)
        # Gemma2 (ShieldGemma) needs eager attention for its attention soft-capping
        assert (options["attn_implementation"] == "eager") == (guard == "shieldgemma")
    else:
        from guardrepro.run.runners.vllm_runner import VLLMOptions

        vllm = VLLMOptions.from_mapping(profile.backend_options)
        assert (vllm.dtype, vllm.device, vllm.batch_invariant) == (dtype, device, True)
        assert profile.require_batch_invariance


def test_every_model_guard_lock_has_a_cpu_and_a_gpu_profile() -> None:
    locks = {p[2] for p in GUARD_PROFILES}
    assert locks == {path.stem for path in (REPO / "locks").glob("*.toml")} - {
        "toolsafe", "toy-bench", "toy-guard"}
    for lock in locks:
        rows = [p for p in GUARD_PROFILES if p[2] == lock]
        assert {p[5] for p in rows} == {"cpu", "cuda"}, lock


def test_a_logit_guard_on_a_backend_without_score_logits_is_refused(tmp_path: Path) -> None:
    from guardrepro.run.resolve import resolve_profile

    text = (REPO / "runners" / "qwen3guard-gen-0.6b-vllm.toml").read_text()
    text = text.replace('name = "qwen3guard"', 'name = "shieldgemma"').replace(
        "qwen3guard-gen-0.6b.toml", "shieldgemma-2b.toml")
    path = tmp_path / "runners" / "gemma-vllm.toml"
    path.parent.mkdir()
    path.write_text(text.replace("../locks/", f"{REPO}/locks/"))
    from guardrepro.run.runners.registry import RUNNERS, backend_of

    logit_backends = [n for n in RUNNERS if backend_of(n).score_logits]
    assert "vllm" not in logit_backends  # the profile's backend declares no score logits
    with pytest.raises(InputError, match=r"only backend .* returns") as info:
        resolve_profile(RunProfile.load(path), home=tmp_path / "home")
    assert info.value.field == "backend"
    assert all(name in str(info.value) for name in logit_backends)
