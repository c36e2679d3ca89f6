"""Each runner declares its options once; registry and doctor read that table."""

from __future__ import annotations

import dataclasses
import hashlib
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from guardrepro.errors import InputError
from guardrepro.run.doctor import gather_facts
from guardrepro.run.runners.options import OptionTable
from guardrepro.run.runners.registry import backend_of, runner_class

ROOT = Path(__file__).resolve().parents[1]


def test_the_table_is_read_without_importing_the_runner() -> None:
    code = ("import sys\nfrom guardrepro.run.runners.registry import backend_of\n"
            "t = backend_of('hf').options\nassert t.default('dtype') == 'float32', t\n"
            "heavy = [m for m in ('torch', 'transformers', 'vllm', 'mlx') if m in sys.modules]\n"
            "assert not heavy, heavy\n"
            "assert 'guardrepro.run.runners.hf_runner' not in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("backend", ["hf", "rule", "vllm"])
def test_the_option_table_lives_in_the_descriptor_alone(backend: str) -> None:
    if backend == "hf":
        pytest.importorskip("torch")
    cls = runner_class(backend_of(backend))
    assert cls.backend == backend
    assert not any(isinstance(v, OptionTable) for v in vars(cls).values())


def test_vllm_options_absent_take_the_declared_defaults() -> None:
    from guardrepro.run.runners.vllm_runner import VLLMOptions

    used = dataclasses.asdict(VLLMOptions.from_mapping({"dtype": "float32"}))
    declared = backend_of("vllm").options.defaults()
    assert declared["dtype"] is None  # required: no default, refused when absent
    assert used == {**declared, "dtype": "float32"}
    with pytest.raises(InputError) as info:
        VLLMOptions.from_mapping({})
    assert info.value.field == "backend_options.dtype"


def test_mlx_options_absent_take_the_declared_defaults() -> None:
    pytest.importorskip("mlx_lm")
    from guardrepro.run.runners.mlx_runner import _validate

    assert _validate({}) == backend_of("mlx").options.defaults()
    assert _validate({"batch_size": 4})["batch_size"] == 4


def test_rule_options_absent_take_the_declared_defaults(tmp_path: Path) -> None:
    """No lookup table, and the pipeline's chunk is the declared batch_size:
    counted as requests per ``generate`` call of a real run."""
    from runner_helpers import write_cohort

    from guardrepro.run.pipeline import run_cohort
    from guardrepro.run.profile import RunProfile
    from guardrepro.run.runners.rule_runner import RuleRunner

    runner = RuleRunner(Path("."), {}, eos_token_ids=(), pad_token_id=None, decode=str)
    assert backend_of("rule").options.default("lookup_table") is None
    assert runner.lookup is None and runner.describe()["lookup_table_sha256"] is None
    sizes: list[int] = []
    real = RuleRunner.generate

    def counting(self: RuleRunner, requests: Any, params: Any) -> Any:
        sizes.append(len(requests))
        return real(self, requests, params)

    cohort = write_cohort(tmp_path / "cohort.jsonl", 5)
    profile = RunProfile.load(ROOT / "runners/rule-nuisance.toml")
    assert "batch_size" not in profile.backend_options
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(RuleRunner, "generate", counting)
        run_cohort(profile, cohort, tmp_path / "run", progress=False)
    batch = backend_of("rule").options.default("batch_size")
    assert sizes == [batch] * (5 // batch) + ([5 % batch] if 5 % batch else [])


def test_hf_runner_refuses_an_undeclared_option() -> None:
    pytest.importorskip("torch")
    from guardrepro.run.runners.hf_runner import _validate

    assert _validate({}) == {**backend_of("hf").options.defaults()}
    with pytest.raises(InputError) as info:
        _validate({"surprise": 1})
    assert info.value.field == "backend_options.surprise"


def test_doctor_fills_the_declared_defaults() -> None:
    facts = gather_facts(backend_of("vllm"), {"dtype": "bfloat16"})
    # declared: max_num_seqs 256, batch_size 1, batch invariance and multiprocessing off
    assert (facts.concurrency, facts.max_num_seqs, facts.batch_invariant_mode,
            facts.multiprocessing) == (1, 256, False, False)
    assert gather_facts(backend_of("hf"), {"batch_size": 4}).dtype == "float32"


def _profile_text(backend: str, options: str) -> str:
    checkpoint = "" if backend == "rule" else '[checkpoint]\ndir = "ckpt"\n\n'
    guard = "rule-nuisance" if backend == "rule" else "llama-guard-3"
    return (f'name = "p"\nbackend = "{backend}"\n\n[guard]\nname = "{guard}"\n\n{checkpoint}'
            f"[backend_options]\n{options}\n\n[decoding]\nmax_new_tokens = 4\n")


@pytest.mark.parametrize(("backend", "options", "field", "problem"), [
    # types: never coerced (a string is not an integer, true is not an integer)
    ("hf", 'batch_size = "4"', "batch_size", "expected an integer >= 1, got '4'"),
    ("hf", "batch_size = true", "batch_size", "expected an integer >= 1, got True"),
    ("mlx", "prefix_reuse = 1", "prefix_reuse", "expected true or false, got 1"),
    ("rule", "lookup_table = 3", "lookup_table", "expected a string, got 3"),
    # choices
    ("hf", 'dtype = "float64"', "dtype",
     "expected one of 'float32', 'bfloat16', 'float16', got 'float64'"),
    ("hf", 'threads = "many"', "threads", "expected an integer >= 1 or one of 'auto', got 'many'"),
    ("mlx", 'device = "tpu"', "device", "expected one of 'cpu', 'gpu', 'default', got 'tpu'"),
    ("hf", 'device = "cuda:x"', "device", "expected cpu, cuda, cuda:N or mps, got 'cuda:x'"),
    # minimums and ranges
    ("hf", "batch_size = 0", "batch_size", "expected an integer >= 1, got 0"),
    ("hf", "threads = 0", "threads", "expected an integer >= 1 or one of 'auto', got 0"),
    ("vllm", 'dtype = "float32"\nseed = -1', "seed", "expected an integer >= 0, got -1"),
    ("vllm", 'dtype = "float32"\ngpu_memory_utilization = 0', "gpu_memory_utilization",
     "expected a number in (0, 1], got 0"),
    ("vllm", 'dtype = "float32"\ngpu_memory_utilization = 1.5', "gpu_memory_utilization",
     "expected a number in (0, 1], got 1.5"),
    # a required option, and a key no table declares
    ("vllm", 'device = "cpu"', "dtype", "needs an explicit dtype"),
    ("mlx", "batch = 2", "batch", "unknown key 'batch'"),
])
def test_a_profile_with_a_bad_option_is_refused_naming_file_and_option(
        tmp_path: Path, backend: str, options: str, field: str, problem: str) -> None:
    from guardrepro.run.profile import RunProfile

    path = tmp_path / "p.toml"
    with pytest.raises(InputError) as info:
        RunProfile.from_text(_profile_text(backend, options), path)
    assert (info.value.file, info.value.field) == (str(path), f"backend_options.{field}")
    assert problem in str(info.value)


@pytest.mark.parametrize(("backend", "options"), [
    ("hf", 'threads = "auto"\ndevice = "cuda:1"\nbatch_size = 8'),
    ("hf", "threads = 3"),
    ("vllm", 'dtype = "bfloat16"\ngpu_memory_utilization = 1\nseed = 0'),
    ("mlx", 'dtype = "bfloat16"\nprefix_reuse = false'),
])
def test_valid_options_load_unchanged(tmp_path: Path, backend: str, options: str) -> None:
    import tomllib

    from guardrepro.run.profile import RunProfile

    profile = RunProfile.from_text(_profile_text(backend, options), tmp_path / "p.toml")
    assert profile.backend_options == tomllib.loads(options)  # as written: nothing filled


def test_a_profiles_options_are_checked_once_when_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading a profile checks each option it gives; doctor, the resolved
    options and ``create_runner`` then take them as checked and check nothing."""
    from guardrepro.run.doctor import diagnose
    from guardrepro.run.profile import RunProfile
    from guardrepro.run.resolve import runner_options
    from guardrepro.run.runners.options import Option
    from guardrepro.run.runners.registry import create_runner

    checked: list[str] = []
    real = Option.problem

    def counting(self: Option, value: Any) -> str | None:
        checked.append(self.name)
        return real(self, value)

    monkeypatch.setattr(Option, "problem", counting)
    path = ROOT / "runners/rule-tool-lookup-toy.toml"
    profile = RunProfile.load(path)
    assert checked == list(profile.backend_options) == ["lookup_table"]
    checked.clear()
    assert diagnose(profile).facts.concurrency == backend_of("rule").options.default("batch_size")
    options = runner_options(profile)
    runner = create_runner(profile.descriptor, Path("."), options, eos_token_ids=(),
                           pad_token_id=None, decode=str)
    assert checked == []
    assert options["lookup_table"] == str(ROOT / "runners/toy-tool-lookup.json")
    table = (ROOT / "runners/toy-tool-lookup.json").read_bytes()
    assert runner.describe()["lookup_table_sha256"] == hashlib.sha256(table).hexdigest()
    # a replaced option is new input: checked when it is replaced
    with pytest.raises(InputError) as info:
        profile.with_backend_options(batch_size=0)
    assert (info.value.file, info.value.field) == (str(path), "backend_options.batch_size")
    assert profile.with_backend_options(batch_size=3).checked_options["batch_size"] == 3
